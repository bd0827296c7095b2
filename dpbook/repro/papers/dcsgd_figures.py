r"""DC-SGD's figures: the sensitivity panels of Figs. 5–7 and 9–11 (accuracy against p, b or sigma_H), and the two
measurements inside training, Fig. 4 (the expected error E(C) of Eq. 4 on one batch's true norms during DP-SGD) and
Fig. 8 (the mean per-sample gradient norm over non-private training).

Figs. 4 and 8 are not accuracies, so they are not :class:`~dpbook.repro.experiment.Experiment` s: each setting is one
measured curve, written once as an analysis file (``<results>/dcsgd/analysis/``, atomically, with provenance) and
read back by the figure. Every function takes the chapter's :class:`~dpbook.repro.papers.dcsgd.Reproduction`.
"""

from __future__ import annotations

__all__ = [
    "AXIS", "STYLES", "sensitivity_figure", "PARAMS", "load_analysis", "measure_fig4", "measure_fig8", "measure",
    "fig4_figure", "fig8_figure"
]

import collections
import hashlib
import json

import numpy as np
import torch
from matplotlib.ticker import NullLocator
from torch import nn

from dpbook.methods.dcsgd import expected_errors_from_norms
from dpbook.per_sample import PerSampleGradients, flat_norms
from dpbook.repro import reproduce, results
from dpbook.repro.experiment import prepare
from dpbook.repro.papers.dcsgd import FIGURES, LABELS, MODEL_NAMES, STUDY
from dpbook.repro.plotting import Panels, axes, legend_below, method_colour, panel_grid
from dpbook.train import evaluate

AXIS = {"p": "p (fraction of examples left unclipped)", "b": "b (number of histogram bins)",
        "sigma_H": "σ_H (histogram noise multiplier)"}
STYLES = ["-", "--", ":", "-."]


def sensitivity_figure(rep, fig: str) -> Panels | None:
    """Figure ``fig`` (5, 6, 7, 9, 10 or 11): mean ± std final test accuracy over ``figure_seeds`` against the swept
    hyperparameter, a line per (method, epsilon), a panel per selected (dataset, model) with results; x marks an
    unreachable point. None when no panel is selected."""
    name, fig_methods, panels = FIGURES[fig]
    points = collections.defaultdict(list)
    for (dataset, model, method, epsilon, value), base in rep.figure_points(fig):
        points[dataset, model, method, epsilon].append((value, reproduce.cell(base, [{}], rep.figure_seeds,
                                                                              rep.results)))
    shown = [(d, m) for d, m in panels if rep.in_figure(d)]
    if not shown:
        return None
    has_results = [(d, m) for d, m in shown
                   if any(c["values"] or c["status"] == "unreachable" for method in fig_methods
                          for epsilon in rep.figure_epsilons for _, c in points[d, m, method, float(epsilon)])]
    missing = [_setting_name(rep, d, m) for d, m in shown if (d, m) not in has_results]
    if not has_results:
        return Panels(None, missing)
    figure, axs = panel_grid(len(has_results))
    for ax, (dataset, model) in zip(axs, has_results):
        methods_text = " and ".join(LABELS[m] for m in fig_methods)
        axes(f"Fig. {fig} ({rep.dataset_names[dataset]}, {MODEL_NAMES[model]}):\n{methods_text}, Adam",
             AXIS[name], "test accuracy (%)", ax=ax)
        for method in fig_methods:
            for k, epsilon in enumerate(rep.figure_epsilons):
                got = points[dataset, model, method, float(epsilon)]
                xs = [v for v, c in got if c["values"]]
                stats = [results.mean_std(100 * np.array(c["values"])) for v, c in got if c["values"]]
                if xs:
                    ax.errorbar(xs, [s[0] for s in stats], yerr=[0 if s[2] < 2 else s[1] for s in stats],
                                color=method_colour(method), ls=STYLES[k % len(STYLES)], marker="o", capsize=3,
                                label=f"{LABELS[method]}, ε = {epsilon:g}")
                for v, c in got:
                    if c["status"] == "unreachable":
                        ax.plot([v], [0], marker="x", color=method_colour(method), ms=8, clip_on=False,
                                transform=ax.get_xaxis_transform())
        if name in ("b", "sigma_H"):
            ax.set_xscale("log")
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(rep.swept[name], [f"{v:g}" for v in rep.swept[name]])
        ax.set_xlim(min(rep.swept[name]) * (0.8 if name != "p" else 0.9), max(rep.swept[name]) * 1.1)
    legend_below(figure, axs)
    return Panels(figure, missing)


def _setting_name(rep, dataset: str, model: str) -> str:
    return f"{rep.dataset_names[dataset]}/{MODEL_NAMES[model]}"


# -- Figs. 4 and 8: measurements inside training -----------------------------------------------------------------

def _fig4_params(rep, dataset: str, model: str) -> dict:
    return dict(figure="4", dataset=dataset, model=model, method="dpsgd", C=1.0, epsilon=8.0, delta="1/N",
                epochs=rep.epochs_of(model), batch_size=rep.batch_size, optimizer="adam", lr=rep.lr, seed=0,
                fractions=[float(f) for f in rep.fig4_fractions], points=int(rep.fig4_points), smoke=bool(rep.smoke))


def _fig8_params(rep, dataset: str, model: str) -> dict:
    return dict(figure="8", dataset=dataset, model=model, epochs=rep.epochs_of(model), batch_size=rep.batch_size,
                optimizer=rep.fig8_optimizer, lr=float(rep.fig8_lr), samples=int(rep.fig8_samples),
                points=int(rep.fig8_points), seed=0, smoke=bool(rep.smoke))


PARAMS = {"fig4": _fig4_params, "fig8": _fig8_params}


def _analysis_path(rep, kind: str, params: dict):
    """The analysis file of a measurement: its kind, setting and a hash of all its parameters."""
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    prefix = "smoke_" if rep.smoke else ""
    return (rep.results / STUDY / results.ANALYSIS_DIR
            / f"{prefix}{kind}_{params['dataset']}_{params['model']}_{key}.json")


def load_analysis(rep, kind: str, dataset: str, model: str) -> dict | None:
    path = _analysis_path(rep, kind, PARAMS[kind](rep, dataset, model))
    return results.read_result(path, required=["parameters"]) if path.exists() else None


def _per_sample_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int) -> torch.Tensor:
    psg = PerSampleGradients(model, nn.functional.cross_entropy)
    return torch.cat([flat_norms(psg(x[i:i + chunk], y[i:i + chunk])) for i in range(0, len(x), chunk)]).cpu()


def measure_fig4(rep, dataset: str, model_name: str) -> None:
    """Train DP-SGD (C = 1, epsilon = 8, Adam) and, at the given fractions of the run, evaluate Eq. 4's E(C) on one
    Poisson batch's true per-sample norms [DCSGD-31]. Skipped when its analysis file exists."""
    params = _fig4_params(rep, dataset, model_name)
    path = _analysis_path(rep, "fig4", params)
    if path.exists():
        return
    run = prepare(rep.base_of("IV", model_name, dataset, 8.0, "dpsgd", C=1.0), data_root=rep.data,
                  download=rep.download, device=rep.device)
    dev, plan, splits, trainer = run.device, run.plan, run.splits, run.trainer()
    trainable = [p for p in run.model.parameters() if p.requires_grad]
    at = {max(1, round(f * trainer.T)): float(f) for f in rep.fig4_fractions}
    d, curves, generator = sum(p.numel() for p in trainable), [], torch.Generator().manual_seed(1)

    def record(tr, info):
        if tr.step in at:
            batch = (torch.rand(len(tr.x_train), generator=generator) < tr.sampler.q).nonzero().flatten().to(dev)
            norms = _per_sample_norms(tr.model, tr.x_train[batch], tr.y_train[batch],
                                     rep.micro_batch_size or 64).numpy()
            C = np.linspace(0, 1.2 * max(float(norms.max(initial=0.0)), 1e-6), int(rep.fig4_points))
            E = expected_errors_from_norms(norms, C, sigma_T=plan.sigma, B=rep.batch_size, d=d)
            curves.append({"step": tr.step, "fraction": at[tr.step], "batch": int(len(batch)),
                           "median_norm": float(np.median(norms)) if len(norms) else None,
                           "C": C.tolist(), "E": E.tolist(), "argmin_C": float(C[E.argmin()])})

    trainer.run(max_steps=max(at), on_step=record)
    results.write_result({"parameters": params, "d": d, "sigma": plan.sigma, "T": trainer.T, "N": len(splits.x_train),
                          "curves": curves, **results.provenance(dev)}, path)


def measure_fig8(rep, dataset: str, model_name: str) -> None:
    """Non-private training (App. A) with the mean per-sample gradient norm of ``fig8_samples`` fixed training
    examples measured at ``fig8_points`` points. Skipped when its analysis file exists."""
    params = _fig8_params(rep, dataset, model_name)
    path = _analysis_path(rep, "fig8", params)
    if path.exists():
        return
    exp = rep.base_of("IV", model_name, dataset, 8.0, "dpsgd", C=1.0).replace(optimizer=rep.fig8_optimizer,
                                                                         lr=rep.fig8_lr)
    run = prepare(exp, data_root=rep.data, download=rep.download, device=rep.device)  # its method stays unused
    dev, splits, model, optimizer = run.device, run.splits, run.model, run.optimizer
    x, y = splits.x_train.to(dev), splits.y_train.to(dev)
    N, generator = len(x), torch.Generator().manual_seed(0)
    probe = torch.randperm(N, generator=generator)[:rep.fig8_samples].to(dev)
    per_epoch = max(1, round(N / rep.batch_size))
    T = exp.epochs * per_epoch
    marks = {round(k * T / max(1, rep.fig8_points - 1)) for k in range(rep.fig8_points)}
    curve, order = [], None
    for step in range(T + 1):
        if step in marks:
            norms = _per_sample_norms(model, x[probe], y[probe], rep.micro_batch_size or 64)
            curve.append({"step": step, "epoch": step / per_epoch, "mean_norm": float(norms.mean())})
        if step == T:
            break
        if step % per_epoch == 0:
            order = torch.randperm(N, generator=generator).to(dev)
        idx = order[(step % per_epoch) * rep.batch_size:(step % per_epoch + 1) * rep.batch_size]
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        optimizer.step()
    test = evaluate(model, splits.x_test.to(dev), splits.y_test.to(dev))
    results.write_result({"parameters": params, "T": T, "N": N, "curve": curve,
                          "final_test_accuracy": test["accuracy"], **results.provenance(dev)}, path)


def measure(rep) -> list[tuple[str, str]]:
    """Run mode: the selected settings of Figs. 4 and 8; a failure is reported like a failed run (what, error)."""
    failures = []
    for kind, settings, measure_one in (("4", rep.fig4_settings, measure_fig4), ("8", rep.fig8_settings, measure_fig8)):
        if kind in rep.figures:
            for dataset, model_name in settings:
                if rep.in_figure(dataset):
                    try:
                        measure_one(rep, dataset, model_name)
                    except Exception as err:  # noqa: BLE001 -- reported, and the chapter's last cell raises
                        failures.append((f"Fig. {kind} {dataset} {model_name}", repr(err)))
                        print(f"FAILED Fig. {kind} {dataset} {model_name}: {err!r}")
    return failures


def fig4_figure(rep) -> Panels | None:
    """Fig. 4: E(C) at the measured points of the run, a panel per selected setting with results; the dashed line
    marks each curve's minimiser. None when no setting is selected."""
    shown = [(d, m) for d, m in rep.fig4_settings if rep.in_figure(d)]
    if not shown:
        return None
    records = {(d, m): load_analysis(rep, "fig4", d, m) for d, m in shown}
    measured = [s for s in shown if records[s] is not None]
    missing = [_setting_name(rep, *s) for s in shown if records[s] is None]
    if not measured:
        return Panels(None, missing)
    figure, axs = panel_grid(len(measured))
    for ax, (dataset, model) in zip(axs, measured):
        axes(f"Fig. 4 ({rep.dataset_names[dataset]}, {MODEL_NAMES[model]}):\nE(C), Eq. 4, during DP-SGD "
             f"(C = 1, ε = 8, Adam)\ntrue norms of one batch", "threshold C (gradient-norm units)",
             "E(C) (squared gradient-norm units)", ax=ax)
        record = records[dataset, model]
        for k, curve in enumerate(record["curves"]):
            line, = ax.plot(curve["C"], curve["E"], color=method_colour("dpsgd"), ls=STYLES[k % len(STYLES)],
                            label=f"step {curve['step']} of {record['T']} (batch of {curve['batch']})")
            ax.axvline(curve["argmin_C"], color=line.get_color(), ls=STYLES[k % len(STYLES)], lw=0.8, alpha=0.6)
        ax.set_yscale("log")
        ax.legend(title=f"d = {record['d']:,}, σ = {record['sigma']:.3f}", loc="upper left",
                  bbox_to_anchor=(1.01, 1))
    return Panels(figure, missing)


def fig8_figure(rep) -> Panels | None:
    """Fig. 8: the mean per-sample gradient norm over non-private training, a line per selected setting with
    results. None when no setting is selected."""
    shown = [(d, m) for d, m in rep.fig8_settings if rep.in_figure(d)]
    if not shown:
        return None
    records = {(d, m): load_analysis(rep, "fig8", d, m) for d, m in shown}
    missing = [_setting_name(rep, *s) for s in shown if records[s] is None]
    if len(missing) == len(shown):
        return Panels(None, missing)
    ax = axes(f"Fig. 8: mean per-sample gradient norm of {rep.fig8_samples} training examples\n"
              f"over non-private {rep.fig8_optimizer.upper()} (learning rate {rep.fig8_lr:g})", "epoch",
              "mean per-sample gradient norm (L2)", figsize=(7, 4))
    for k, (dataset, model) in enumerate(shown):
        if (record := records[dataset, model]) is not None:
            ax.plot([p["epoch"] for p in record["curve"]], [p["mean_norm"] for p in record["curve"]], marker="o",
                    ms=3, color=method_colour("nonprivate"), ls=STYLES[k % len(STYLES)],
                    label=f"{rep.dataset_names[dataset]}, {MODEL_NAMES[model]} "
                          f"(final test accuracy {100 * record['final_test_accuracy']:.1f}%)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Panels(ax.figure, missing)
