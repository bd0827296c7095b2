r"""Reproducing DPDR (Liu et al.): Table 1 and Figures 5–6.

A cell of Table 1 is one (dataset, epsilon, method). It is a base :class:`~dpbook.repro.experiment.Experiment` at the
paper's setting (20 epochs and expected batch size 256, as App. A.1 states; Poisson sampling and plain SGD, as the
book reads Sec. 3 and Alg. 1 [DPDR-29]; protocol "none") and a grid of points, its learning rate included
[DPDR-27]; :mod:`dpbook.repro.reproduce` trains grid point i with seed i and re-trains the best point with seeds
0..n-1. For DPDR's DP-SGD phase App. A.1 says "The parameter selection on DPSGD phase is just the same as original
DPSGD": its learning rate and C_g are those of the best DP-SGD grid point of the same dataset and budget, so a
DPDR cell (and a DIFF or DIFF2 cell, whose DP-SGD steps take C_g the same way) waits for DP-SGD's grid. Fig. 5 is
read from the per-epoch metrics of the Table 1 runs; Fig. 6's points are runs at the best Table 1 points with one
quantity (B, C_alpha, s) changed.

The models are Table 1's (:func:`models`) with the paper's GroupNorm: with ``group_norm`` (the default) a cell trains
``mnist_cnn_gn`` / ``cifar10_cnn_gn`` (a GroupNorm after each convolution, before tanh: our placement, DPDR-21) and
``resnet18_gn`` (GroupNorm already); ``group_norm=False`` trains the CNNs without normalisation layers.

DP-SGD's grid is the learning rates times the clipping bounds; DPDR's sigma_alpha is Table 2's ratio
sigma_alpha / sigma_perp times sigma_perp:

>>> rep = Reproduction(datasets=["mnist"], epsilons=[3.0], methods=["dpsgd", "dpdr"], lr_grid=[0.5], C_grid=[0.1, 1.0])
>>> len(rep.cells), rep.spec(("mnist", 3.0, "dpsgd"))[1]
(2, [{'lr': 0.5, 'C': 0.1}, {'lr': 0.5, 'C': 1.0}])
>>> table2("mnist", 3.0, "sigma_perp"), table2("mnist", 3.0, "sigma_alpha"), rep.ratio_of("mnist", 3.0)
(0.81, 2.0, 2.46914)
>>> rep.model_of("mnist"), Reproduction(group_norm=False).model_of("mnist"), rep.model_of("svhn")
('mnist_cnn_gn', 'mnist_cnn', 'resnet18_gn')
"""

from __future__ import annotations

__all__ = [
    "STUDY", "ROWS", "ALIASES", "LABELS", "paper_tables", "models", "label", "method_of", "paper_row", "table2",
    "crossing", "Reproduction"
]

import functools
from dataclasses import dataclass, field
from typing import ClassVar

import matplotlib.pyplot as plt
import numpy as np

from dpbook.checks import Domain, either, integers, numbers
from dpbook.methods import METHODS
from dpbook.repro import reproduce, results
from dpbook.repro.coverage import Item
from dpbook.repro.experiment import Experiment
from dpbook.repro.papers.chapter import Chapter, method_labels, model_title, setting_title
from dpbook.repro.params import check_known, clean_float, listing, per_dataset
from dpbook.repro.plotting import Panels, axes, method_colour
from dpbook.repro.sources import Source
from dpbook.tasks import TASKS
from dpbook.tuning import grid_product

STUDY = "dpdr"
#: Table 1's rows, in its order: a method of the registry under plain SGD, or "dpadam", DP-SGD under Adam.
ROWS = ("dpdr", "autos", "diff", "diff2", "dpadam", "dpsgd")
#: The names Table 1 gives its rows where they are not the methods' labels.
ALIASES = {"autos": "AutoClip", "dpadam": "DPAdam"}
LABELS = method_labels(ROWS, ALIASES)
PAPER_EPOCHS, PAPER_BATCH_SIZE = 20, 256   # App. A.1 (the table file has no settings fields)


@functools.cache
def paper_tables() -> tuple[dict, dict]:
    """Table 1 (the accuracies) and Table 2 (the noise multipliers), as transcribed in ``data/paper``."""
    return results.load_paper_table("dpdr_table1"), results.load_paper_table("dpdr_table2")


def models() -> dict[str, str]:
    """Table 1's datasets and the model of each, as the table names it (a cell trains
    :meth:`Reproduction.model_of`)."""
    return {row["dataset"]: row["model"] for row in paper_tables()[0]["rows"]}


def label(key: str) -> str:
    """The name Table 1 gives the row ``key``."""
    return LABELS[key]


def method_of(key: str) -> tuple[str, str]:
    """The registry method and the optimizer of Table 1's row ``key``.

    >>> method_of("dpdr"), method_of("dpadam")
    (('dpdr', 'sgd'), ('dpsgd', 'adam'))
    """
    return ("dpsgd", "adam") if key == "dpadam" else (key, "sgd")


def _line_style(key: str) -> dict:
    """One colour per registry method (:mod:`dpbook.repro.plotting`); DPAdam shares DP-SGD's colour, dashed."""
    return dict(color=method_colour(method_of(key)[0]), ls="--" if key == "dpadam" else "-")


def paper_row(dataset: str, epsilon: float, key: str) -> dict | None:
    """Table 1's row of a cell (None if the paper has none)."""
    method, optimizer = method_of(key)
    rows = results.paper_rows(paper_tables()[0], dataset=dataset, epsilon=epsilon, method=method, optimizer=optimizer)
    return rows[0] if rows else None


def _delta_of(dataset: str, epsilon: float) -> float:
    """Table 1's delta of a (dataset, epsilon) pair (its first row's if the pair is not in the table)."""
    table1 = paper_tables()[0]
    rows = results.paper_rows(table1, dataset=dataset, epsilon=epsilon) or table1["rows"]
    return float(rows[0]["delta"])


def table2(dataset: str, epsilon: float, quantity: str) -> float | None:
    """Table 2's printed ``quantity`` (sigma_g, sigma_perp or sigma_alpha) for a (dataset, epsilon) pair, or None.

    >>> table2("svhn", 3.0, "sigma_g"), table2("svhn", 1.0, "sigma_g")
    (0.696, None)
    """
    rows = results.paper_rows(paper_tables()[1], dataset=dataset, epsilon=epsilon, quantity=quantity)
    return rows[0]["value"] if rows else None


def _mean_curve(records: list[dict], column: str) -> np.ndarray:
    """The mean over ``records`` (result files) of a per-epoch ``column``."""
    values = np.array([[float(v) for v in r["epochs"][column]] for r in records])
    return values.mean(axis=0)


def crossing(eps, acc, level: float) -> str | None:
    """The epsilon at which ``acc`` first reaches ``level``, interpolated linearly between epochs; None if it never
    does.

    >>> crossing(np.array([1.0, 2.0, 3.0]), np.array([10.0, 30.0, 50.0]), 40.0)
    '2.500'
    >>> crossing(np.array([1.0, 2.0]), np.array([60.0, 70.0]), 40.0), crossing(np.array([1.0]), np.array([5.0]), 40.0)
    ('≤ 1.000', None)
    """
    above = np.flatnonzero(acc >= level)
    if not len(above):
        return None
    i = above[0]
    if i == 0:
        return f"≤ {eps[0]:.3f}"
    return f"{eps[i - 1] + (level - acc[i - 1]) * (eps[i] - eps[i - 1]) / (acc[i] - acc[i - 1]):.3f}"


@dataclass
class Reproduction(Chapter):
    """The chapter's parameters (see the notebook's parameters cell for each one's meaning), and its cells."""

    SOURCES: ClassVar[dict[str, Source]] = {
        "datasets": Source("Table 1", note="its three datasets"),
        "methods": Source("Table 1", note="its six rows"),
        "epsilons": Source("Table 1"),
        "seeds": Source(reading="DPDR-23"),
        "epochs": Source("App. A.1", note="the paper's 20"),
        "batch_size": Source("App. A.1", "DPDR-22", note="the paper's 256"),
        "group_norm": Source("Sec. 7; App. A.1", "DPDR-21", note="“All of models adopts group normalization”"),
        "lr_grid": Source("App. A.1", "DPDR-27", note="the range [0.1, 2]"),
        "adam_lr_grid": Source(reading="DPDR-26"),
        "C_grid": Source("App. A.1", "DPDR-27", note="the range [0.05, 1]"),
        "C_perp_grid": Source("App. A.1", "DPDR-27", note="the range [0.05, 1]"),
        "C_alpha_grid": Source("App. A.1", "DPDR-27", note="the range 0.05 to 1.5"),
        "C_d_grid": Source("App. A.1", "DPDR-27", note="the range [0.001, 1]"),
        "s": Source("Fig. 6", "DPDR-28", note="Fig. 6's best, on CIFAR-10"),
        "sigma_alpha_ratio": Source("Table 2", note="σ_α / σ_⊥ as Table 2 prints them"),
        "diff2_restart_every": Source(reading="DPDR-25"),
        "autos_gamma": Source(reading="DPDR-30"),
        "fig_dataset": Source("Fig. 5; Fig. 6", note="both are on CIFAR-10"),
        "fig5_epsilon": Source(reading="DPDR-31"),
        "fig5_accuracy_level": Source("Sec. 7.2", note="“2.59 ϵ for 55% accuracy”"),
        "fig6_epsilon": Source(reading="DPDR-31"),
        "fig6_batch_sizes": Source("Fig. 6", "DPDR-31"),
        "fig6_C_alpha": Source("Fig. 6", "DPDR-24", note="its axis, [0.05, 3]"),
        "fig6_s": Source("Fig. 6", "DPDR-31"),
    }
    DOMAINS: ClassVar[dict[str, Domain]] = {
        "epsilons": numbers(above=0), "seeds": integers(1), "epochs": integers(1),
        "batch_size": integers(1), "micro_batch_size": integers(1), "lr_grid": numbers(above=0),
        "adam_lr_grid": numbers(above=0), "C_grid": numbers(above=0), "C_perp_grid": numbers(above=0),
        "C_alpha_grid": numbers(above=0), "C_d_grid": numbers(above=0), "s": integers(1),
        "sigma_alpha_ratio": either(numbers(above=0), "table2"),
        "diff2_restart_every": integers(1), "autos_gamma": numbers(above=0),
        "fig5_epsilon": numbers(above=0), "fig5_accuracy_level": numbers(at_least=0, at_most=100),
        "fig6_epsilon": numbers(above=0), "fig6_batch_sizes": integers(1), "fig6_C_alpha": numbers(above=0),
        "fig6_s": integers(1), "fig6_seeds": integers(1),
    }
    SELECTION: ClassVar[tuple[str, ...]] = ("micro_batch_size", "cells", "fig6_seeds", "run_figure6")
    COVERAGE: ClassVar[dict[str, Item]] = {
        "Table 1": Item("accuracy of DPDR and five baselines on MNIST, CIFAR-10 and SVHN at ε = 3 and 8",
                        "reproducible in run mode",
                        "`Reproduction()`; the table of [the chapter's first page](reproduce_dpdr.ipynb)"),
        "Table 2": Item("the noise multipliers σ_⊥, σ_α and σ_g", "reproduced",
                        "the accountant recomputes σ_g for every cell (the noise table of "
                        "[the protocol page](reproduce_dpdr_protocol.ipynb)); "
                        "[DPDR, part 2](dpdr_accounting.ipynb) checks every row [DPDR-16]"),
        "Fig. 1": Item("left: SGD directions on a linear regression; middle: subtraction against decomposition; "
                       "right: gradient and orthogonal norms during CIFAR-10 training", "CPU analogue",
                       "left and middle in [DPDR, part 1](dpdr_why_decompose.ipynb); right on digits in "
                       "[DPDR, part 3](dpdr_in_training.ipynb); at scale left out: run mode records accuracies, "
                       "not per-step norms"),
        "Fig. 2": Item("a diagram of DPDR's framework", "left out",
                       "a diagram; [One GDR step, taken apart](dpdr_why_decompose_step.ipynb) takes one step "
                       "apart in code"),
        "Fig. 3": Item("the norm of the difference against the gradient's, CIFAR-10", "CPU analogue",
                       "[DPDR, part 3](dpdr_in_training.ipynb), on digits; at scale left out, as Fig. 1 (right)"),
        "Fig. 4": Item("the distribution of orthogonal against difference norms, CIFAR-10", "CPU analogue",
                       "[DPDR, part 3](dpdr_in_training.ipynb), on digits; at scale left out, as Fig. 1 (right)"),
        "Fig. 5": Item("accuracy against steps and against the ε spent, CIFAR-10", "reproducible in run mode",
                       "from the per-epoch metrics of Table 1's CIFAR-10 runs (no extra training)"),
        "Fig. 6": Item("accuracy against B, C_α and s, CIFAR-10", "reproducible in run mode",
                       "`run_figure6`: runs at the best Table 1 points"),
    }

    datasets: list[str] = field(default_factory=lambda: ["mnist", "cifar10", "svhn"])
    methods: list[str] = field(default_factory=lambda: ["dpdr", "autos", "diff", "diff2", "dpadam", "dpsgd"])
    epsilons: list[float] = field(default_factory=lambda: [3.0, 8.0])
    seeds: int = 3
    epochs: int | None = None
    batch_size: int | dict[str, int] | None = None
    micro_batch_size: int | dict[str, int] | None = None
    group_norm: bool = True
    lr_grid: list[float] = field(default_factory=lambda: [0.1, 0.5, 2.0])
    adam_lr_grid: list[float] = field(default_factory=lambda: [0.001, 0.003, 0.01])
    C_grid: list[float] = field(default_factory=lambda: [0.05, 0.3, 1.0])
    C_perp_grid: list[float] = field(default_factory=lambda: [0.05, 0.3, 1.0])
    C_alpha_grid: list[float] = field(default_factory=lambda: [0.05, 0.5, 1.5])
    C_d_grid: list[float] = field(default_factory=lambda: [0.001, 0.03, 1.0])
    s: int = 50
    sigma_alpha_ratio: float | str = "table2"
    diff2_restart_every: int = 50
    autos_gamma: float = 0.01
    cells: list[tuple[str, float, str]] | None = None
    fig_dataset: str = "cifar10"
    fig5_epsilon: float = 3.0
    fig5_accuracy_level: float = 55.0
    fig6_epsilon: float = 3.0
    fig6_batch_sizes: list[int] = field(default_factory=lambda: [64, 256, 1024, 4096])
    fig6_C_alpha: list[float] = field(default_factory=lambda: [0.05, 0.3, 1.0, 3.0])
    fig6_s: list[int] = field(default_factory=lambda: [1, 10, 50, 200, 1000])
    fig6_seeds: int = 1
    run_figure6: bool = True

    def __post_init__(self):
        super().__post_init__()
        self.seeds = int(self.seeds)
        if self.cells is None:   # Table 1's order: epsilon, then method, then dataset
            self.cells = [(d, float(e), k) for e in listing(self.epsilons) for k in listing(self.methods)
                          for d in listing(self.datasets)]
        else:
            self.cells = [(d, float(e), k) for d, e, k in (listing(c) for c in listing(self.cells))]
        check_known("dataset(s)", [d for d, _, _ in self.cells] + [self.fig_dataset], models())
        check_known("method(s)", [k for _, _, k in self.cells], ROWS)
        self.lr_grid, self.adam_lr_grid = listing(self.lr_grid, clean_float), listing(self.adam_lr_grid, clean_float)
        self.C_grid, self.C_perp_grid = listing(self.C_grid, clean_float), listing(self.C_perp_grid, clean_float)
        self.C_alpha_grid, self.C_d_grid = listing(self.C_alpha_grid, clean_float), listing(self.C_d_grid, clean_float)

    # -- a cell as runs ------------------------------------------------------------------------------------------

    def ratio_of(self, dataset: str, epsilon: float) -> float:
        """DPDR's sigma_alpha / sigma_perp: the parameter, else Table 2's ratio for the cell."""
        if self.sigma_alpha_ratio != "table2":
            return clean_float(self.sigma_alpha_ratio)
        perp, alpha = table2(dataset, epsilon, "sigma_perp"), table2(dataset, epsilon, "sigma_alpha")
        if perp is None or alpha is None:
            raise ValueError(f"Table 2 has no sigma_alpha / sigma_perp for {dataset} at epsilon {epsilon:g}; "
                             f"set sigma_alpha_ratio to a number")
        return clean_float(alpha / perp)

    def model_of(self, dataset: str) -> str:
        """The model a cell on ``dataset`` trains: Table 1's, with the paper's GroupNorm (the ``_gn`` variant, DPDR-21)
        when ``group_norm``; a name that already ends in ``_gn`` (``resnet18_gn``) is kept."""
        name = models()[dataset]
        return name + "_gn" if self.group_norm and not name.endswith("_gn") else name

    def setting_of(self, dataset: str) -> str:
        """The dataset and model of a figure's title, as the paper names them."""
        return setting_title(dataset, self.model_of(dataset))

    def base_of(self, key: str, dataset: str, epsilon: float) -> Experiment:
        method, optimizer = method_of(key)
        exp = Experiment(study=STUDY, dataset=dataset, model=self.model_of(dataset), method=method,
                         epsilon=float(epsilon), delta=_delta_of(dataset, epsilon),
                         epochs=PAPER_EPOCHS if self.epochs is None else int(self.epochs),
                         batch_size=int(per_dataset(self.batch_size, dataset, PAPER_BATCH_SIZE)), optimizer=optimizer,
                         lr=1.0, protocol="none", smoke=bool(self.smoke),
                         micro_batch_size=per_dataset(self.micro_batch_size, dataset, None))
        return reproduce.stand_in(exp, self.stand_ins)

    # -- the protocol (:class:`.chapter.Chapter`) ---------------------------------------------------------------

    @property
    def selected(self) -> list[tuple[str, float, str]]:
        """The selected cells (dataset, epsilon, key) in Table 1's order: epsilon, then row, then dataset."""
        order, names = {k: i for i, k in enumerate(ROWS)}, list(models())
        return sorted(self.cells, key=lambda c: (c[1], order[c[2]], names.index(c[0])))

    def spec(self, cell: tuple[str, float, str]) -> tuple[Experiment, list[dict]] | None:
        """(base, grid) of a Table 1 cell; None while it waits for the best DP-SGD point (DPDR, DIFF, DIFF2)."""
        dataset, epsilon, key = cell
        base = self.base_of(key, dataset, epsilon)
        if key == "dpsgd":
            return base, grid_product(lr=self.lr_grid, C=self.C_grid)
        if key == "dpadam":
            return base, grid_product(lr=self.adam_lr_grid, C=self.C_grid)
        if key == "autos":
            return base, grid_product(lr=self.lr_grid, gamma=[clean_float(self.autos_gamma)])
        sgd = self.best_run(*self.spec(self.prerequisite(cell)))
        if sgd is None:
            return None
        C_g = sgd.hyperparameters["C"]
        if key == "dpdr":   # the DP-SGD phase "just the same as original DPSGD" (App. A.1)
            return base, grid_product(lr=[sgd.lr], C_perp=self.C_perp_grid, C_alpha=self.C_alpha_grid, C_g=[C_g],
                                      s=[int(self.s)], sigma_alpha_ratio=[self.ratio_of(dataset, epsilon)])
        if key == "diff":
            return base, grid_product(lr=self.lr_grid, C_d=self.C_d_grid, C_g=[C_g])
        return base, grid_product(lr=self.lr_grid, C_d=self.C_d_grid, C_g=[C_g],
                                  restart_every=[int(self.diff2_restart_every)])

    def prerequisite(self, cell: tuple[str, float, str]) -> tuple[str, float, str]:
        """DPDR, DIFF and DIFF2 take C_g (and DPDR its learning rate) from DP-SGD's best point (App. A.1)."""
        return cell[0], cell[1], "dpsgd"

    def paper_row(self, cell: tuple[str, float, str]) -> dict | None:
        return paper_row(*cell)

    def label(self, cell: tuple[str, float, str]) -> dict[str, object]:
        dataset, epsilon, key = cell
        return {"ε": epsilon, "method": label(key), "dataset": TASKS[dataset].title,
                "model": model_title(self.model_of(dataset))}

    def details(self, cell: tuple, summary: dict) -> dict[str, object]:
        sigma = summary["sigma"]
        return {"chosen": self.chosen(summary["best"]), "σ": "" if sigma is None else f"{sigma:.4f}"}

    def table_of(self, cell: tuple[str, float, str]) -> str:
        return "1"

    def caption(self) -> str:
        table1 = paper_tables()[0]
        title = table1["title"].replace("paramter", "paramter [sic]")  # the paper's typo, quoted verbatim
        return f"**{title}** ({table1['source']}; {table1['statistic']})\n\n"

    def figure_runs(self) -> list[Experiment]:
        """Fig. 6's points (``run_figure6``) once they exist, when fig_dataset and fig6_epsilon are selected."""
        shown = (self.fig_dataset, float(self.fig6_epsilon)) in {(d, e) for d, e, _ in self.cells}
        if not (self.run_figure6 and shown):
            return []
        points, _ = self.figure6_points()
        keys = {k for _, _, k in self.cells}
        return [run for (_, key), pts in points.items() if key in keys for _, run in pts]

    def figure6_points(self) -> tuple[dict, list[str]]:
        """{(panel, key): [(x, run), ...]} at the best Table 1 grid points on fig_dataset, and notes on what is
        missing."""
        epsilon, best, notes = float(self.fig6_epsilon), {}, []
        for key in ("dpdr", "dpsgd"):
            try:
                found = self.spec((self.fig_dataset, epsilon, key))
                best[key] = None if found is None else reproduce.best_run(*found, self.results)
            except ValueError as err:
                best[key], notes = None, notes + [f"{label(key)}: {str(err).splitlines()[0]}"]
            if best[key] is None:
                notes.append(f"{label(key)}: waits for Table 1's grid on {self.fig_dataset} at ε = {epsilon:g}")
        seeds = range(int(self.fig6_seeds))
        points = {}
        for key, run in best.items():
            if run is not None:
                points[("B", key)] = [(B, run.replace(batch_size=int(B), seed=sd))
                                      for B in listing(self.fig6_batch_sizes) for sd in seeds]
        if best["dpdr"] is not None:
            run = best["dpdr"]
            points[("C_alpha", "dpdr")] = [
                (c, run.replace(hyperparameters={**run.hyperparameters, "C_alpha": c}, seed=sd))
                for c in listing(self.fig6_C_alpha, clean_float) for sd in seeds]
            points[("s", "dpdr")] = [
                (int(v), run.replace(hyperparameters={**run.hyperparameters, "s": int(v)}, seed=sd))
                for v in listing(self.fig6_s) for sd in seeds]
        for panel, pts in points.items():
            keep = []
            for x, run in pts:
                reason = reproduce.infeasible(run)
                if reason is None:
                    keep.append((x, run))
                elif f"{panel[0]} = {x}" not in " ".join(notes):
                    notes.append(f"{label(panel[1])} at {panel[0]} = {x}: {reason}")
            points[panel] = keep
        return points, notes

    # -- what the chapter shows ------------------------------------------------------------------------------------

    def noise_table(self) -> str:
        """Per selected (dataset, epsilon): N, B, T, q, DP-SGD's sigma, DPDR's three multipliers and Table 2's."""
        rows = []
        for dataset, epsilon in dict.fromkeys((d, e) for d, e, _ in self.cells):
            base = self.base_of("dpsgd", dataset, epsilon)
            plan = reproduce.plan(base, 1)
            printed = (table2(dataset, epsilon, q) for q in ("sigma_g", "sigma_perp", "sigma_alpha"))
            row = {"dataset": self.setting_of(dataset), "epsilon": f"{epsilon:g}",
                   "N": reproduce.training_size(base), "B": base.batch_size, "T": plan.steps,
                   "q": f"{plan.sample_rate:.5f}", "sigma": f"{plan.sigma:.4f}",
                   "paper": " / ".join(f"{v:g}" if v is not None else "–" for v in printed)}
            try:
                ratio = self.ratio_of(dataset, epsilon)
                dpdr = METHODS["dpdr"].from_plan(plan, C_perp=1.0, C_alpha=1.0, C_g=1.0, s=int(self.s),
                                                 sigma_alpha_ratio=ratio)
                row["dpdr"] = f"{dpdr.sigma_g:.4f} / {dpdr.sigma_perp:.4f} / {dpdr.sigma_alpha:.4f}"
            except ValueError as err:
                row["dpdr"] = "unreachable: " + str(err).splitlines()[0][:80]
            rows.append(row)
        return results.markdown_table(
            rows, ["dataset", "epsilon", "N", "B", "T", "q", "sigma", "dpdr", "paper"],
            ["dataset, model", "ε", "N", "B", "T (steps)", "q", "σ (DP-SGD, ours)",
             f"DPDR σ_g / σ_⊥ / σ_α (ours, s = {self.s})", "Table 2: σ_g / σ_⊥ / σ_α"])

    @staticmethod
    def chosen(run: Experiment | None) -> str:
        """The learning rate and bounds of a cell's chosen point."""
        if run is None:
            return ""
        hp = {k: v for k, v in run.hyperparameters.items() if k not in ("sigma_alpha_ratio",)}
        return f"lr {run.lr:g}, " + ", ".join(f"{k} {v:g}" for k, v in hp.items())

    # -- Fig. 5 ----------------------------------------------------------------------------------------------------

    def convergence(self) -> dict[str, dict]:
        """Per method with records on fig_dataset at fig5_epsilon: the mean curves (step, accuracy in %, epsilon
        spent, test loss) of its chosen point's re-runs, and their number."""
        keys = [k for k in ROWS if k in {c for _, _, c in self.cells}] or list(ROWS)
        curves = {}
        for key in keys:
            records = self.summary((self.fig_dataset, float(self.fig5_epsilon), key))["records"]
            if records:
                curves[key] = {"steps": _mean_curve(records, "step"),
                               "acc": 100 * _mean_curve(records, "test_accuracy"),
                               "eps": _mean_curve(records, "epsilon"), "loss": _mean_curve(records, "test_loss"),
                               "n": len(records)}
        return curves

    def fig5_figure(self) -> Panels:
        """Fig. 5: test accuracy against the step (a) and the epsilon spent (b), test loss against the step (c); no
        figure before a Table 1 run of its setting has results (``fig5_table`` says so)."""
        curves = self.convergence()
        if not curves:
            return Panels(None, [])
        fig, (ax_a, ax_b, ax_c) = plt.subplots(3, 1, figsize=(8, 11), layout="constrained")
        title = f"{self.setting_of(self.fig_dataset)}, ε = {float(self.fig5_epsilon):g}"
        level = float(self.fig5_accuracy_level)
        axes(f"(a) Test accuracy during training\n{title}", "step (optimizer updates)", "test accuracy (%)", ax=ax_a)
        axes(f"(b) Test accuracy against the privacy spent\n{title}", "ε spent so far (RDP, δ as in Table 1)",
             "test accuracy (%)", ax=ax_b)
        axes(f"(c) Test loss (the paper: training loss)\n{title}", "step (optimizer updates)",
             "test loss (cross-entropy, nats)", ax=ax_c)
        for key, c in curves.items():
            name = f"{label(key)} (n={c['n']})"
            ax_a.plot(c["steps"], c["acc"], marker=".", label=name, **_line_style(key))
            ax_b.plot(c["eps"], c["acc"], marker=".", label=name, **_line_style(key))
            ax_c.plot(c["steps"], c["loss"], marker=".", label=name, **_line_style(key))
        ax_b.axhline(level, color="0.4", lw=1, ls=":", label=f"{level:g}% level")
        for ax in (ax_a, ax_b, ax_c):
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
        return Panels(fig, [])

    def fig5_table(self) -> str:
        """Per method of Fig. 5: the epsilon spent when its mean accuracy first reaches fig5_accuracy_level, its final
        accuracy and epsilon; or why there is nothing to show."""
        level = float(self.fig5_accuracy_level)
        reach = [{"method": label(key), "eps": crossing(c["eps"], c["acc"], level) or "not reached",
                  "final": f"{c['acc'][-1]:.2f}", "spent": f"{c['eps'][-1]:.3f}"}
                 for key, c in self.convergence().items()]
        if not reach:
            return (f"Fig. 5: no Table 1 run on {self.fig_dataset} at epsilon {float(self.fig5_epsilon):g} yet "
                    f"(not run yet)")
        return results.markdown_table(
            reach, ["method", "eps", "final", "spent"],
            ["method", f"ε spent when the mean accuracy first reaches {level:g}%", "final accuracy (%)",
             "ε spent at the end"])

    # -- Fig. 6 ----------------------------------------------------------------------------------------------------

    def fig6_figure(self) -> Panels:
        """Fig. 6: final test accuracy against B (a), DPDR's C_alpha (b) and s (c), DP-SGD's Table 1 cell as a band;
        only the panels with results are drawn (``fig6_notes`` says what the others wait for)."""
        points, _ = self.figure6_points()
        dpsgd_values = self.summary((self.fig_dataset, float(self.fig6_epsilon), "dpsgd"))["values"]
        reference = 100 * np.array(dpsgd_values) if dpsgd_values else None
        where = f"{self.setting_of(self.fig_dataset)}, ε = {float(self.fig6_epsilon):g}"
        titles = {"B": (f"(a) Expected batch size\n{where}", "expected batch size B (log scale)"),
                  "C_alpha": (f"(b) DPDR's coefficient bound\n{where}",
                              "C_α (clipping bound of the coefficients, log scale)"),
                  "s": (f"(c) DPDR's GDR length\n{where}", r"GDR length $s_{\mathrm{GDR}}$ (last GDR step, log scale)")}
        measured = {}  # (panel, method) -> {x: [final accuracy (%) of each seed]}
        for (panel, key), runs in points.items():
            for x, run in runs:
                if run.path(self.results).exists():
                    accuracy = 100 * results.final_metric(results.read_result(run.path(self.results)))
                    measured.setdefault((panel, key), {}).setdefault(x, []).append(accuracy)
        drawn = [p for p in titles if any((p, key) in measured for key in ("dpdr", "dpsgd"))]
        missing = [titles[p][0].split("\n")[0] for p in titles if p not in drawn]
        if not drawn:
            return Panels(None, missing)
        fig, panels = plt.subplots(len(drawn), 1, figsize=(8, 3.7 * len(drawn)), squeeze=False, layout="constrained")
        for ax, panel in zip(panels[:, 0], drawn):
            axes(*titles[panel], "final test accuracy (%)", ax=ax)
            ax.set_xscale("log", base=2 if panel == "B" else 10)
            for key in ("dpdr", "dpsgd"):
                if (by_x := measured.get((panel, key))) is not None:
                    xs = sorted(by_x)
                    stats = [results.mean_std(by_x[x]) for x in xs]
                    ax.errorbar(xs, [m for m, _, _ in stats], yerr=[0.0 if n == 1 else sd for _, sd, n in stats],
                                marker="o", capsize=3, label=label(key), **_line_style(key))
            if panel != "B" and reference is not None:
                ref_mean, ref_std, ref_n = results.mean_std(reference)
                half = 0.0 if ref_n == 1 else ref_std
                ax.axhspan(ref_mean - half, ref_mean + half, color="0.6", alpha=0.3)
                ax.axhline(ref_mean, color=method_colour("dpsgd"), lw=1, label=f"DP-SGD, Table 1 (n={ref_n})")
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
        return Panels(fig, missing)

    def fig6_notes(self) -> list[str]:
        """What Fig. 6 is missing: a method whose Table 1 grid is not done, a point that cannot run at its noise."""
        return self.figure6_points()[1]
