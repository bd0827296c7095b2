r"""Reproducing DP-PSASC (Huang et al.): Table III, with Table II's settings, learning curves and learning rates.

A cell of Table III is one (benchmark, method). It is a base :class:`~dpbook.repro.experiment.Experiment` at Table
II's setting (protocol "none") and a grid of learning rates times the method's own points (C and r from Table II,
s from Table III, DP-PSASC*'s momentum constants [PSASC-15]); :mod:`dpbook.repro.reproduce` trains grid point i with
seed i and re-trains the best point with seeds 0..n-1.

The paper gives no learning rate [PSASC-29]. The grid is one of effective learning rates
:math:`\eta_\mathrm{eff} = \mathrm{lr}\cdot\Delta/\gamma_1` (``lr_scaling="sensitivity"``), so that every method
moves its weights by steps of the same size whatever its sensitivity :math:`\Delta`.

On MNIST (C = 0.3, s = 0.9), DP-SGD's sensitivity is C and DP-PSASC's C/s, so eta_eff = 1 is two learning rates:

>>> rep = Reproduction(datasets=["mnist"], methods=["dpsgd", "psasc"], lr_grid=[1.0])
>>> [rep.spec(("mnist", method))[1] for method in ("dpsgd", "psasc")]
[[{'lr': 3.33333, 'C': 0.3}], [{'lr': 3.0, 'C': 0.3, 'r': 0.0001, 's': 0.9}]]
"""

from __future__ import annotations

__all__ = ["STUDY", "LABELS", "RENAMED", "paper_point", "paper_tables", "settings", "sensitivity", "Reproduction"]

import functools
from dataclasses import dataclass, field
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np
import torch

from dpbook import checks
from dpbook.checks import Domain, integers, numbers
from dpbook.methods import METHODS
from dpbook.methods.registry import hyperparameter_names
from dpbook.repro import reproduce, results
from dpbook.repro.cast import MOMENTUM_AXES
from dpbook.repro.coverage import Item
from dpbook.repro.experiment import Experiment
from dpbook.repro.papers.chapter import Chapter, method_labels, model_title, setting_title
from dpbook.repro.params import check_known, clean_float, listing, per_dataset
from dpbook.repro.plotting import Panels, axes, method_colour
from dpbook.repro.sources import Source
from dpbook.tasks import TASKS
from dpbook.tuning import grid_product

STUDY = "psasc"
#: Table III's columns, as the chapter labels them.
LABELS = method_labels(("dpsgd", "autos", "psac", "psasc", "psasc-momentum"))

#: The paper's symbols that a method's class names otherwise: Auto-S's stability constant gamma is the paper's r.
RENAMED = {"autos": {"r": "gamma"}}


def paper_point(method: str, **symbols) -> dict:
    """The hyperparameters of ``method`` among the paper's shared symbols (C, r, s; DP-PSASC*'s K0, gamma0,
    gamma1): those its class takes, under its own names, in the order given.

    >>> paper_point("autos", C=0.3, r=1e-4, s=0.9), paper_point("psac", C=0.3, r=1e-4, s=0.9)
    ({'gamma': 0.0001}, {'C': 0.3, 'r': 0.0001})
    """
    named = {RENAMED.get(method, {}).get(k, k): v for k, v in symbols.items()}
    accepted = hyperparameter_names(METHODS[method])
    return {k: v for k, v in named.items() if k in accepted}


@functools.cache
def paper_tables() -> tuple[dict, dict]:
    """Table II (the settings) and Table III (the accuracies), as transcribed in ``data/paper``."""
    return results.load_paper_table("psasc_table2"), results.load_paper_table("psasc_table3")


def settings() -> dict[str, dict]:
    """Table II's row of each benchmark: model, N, B, epochs, (epsilon, delta), C, r."""
    return {row["dataset"]: row for row in paper_tables()[0]["rows"]}


@functools.cache
def sensitivity(method: str, point: tuple) -> float:
    """The L2 sensitivity of one step of ``method`` at the hyperparameters ``point`` (sorted items)."""
    m = METHODS[method](sigma=1.0, **dict(point))
    m.bind([torch.zeros(1)], expected_batch_size=1)
    return m.sensitivity()


@dataclass
class Reproduction(Chapter):
    """The chapter's parameters (see the notebook's parameters cell for each one's meaning), and its cells."""

    SOURCES: ClassVar[dict[str, Source]] = {
        "datasets": Source("Table II; Table III", note="its five benchmarks"),
        "methods": Source("Table III", note="its five columns"),
        "seeds": Source("Sec. V-A", note="“All experiments are conducted 5 times”"),
        "epochs": Source("Table II", "PSASC-2", note="Table II's, per benchmark"),
        "batch_size": Source("Table II", note="Table II's, per benchmark"),
        "paper_N": Source("Table II", "PSASC-23", note="Table II's 40,000 FashionMNIST examples"),
        "s": Source("Table III", note="the s Table III prints per benchmark"),
        "optimizer": Source(reading="PSASC-29"),
        "lr_grid": Source(reading="PSASC-29"),
        "lr_scaling": Source(reading="PSASC-29"),
        "lr_grids": Source(reading="PSASC-29"),
        "momentum_grid": Source(reading="PSASC-15"),
    }
    DOMAINS: ClassVar[dict[str, Domain]] = {
        "seeds": integers(1), "epochs": integers(1), "batch_size": integers(1),
        "micro_batch_size": integers(1), "s": numbers(above=0, at_most=1), "lr_grid": numbers(above=0),
        "lr_grids": numbers(above=0), "momentum_grid": numbers(above=0),
    }
    SELECTION: ClassVar[tuple[str, ...]] = ("micro_batch_size", "cells", "curve_datasets")
    COVERAGE: ClassVar[dict[str, Item]] = {
        "Table I": Item("symbols and notation", "left out",
                        "notation, not a result: the book's Notation page gives dpbook's names"),
        "Table II": Item("each benchmark's N, B, epochs, r, C and (ε, δ)", "transcribed",
                         "`data/paper/psasc_table2.json`; the settings of every cell, shown by `settings_table`"),
        "Table III": Item("test accuracy of the five methods on the five benchmarks", "reproducible in run mode",
                          "`Reproduction()`; the table of [the chapter's first page](reproduce_psasc.ipynb)"),
        "Fig. 1": Item("a diagram of DP-SGD", "left out", "a diagram, no data"),
        "Fig. 2": Item("per-sample gradient norms in the last 10 epochs (FashionMNIST, CelebA)", "CPU analogue",
                       "[DP-PSASC in training: the per-sample norms](psasc_in_training_norms.ipynb), on digits "
                       "[PSASC-39]; at scale left out: run mode records accuracies, not per-sample norms"),
        **{f"Fig. {n}": Item(f"gradient similarity ({data})", "CPU analogue",
                             "[DP-PSASC in training: the similarities](psasc_in_training_similarity.ipynb), on digits; "
                             "at scale left out: run mode records no per-step gradients")
           for n, data in ((3, "FashionMNIST"), (4, "MNIST"), (5, "CIFAR-10"), (6, "CelebA"))},
        "Fig. 7": Item("parameter and gradient similarities (Imagenette)", "CPU analogue",
                       "[DP-PSASC in training: the similarities](psasc_in_training_similarity.ipynb), on digits, "
                       "with the book's reading of parameter similarity [PSASC-38]; at scale left out, as Figs. 3–6"),
        "Fig. 8": Item("average gradient scaling weights of DP-PSAC and DP-PSASC", "CPU analogue",
                       "[DP-PSASC in training: the scaling weights](psasc_in_training_norms.ipynb); the weight "
                       "functions in [The weight functions](psasc_weights.ipynb)"),
        "Fig. 9": Item("a diagram of why DP-PSASC's gradients can be less similar", "left out",
                       "a diagram; [The weight functions](psasc_weights.ipynb) draws the weights it explains"),
    }

    datasets: list[str] = field(default_factory=lambda: ["mnist", "fashionmnist", "cifar10-simclr", "celeba",
                                                         "imagenette"])
    methods: list[str] = field(default_factory=lambda: list(LABELS))
    seeds: int = 5
    epochs: int | dict[str, int] | None = None
    batch_size: int | dict[str, int] | None = None
    micro_batch_size: int | dict[str, int] | None = None
    paper_N: list[str] = field(default_factory=lambda: ["fashionmnist"])
    s: float | None = None
    optimizer: str = "sgd"
    lr_grid: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0])
    lr_scaling: str = "sensitivity"
    lr_grids: dict[str, list[float]] = field(default_factory=dict)
    momentum_grid: list[dict] = field(default_factory=lambda: grid_product(K0=(2,), **MOMENTUM_AXES))
    cells: list[tuple[str, str]] | None = None
    curve_datasets: list[str] | None = None

    def __post_init__(self):
        super().__post_init__()
        self.seeds = int(self.seeds)
        if self.cells is None:
            self.cells = [(d, m) for d in listing(self.datasets) for m in listing(self.methods)]
        else:
            self.cells = [tuple(listing(c)) for c in listing(self.cells)]
        check_known("benchmark(s)", [d for d, _ in self.cells], settings())
        check_known("method(s)", [m for _, m in self.cells], LABELS)
        checks.one_of("lr_scaling", self.lr_scaling, ("sensitivity", "none"))
        self.curve_sets = (listing(self.curve_datasets) if self.curve_datasets is not None
                           else list(dict.fromkeys(d for d, _ in self.cells)))
        check_known("benchmark(s) in curve_datasets", self.curve_sets, settings())

    # -- a cell as runs ------------------------------------------------------------------------------------------

    def s_of(self, dataset: str) -> float:
        """DP-PSASC's s: the parameter, else the one Table III prints for the benchmark."""
        if self.s is not None:
            return clean_float(self.s)
        return clean_float(results.paper_rows(paper_tables()[1], dataset=dataset, method="psasc")[0]["s"])

    def base_of(self, dataset: str, method: str) -> Experiment:
        st = settings()[dataset]
        exp = Experiment(study=STUDY, dataset=dataset, model=st["model"], method=method, epsilon=float(st["epsilon"]),
                         delta=float(st["delta"]), epochs=int(per_dataset(self.epochs, dataset, st["epochs"])),
                         batch_size=int(per_dataset(self.batch_size, dataset, st["batch_size"])),
                         optimizer=self.optimizer, lr=1.0, protocol="none",
                         train_size=int(st["N"]) if dataset in listing(self.paper_N) else None, smoke=bool(self.smoke),
                         micro_batch_size=per_dataset(self.micro_batch_size, dataset, None))
        return reproduce.stand_in(exp, self.stand_ins)

    def points(self, dataset: str, method: str) -> list[dict]:
        """The method's own hyperparameters: C and r from Table II, s from Table III, DP-PSASC*'s momentum grid."""
        shared = dict(C=clean_float(settings()[dataset]["C"]), r=clean_float(settings()[dataset]["r"]),
                      s=self.s_of(dataset))
        if method != "psasc-momentum":
            return [paper_point(method, **shared)]
        return [paper_point(method, **shared, K0=int(p["K0"]), gamma0=clean_float(p["gamma0"]),
                            gamma1=clean_float(p["gamma1"])) for p in listing(self.momentum_grid)]

    def eta_grid(self, dataset: str) -> list[float]:
        return listing(per_dataset(self.lr_grids, dataset, None) or self.lr_grid, clean_float)

    def lr_of(self, method: str, point: dict, eta: float) -> float:
        """The learning rate of grid value ``eta``: eta itself, or eta * gamma1 / sensitivity."""
        if self.lr_scaling == "none":
            return clean_float(eta)
        return clean_float(eta * point.get("gamma1", 1.0) / sensitivity(method, tuple(sorted(point.items()))))

    def eta_of(self, run: Experiment) -> float:
        """The grid value (effective learning rate) of a run: the inverse of :meth:`lr_of`."""
        if self.lr_scaling == "none":
            return run.lr
        point = dict(run.hyperparameters)
        return clean_float(run.lr * sensitivity(run.method, tuple(sorted(point.items()))) / point.get("gamma1", 1.0))

    # -- the protocol (:class:`.chapter.Chapter`) ---------------------------------------------------------------

    @property
    def selected(self) -> list[tuple[str, str]]:
        return self.cells

    def spec(self, cell: tuple[str, str]) -> tuple[Experiment, list[dict]]:
        """(base, grid) of a Table III cell (dataset, method): every learning rate of the grid x every hyperparameter
        point."""
        dataset, method = cell
        grid = [{"lr": self.lr_of(method, point, eta), **point}
                for point in self.points(dataset, method) for eta in self.eta_grid(dataset)]
        return self.base_of(dataset, method), grid

    def paper_row(self, cell: tuple[str, str]) -> dict | None:
        rows = results.paper_rows(paper_tables()[1], dataset=cell[0], method=cell[1])
        return rows[0] if rows else None

    CELL_ONLY = ("s",)

    def label(self, cell: tuple[str, str]) -> dict[str, object]:
        dataset, method = cell
        return {"benchmark": TASKS[dataset].title, "model": model_title(settings()[dataset]["model"]),
                "method": LABELS[method],
                "s": f"{self.s_of(dataset):g}" if method.startswith("psasc") else ""}

    def details(self, cell: tuple, summary: dict) -> dict[str, object]:
        run = summary["best"]
        if run is None:
            return {"chosen": ""}
        text = f"lr {run.lr:.3g} (η_eff {self.eta_of(run):g})"
        if run.method == "psasc-momentum":
            text += ", " + ", ".join(f"{k} {run.hyperparameters[k]:g}" for k in ("K0", "gamma0", "gamma1"))
        return {"chosen": text}

    def table_of(self, cell: tuple[str, str]) -> str:
        return "III"

    def caption(self) -> str:
        table3 = paper_tables()[1]
        return f"**{table3['title']}** ({table3['source']}; {table3['statistic']})\n\n"

    # -- what the chapter shows ------------------------------------------------------------------------------------

    def settings_table(self) -> str:
        """Table II's settings of the selected benchmarks in two tables that fit the page: what they imply (T, q,
        sigma), then the weights' constants and each method's learning-rate grid (lowest–highest (points))."""
        settings_rows, method_rows = [], []
        for dataset in dict.fromkeys(d for d, _ in self.cells):
            st, base = settings()[dataset], self.base_of(dataset, "dpsgd")
            plan = reproduce.plan(base, 1)
            name = setting_title(dataset, st["model"])
            settings_rows.append({"benchmark": name, "N": f"{st['N']} / {reproduce.training_size(base)}",
                                  "B": base.batch_size, "epochs": base.epochs, "T": plan.steps,
                                  "q": f"{plan.sample_rate:.5f}", "budget": f"({st['epsilon']:g}, {st['delta']:g})",
                                  "sigma": f"{plan.sigma:.4f}"})
            row = {"benchmark": name, "C": f"{st['C']:g}", "r": f"{st['r']:g}", "s": f"{self.s_of(dataset):g}"}
            for method in LABELS:
                lrs = sorted({point["lr"] for point in self.spec((dataset, method))[1]})
                row[method] = f"{lrs[0]:.3g}" if len(lrs) == 1 else f"{lrs[0]:.3g}–{lrs[-1]:.3g} ({len(lrs)})"
            method_rows.append(row)
        return results.markdown_table(
            settings_rows, ["benchmark", "N", "B", "epochs", "T", "q", "budget", "sigma"],
            ["benchmark, model", "N (Table II / used)", "B", "epochs", "T (steps)", "q", "(ε, δ)", "σ"],
        ) + "\n\n" + results.markdown_table(
            method_rows, ["benchmark", "C", "r", "s", *LABELS],
            ["benchmark, model", "C", "r", "s (Table III)", *(f"lr {LABELS[m]}" for m in LABELS)])

    def curves(self, dataset: str) -> tuple[dict, dict]:
        """Per method: the chosen point's per-epoch test accuracy (a row per re-run), and (eta_eff, final accuracy)
        of every recorded grid run, grouped by hyperparameter point."""
        curves, sweeps = {}, {}
        for method in LABELS:
            if self.curve_datasets is None and (dataset, method) not in self.cells:
                continue
            try:
                info = self.summary((dataset, method))
                runs = reproduce.search(*self.spec((dataset, method)))
            except ValueError:
                continue
            if info["records"]:
                curves[method] = (np.array(info["records"][0]["epochs"]["epoch"]),
                                  np.array([[100 * float(v) for v in r["epochs"]["test_accuracy"]]
                                            for r in info["records"]]))
            for run in runs:
                if run.path(self.results).exists():
                    point = tuple(sorted(run.hyperparameters.items()))
                    sweeps.setdefault(method, {}).setdefault(point, []).append(
                        (self.eta_of(run), 100 * results.final_metric(results.read_result(run.path(self.results)))))
        return curves, sweeps

    def curves_figure(self) -> Panels:
        """Learning curves (left) and the final accuracy of every grid point against its learning rate (right), one
        row per benchmark with results; the benchmarks without any are named in ``missing``."""
        data = {d: self.curves(d) for d in self.curve_sets}
        shown = [d for d in self.curve_sets if data[d][0] or data[d][1]]
        missing = [d for d in self.curve_sets if d not in shown]
        if not shown:
            return Panels(None, missing)
        fig, grid_axes = plt.subplots(len(shown), 2, figsize=(9.5, 4.4 * len(shown)), squeeze=False,
                                      layout="constrained")
        for (ax_curve, ax_lr), dataset in zip(grid_axes, shown):
            st = settings()[dataset]
            where = f"{setting_title(dataset, st['model'])}, (ε, δ) = ({st['epsilon']:g}, {st['delta']:g})"
            axes(f"Test accuracy per epoch, chosen points\n{where}", "epoch", "test accuracy (%)", ax=ax_curve)
            axes(f"Final test accuracy of every grid point\n{where}", "η_eff = lr · sensitivity / γ1 (log scale)"
                 if self.lr_scaling == "sensitivity" else "learning rate (log scale)", "final test accuracy (%)",
                 ax=ax_lr)
            ax_lr.set_xscale("log")
            curves, sweeps = data[dataset]
            for method, (epoch, acc) in curves.items():
                ax_curve.plot(epoch, acc.mean(0), marker=".", color=method_colour(method),
                              label=f"{LABELS[method]} (n={len(acc)})")
                if len(acc) > 1:
                    ax_curve.fill_between(epoch, acc.mean(0) - acc.std(0, ddof=1), acc.mean(0) + acc.std(0, ddof=1),
                                          color=method_colour(method), alpha=0.15)
            for method, by_point in sweeps.items():
                for i, pts in enumerate(by_point.values()):  # a line per hyperparameter point (DP-PSASC*'s grid)
                    ax_lr.plot(*zip(*sorted(pts)), marker="o", color=method_colour(method),
                               alpha=1.0 if i == 0 else 0.5, label=LABELS[method] if i == 0 else None)
            ax_lr.legend(loc="upper left", bbox_to_anchor=(1.01, 1))  # a row is drawn once its grid has results
            if curves:
                ax_curve.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
            else:  # the grid is not complete, so no method has chosen its point yet
                ax_curve.text(0.5, 0.5, "no point chosen yet:\nthe grid is not complete", transform=ax_curve.transAxes,
                              ha="center", va="center", color="0.45")
        return Panels(fig, missing)
