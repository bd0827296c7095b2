r"""Reproducing DC-SGD (Wei et al.): Tables I–V and VIII, and the runs of Figs. 5–7 and 9–11.

A cell of a table is one (model, dataset, epsilon, method) of the paper's transcribed table. It becomes a base
:class:`~dpbook.repro.experiment.Experiment` with the table's optimizer and tuning protocol (II: Liu–Talwar, III:
RDP composition, IV, V, VIII: no tuning cost) and a grid (Table VII's, with SGD times its learning rates, Table VI);
:mod:`dpbook.repro.reproduce` turns it into runs and reads it back. A figure point is one run of a method's
defaults with one hyperparameter swept (p, b or sigma_H), at no tuning cost. Figs. 4 and 8 are measurements inside
training, not accuracies: :mod:`.dcsgd_figures`.

>>> rep = Reproduction(table="IV", datasets=["mnist"], methods=["dcsgd-e"], epsilons=[1.0])
>>> rep.selected
[Cell(table='IV', model='mnist_cnn', dataset='mnist', epsilon=1.0, method='dcsgd-e')]
>>> rep.grid_of("IV", "dcsgd-e")
[{}]
>>> len(rep.grid_of("V", "dcsgd-e")), rep.grid_of("V", "dcsgd-e")[0]
(20, {'lr': 1e-05})
"""

from __future__ import annotations

__all__ = [
    "STUDY", "TABLES", "PROTOCOL", "OPTIMIZER", "PAPER_EPOCHS", "MODEL_NAMES", "DATASET_NAMES", "COMPARED", "LABELS",
    "paper_table", "TABLE_VII", "TUNED_HYPERPARAMETERS", "paper_grid", "GRID_SIZES", "GRID_SIZES_SGD", "Setting",
    "DCSGD_SETTINGS", "search_sigma", "sigma_text", "PAPER_SYMBOLS", "FIGURES", "FIGURE_DEFAULTS", "rename", "Cell",
    "Reproduction", "table_cells", "hms"
]

import collections
import functools
import json
import math
import os
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np

from dpbook import checks
from dpbook.checks import Domain, integers, numbers
from dpbook.methods.dcsgd import run_sigma_H
from dpbook.repro import reproduce, results
from dpbook.repro.coverage import Item
from dpbook.repro.experiment import Experiment
from dpbook.repro.papers.chapter import MODEL_TITLES, Chapter, method_labels
from dpbook.repro.params import check_known, listing
from dpbook.repro.sources import Source
from dpbook.tasks import TASKS
from dpbook.tuning import calibrate_sigma, grid_product

STUDY = "dcsgd"
#: The paper's tables of results (Table I is times) and the transcribed file of each.
TABLES = {"II": 2, "III": 3, "IV": 4, "V": 5, "VIII": 8}
PROTOCOL = {"II": "lt", "III": "rdp", "IV": "none", "V": "none", "VIII": "none"}
OPTIMIZER = {"II": "adam", "III": "adam", "IV": "adam", "V": "sgd-momentum", "VIII": "adam"}
PAPER_EPOCHS = {"mnist_cnn": 10, "resnet18_gn": 20, "resnet34_gn": 20, "bert_base": 5, "char_lstm": 20}
MODEL_NAMES = {key: MODEL_TITLES[key] for key in ("mnist_cnn", "resnet18_gn", "resnet34_gn", "bert_base", "char_lstm")}
#: The paper's datasets, in its tables' order, by their titles in the task registry.
DATASET_NAMES = {key: TASKS[key].title for key in ("mnist", "cifar10", "svhn", "qnli", "names")}
#: The methods the paper compares, in its tables' order, and their labels (the paper calls Auto-S "AutoClip").
COMPARED = ("dpsgd", "dcsgd-p", "dcsgd-e", "adaclip", "dynamic", "autos")
LABELS = method_labels(COMPARED, {"autos": "AutoClip"})
#: figure -> (swept hyperparameter, methods, panels (dataset, model)); Sec. VI-C and App. F.
FIGURES = {
    "5": ("p", ["dcsgd-p"], [("svhn", "resnet18_gn"), ("qnli", "bert_base")]),
    "6": ("b", ["dcsgd-p", "dcsgd-e"], [("svhn", "resnet18_gn"), ("qnli", "bert_base")]),
    "7": ("sigma_H", ["dcsgd-p", "dcsgd-e"], [("svhn", "resnet18_gn"), ("qnli", "bert_base")]),
    "9": ("p", ["dcsgd-p"], [("cifar10", "resnet18_gn"), ("mnist", "mnist_cnn")]),
    "10": ("b", ["dcsgd-p", "dcsgd-e"], [("cifar10", "resnet18_gn"), ("mnist", "mnist_cnn")]),
    "11": ("sigma_H", ["dcsgd-p", "dcsgd-e"], [("cifar10", "resnet18_gn"), ("mnist", "mnist_cnn")]),
}
FIGURE_DEFAULTS = {"b": 20}  # a point at the default is the default run (shared with the tables and figures)


@functools.cache
def paper_table(t: str) -> dict:
    """Table ``t`` ("I", "II", ...) as transcribed in ``data/paper``."""
    return results.load_paper_table(f"dcsgd_table{({'I': 1, 'VI': 6, 'VII': 7, **TABLES})[t]}")


#: Table VII (Appendix E): the candidate values of every tuned hyperparameter.
#: "lr" is the learning rate eta, {2^i x 1e-5, i = 0..19}, and is tuned only with SGD (momentum 0.9).
TABLE_VII: dict[str, tuple[float, ...]] = {row["hyperparameter"]: tuple(row["values"])
                                           for row in paper_table("VII")["rows"]}

#: Table VI: the hyperparameters each method tunes (besides the SGD learning rate), each mapped to the Table VII
#: row its candidates come from. Du et al.'s "C" is its initial threshold C_0. The names are the paper's symbols
#: (:data:`PAPER_SYMBOLS` maps them to the methods' keyword arguments). AutoClip tunes nothing (App. G).
TUNED_HYPERPARAMETERS: dict[str, dict[str, str]] = {row["method"]: row["hyperparameters"]
                                                    for row in paper_table("VI")["rows"]}


def paper_grid(method: str, optimizer: str = "adam") -> list[dict[str, float]]:
    """The grid of Tables VI and VII for ``method``, as a list of hyperparameter dicts (the paper's symbols).

    With ``optimizer="adam"`` the learning rate is not tuned (Adam defaults, Sec. V-C). With ``"sgd"`` every point
    is combined with the 20 learning rates of Table VII.

    >>> paper_grid("adaclip")[:2]
    [{'p': 0.1, 'eta_C': 0.1}, {'p': 0.1, 'eta_C': 0.15}]
    >>> paper_grid("dcsgd-e"), len(paper_grid("dcsgd-e", "sgd"))
    ([{}], 20)
    """
    checks.one_of("method", method, sorted(TUNED_HYPERPARAMETERS))
    checks.one_of("optimizer", optimizer, ("adam", "sgd"), "Table VI")
    axes = {name: TABLE_VII[row] for name, row in TUNED_HYPERPARAMETERS[method].items()}
    if optimizer == "sgd":
        axes["lr"] = TABLE_VII["lr"]
    return grid_product(**axes)


#: Grid sizes G with Adam (Table I's multipliers): DP-SGD 10, DC-SGD-P 9, DC-SGD-E 1, Andrew 45, Du 90.
GRID_SIZES: dict[str, int] = {m: len(paper_grid(m, "adam")) for m in TUNED_HYPERPARAMETERS}
#: Grid sizes G with SGD (times the 20 learning rates): 200, 180, 20, 900, 1800.
GRID_SIZES_SGD: dict[str, int] = {m: len(paper_grid(m, "sgd")) for m in TUNED_HYPERPARAMETERS}


@dataclass(frozen=True)
class Setting:
    """One experimental setting of the paper (Sec. V, Appendix D): N training examples, epochs, B = 256.

    ``steps`` is T = ceil(N epochs / B) (2,344 for MNIST), derived from the paper's N, epochs and B (the paper states no
    T), used wherever the book reproduces its privacy tables. A :class:`dpbook.train.Trainer` run takes epochs x
    round(N/B) steps (2,340 for MNIST), never more than this count for these settings, so a sigma calibrated here covers
    it. ``delta`` is 1/N, as in the paper.

    >>> s = DCSGD_SETTINGS["mnist"]
    >>> s.sample_rate == 256 / 60000, s.steps, s.delta == 1 / 60000
    (True, 2344, True)
    """

    name: str
    N: int
    epochs: int
    model: str
    expected_batch_size: int = 256

    @property
    def sample_rate(self) -> float:
        return self.expected_batch_size / self.N

    @property
    def steps(self) -> int:
        return math.ceil(self.N * self.epochs / self.expected_batch_size)

    @property
    def delta(self) -> float:
        return 1 / self.N


def _setting(dataset: str, models: tuple[str, ...]) -> Setting:
    """The setting of ``dataset`` trained with ``models`` (which share their epochs): its title and N from the task
    registry, its epochs from :data:`PAPER_EPOCHS`, its models named as one label ("ResNet18/34")."""
    epochs = {PAPER_EPOCHS[m] for m in models}
    assert len(epochs) == 1, f"{dataset}'s models {models} train for different epochs"
    names = [MODEL_NAMES[m] for m in models]
    shared = os.path.commonprefix(names)
    label = "/".join([names[0], *(name[len(shared):] for name in names[1:])])
    return Setting(TASKS[dataset].title, TASKS[dataset].train_size, epochs.pop(), label)


#: The paper's four main settings: their models (Sec. V-C, with their epochs in :data:`PAPER_EPOCHS`); the
#: training-set sizes (Appendix D) are the standard splits' of the task registry.
DCSGD_SETTINGS: dict[str, Setting] = {
    dataset: _setting(dataset, models)
    for dataset, models in (("mnist", ("mnist_cnn",)), ("cifar10", ("resnet18_gn", "resnet34_gn")),
                            ("svhn", ("resnet18_gn", "resnet34_gn")), ("qnli", ("bert_base",)))
}

@functools.cache
def search_sigma(dataset: str, epsilon: float, G: int, protocol: str, epsilon_tolerance: float = 1e-3) -> float:
    """The noise multiplier of each run of a search over ``G`` grid points on the paper's setting ``dataset``
    (:data:`DCSGD_SETTINGS`, delta = 1/N), charged to the total budget ``epsilon`` by ``protocol``
    (:func:`dpbook.tuning.calibrate_sigma`, for which ``"none"`` and ``G = 1`` are the single run under every
    protocol).
    ``math.inf`` where the budget is out of reach (``calibrate_sigma``'s ValueError says why; the privacy chapters
    check that none of their cells is). Cached: the chapter's pages ask for the same cells many times.

    >>> one = search_sigma("mnist", 2.0, 1, "rdp")
    >>> one == search_sigma("mnist", 2.0, 1, "lt") == search_sigma("mnist", 2.0, 10, "none")
    True
    >>> search_sigma("mnist", 2.0, 10, "rdp") > one
    True
    """
    s = DCSGD_SETTINGS[dataset]
    try:
        return calibrate_sigma(epsilon, s.delta, s.sample_rate, s.steps, G, protocol,
                               epsilon_tolerance=epsilon_tolerance)
    except ValueError:
        return math.inf


def sigma_text(sigma: float, spec: str = "8.3f") -> str:
    """A cell of a table of :func:`search_sigma`'s values: the number, or "unreach." as wide.

    >>> sigma_text(1.23456, ".3f"), sigma_text(math.inf, "8.3f")
    ('1.235', 'unreach.')
    """
    return f"{sigma:{spec}}" if math.isfinite(sigma) else f"{'unreach.':>{len(format(1.0, spec))}}"


PAPER_SYMBOLS = {"C0": "C_0"}  # paper_grid's names -> the methods' keyword arguments


def rename(point: dict) -> dict:
    return {PAPER_SYMBOLS.get(k, k): v for k, v in point.items()}


class Cell(NamedTuple):
    """One cell of a table of results: the table, and the cell's (model, dataset, epsilon, method)."""

    table: str
    model: str
    dataset: str
    epsilon: float
    method: str


@dataclass
class Reproduction(Chapter):
    """The chapter's parameters (see the notebook's parameters cell for each one's meaning), and its cells."""

    SOURCES: ClassVar[dict[str, Source]] = {
        "seeds": Source("Sec. VI-B", note="Tables IV and V: “repeat the training 5 times”"),
        "searches": Source(reading="DCSGD-33"),
        "epochs": Source("Sec. V-C; App. G", note="the paper's per model: CNN 10, ResNets 20, BERT 5, LSTM 20"),
        "batch_size": Source("Sec. V-C"),
        "lr": Source("Sec. V-C", note="Adam's default η, not tuned"),
        "sgd_lrs": Source("Table VI; Table VII", note="Table VII's 20 values of η"),
        "grids": Source("Table VI; Table VII", note="Table VII's candidates"),
        "figure_epsilons": Source(reading="DCSGD-44"),
        "figure_seeds": Source(reading="DCSGD-44"),
        "figure_p": Source(reading="DCSGD-30"),
        "p_values": Source("Table VII", note="the candidates of p"),
        "b_values": Source(reading="DCSGD-44"),
        "sigma_H_values": Source(reading="DCSGD-44"),
        "fig4_settings": Source("Fig. 4", "DCSGD-31", note="the caption's three settings"),
        "fig4_fractions": Source(reading="DCSGD-31"),
        "fig8_settings": Source("Fig. 8", "DCSGD-45"),
        "fig8_samples": Source("Fig. 8"),
        "fig8_optimizer": Source("Fig. 8", note="“the standard SGD algorithm”"),
        "fig8_lr": Source(reading="DCSGD-45"),
    }
    DOMAINS: ClassVar[dict[str, Domain]] = {
        "epsilons": numbers(above=0), "seeds": integers(1), "searches": integers(1),
        "epochs": integers(1), "batch_size": integers(1), "micro_batch_size": integers(1),
        "lr": numbers(above=0), "sgd_lrs": numbers(above=0), "figure_epsilons": numbers(above=0),
        "figure_seeds": integers(1), "figure_p": numbers(at_least=0, at_most=1),
        "p_values": numbers(at_least=0, at_most=1), "b_values": integers(1),
        "sigma_H_values": numbers(above=0), "fig4_fractions": numbers(above=0, at_most=1),
        "fig4_points": integers(2), "fig8_samples": integers(1), "fig8_points": integers(2),
        "fig8_lr": numbers(above=0),
    }
    SELECTION: ClassVar[tuple[str, ...]] = (
        "table", "datasets", "models", "methods", "epsilons", "micro_batch_size", "fresh", "figures",
        "figure_datasets", "fig4_points", "fig8_points")
    COVERAGE: ClassVar[dict[str, Item]] = {
        "Table I": Item("time of tuning: one run × the grid size, per model and method", "reproducible in run mode",
                        "`Reproduction(...).table_i()`, from the runs' recorded wall times"),
        **{f"Table {t}": Item(what, "reproducible in run mode", f"`Reproduction(table=\"{t}\")`")
           for t, what in (("II", "accuracy, Adam, the search charged by Liu–Talwar"),
                           ("III", "accuracy, Adam, the search charged by RDP composition"),
                           ("IV", "accuracy, Adam, no tuning cost (5 runs)"),
                           ("V", "accuracy, SGD with momentum, no tuning cost (5 runs)"),
                           ("VIII", "accuracy of DC-SGD beside AutoClip, with LSTM on NAMES"))},
        "Table VI": Item("which hyperparameters each method tunes", "transcribed",
                         "`data/paper/dcsgd_table6.json`; every grid of the reproduction"),
        "Table VII": Item("the candidate values of each hyperparameter", "transcribed",
                          "`data/paper/dcsgd_table7.json`; every grid of the reproduction"),
        "Fig. 1": Item("DP-SGD's accuracy over a grid of C and η (CIFAR-10, ResNet18, ε = 8, SGD)", "CPU analogue",
                       "the heatmap of [DP-SGD from scratch: the trade-off between clipping and noise]"
                       "(dpsgd_from_scratch_tradeoff.ipynb), on digits; at scale, "
                       "Table V's DP-SGD cell at ε = 8 trains the same grid (with momentum 0.9) but no heatmap is "
                       "drawn of it"),
        "Fig. 2": Item("the percentile threshold from a noisy histogram, synthetic norms (R = 150)", "reproduced",
                       "[DC-SGD on synthetic gradient norms](dcsgd_synthetic_norms.ipynb), b and σ_H chosen "
                       "[DCSGD-37]"),
        "Fig. 3": Item("the expected squared error E(C), synthetic norms (R = 120)", "reproduced",
                       "[DC-SGD on synthetic gradient norms](dcsgd_synthetic_norms.ipynb) [DCSGD-37]"),
        "Fig. 4": Item("E(C) during training on CIFAR-10, SVHN and MNIST", "reproducible in run mode",
                       "`figures=[\"4\"]` (`dcsgd_figures.measure_fig4`) [DCSGD-31]"),
        **{f"Fig. {n}": Item(f"accuracy against {what} ({where})", "reproducible in run mode", f"`figures=[\"{n}\"]`")
           for n, what, where in (("5", "DC-SGD-P's p", "SVHN, QNLI"), ("6", "the bin count b", "SVHN, QNLI"),
                                  ("7", "σ_H", "SVHN, QNLI"), ("9", "DC-SGD-P's p", "CIFAR-10, MNIST"),
                                  ("10", "the bin count b", "CIFAR-10, MNIST"), ("11", "σ_H", "CIFAR-10, MNIST"))},
        "Fig. 8": Item("the mean per-sample gradient norm during SGD training (ResNet18)", "reproducible in run mode",
                       "`figures=[\"8\"]` (`dcsgd_figures.measure_fig8`) [DCSGD-45]"),
    }

    table: str | list[str] = "IV"
    datasets: list[str] | None = None
    models: list[str] | None = None
    methods: list[str] | None = None
    epsilons: list[float] | None = None
    seeds: int = 5
    searches: int = 1
    epochs: int | None = None
    batch_size: int = 256
    micro_batch_size: int | None = None
    lr: float = 1e-3
    sgd_lrs: list[float] | None = None
    grids: dict[str, list[dict]] | None = None
    fresh: bool = False
    figures: list[str] = field(default_factory=list)
    figure_datasets: list[str] | None = None
    figure_epsilons: list[float] = field(default_factory=lambda: [2.0, 4.0, 8.0])
    figure_seeds: int = 5
    figure_p: float = 0.5
    p_values: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
    b_values: list[int] = field(default_factory=lambda: [5, 10, 20, 40, 80])
    sigma_H_values: list[float] = field(default_factory=lambda: [1.0, 2.0, 5.0, 8.0, 12.0])
    fig4_settings: list[list[str]] = field(default_factory=lambda: [["cifar10", "resnet18_gn"],
                                                                    ["svhn", "resnet34_gn"], ["mnist", "mnist_cnn"]])
    fig4_fractions: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])
    fig4_points: int = 400
    fig8_settings: list[list[str]] = field(default_factory=lambda: [["cifar10", "resnet18_gn"],
                                                                    ["svhn", "resnet18_gn"]])
    fig8_samples: int = 2000
    fig8_points: int = 21
    fig8_optimizer: str = "sgd"
    fig8_lr: float = 0.1

    def __post_init__(self):
        """Check every name before anything trains (a name that selects nothing is a typo); ``fresh`` deletes this
        study's smoke result files."""
        super().__post_init__()
        self.tables = listing(self.table, str)
        check_known("table(s)", self.tables, TABLES)
        check_known("dataset(s)", (self.datasets or []) + (self.figure_datasets or []), DATASET_NAMES)
        check_known("model(s)", self.models or [], MODEL_NAMES)
        check_known("method(s)", self.methods or [], LABELS)
        check_known("figure(s)", self.figures, ["4", "8", *FIGURES])
        self.dataset_names = {**DATASET_NAMES, **({"mnist": "MNIST-5k (stand-in)"} if self.stand_ins else {})}
        self.lr_grid = list(TABLE_VII["lr"] if self.sgd_lrs is None else listing(self.sgd_lrs, float))
        self.swept = {"p": [float(v) for v in self.p_values], "b": [int(v) for v in self.b_values],
                      "sigma_H": [float(v) for v in self.sigma_H_values]}
        if self.fresh:
            if not self.smoke:
                raise ValueError("fresh=True deletes result files; it is only allowed with smoke=True")
            for path in (self.results / STUDY).glob("**/smoke_*.json"):
                path.unlink()

    # -- a cell as runs ------------------------------------------------------------------------------------------

    def epochs_of(self, model: str) -> int:
        return PAPER_EPOCHS[model] if self.epochs is None else int(self.epochs)

    def method_grid(self, method: str) -> list[dict]:
        """The method's grid with Adam (Table VII, or the ``grids`` override); AutoClip tunes nothing (App. G)."""
        if self.grids and method in self.grids:
            return [dict(point) for point in self.grids[method]]
        if method == "autos":
            return [{}]
        return [rename(point) for point in paper_grid(method, "adam")]

    def grid_of(self, t: str, method: str) -> list[dict]:
        """Table t's grid: with SGD (Table V) every point times the learning rates (Table VI)."""
        points = self.method_grid(method)
        if OPTIMIZER[t] == "sgd-momentum":
            points = [{**point, "lr": v} for point in points for v in self.lr_grid]
        return points

    def grids_are_table_vii(self) -> bool:
        """With no override, the grids are Table VII's: Adam's, and SGD's times its learning rates."""
        return self.grids is not None or self.sgd_lrs is not None or all(
            self.grid_of("IV", m) == [rename(p) for p in paper_grid(m, "adam")]
            and self.grid_of("V", m) == [rename(p) for p in paper_grid(m, "sgd")] for m in TUNED_HYPERPARAMETERS)

    def base_of(self, t: str, model: str, dataset: str, epsilon: float, method: str,
                **hyperparameters) -> Experiment:
        exp = Experiment(study=STUDY, dataset=dataset, model=model, method=method, hyperparameters=hyperparameters,
                         epsilon=float(epsilon), epochs=self.epochs_of(model), batch_size=self.batch_size,
                         optimizer=OPTIMIZER[t], lr=self.lr, protocol=PROTOCOL[t], smoke=self.smoke,
                         micro_batch_size=self.micro_batch_size)
        return reproduce.stand_in(exp, self.stand_ins)

    def is_selected(self, c: Cell) -> bool:
        return ((self.datasets is None or c.dataset in self.datasets)
                and (self.models is None or c.model in self.models)
                and (self.methods is None or c.method in self.methods)
                and (self.epsilons is None or c.epsilon in self.epsilons))

    # -- the protocol (:class:`.chapter.Chapter`) ---------------------------------------------------------------

    @property
    def selected(self) -> list[Cell]:
        """The cells that ``table``, ``datasets``, ``models``, ``methods`` and ``epsilons`` select."""
        return [c for t in self.tables for c in table_cells(t) if self.is_selected(c)]

    def spec(self, c: Cell) -> tuple[Experiment, list[dict]]:
        """(base, grid) of cell ``c``. A dataset without a fixed size in the task registry (NAMES):
        :func:`dpbook.repro.reproduce.measured_size` reads it from the files under ``data_root`` once, for the
        planning of this process's runs (a FileNotFoundError while they are missing)."""
        if TASKS[c.dataset].train_size is None and not self.smoke:
            reproduce.measured_size(c.dataset, self.data)
        return self.base_of(*c), self.grid_of(c.table, c.method)

    def repetitions(self, base: Experiment) -> int:
        return self.seeds if reproduce.free(base) else self.searches

    def table_of(self, c: Cell) -> str:
        return c.table

    @classmethod
    def every_table(cls, **parameters) -> "Reproduction":
        return cls(**{"table": list(TABLES), **parameters})

    def paper_row(self, c: Cell) -> dict:
        return next(r for r in paper_table(c.table)["rows"]
                    if (r["model"], r["dataset"], float(r["epsilon"]), r["method"]) == c[1:])

    def label(self, c: Cell) -> dict[str, object]:
        return {"table": c.table, "model": MODEL_NAMES[c.model], "dataset": self.dataset_names[c.dataset],
                "ε": f"{c.epsilon:g}", "method": LABELS[c.method]}

    def details(self, c: Cell, summary: dict) -> dict[str, object]:
        """The chosen hyperparameters, sigma and (DC-SGD-P/E) sigma_H of a cell."""
        sigma, chosen = summary["sigma"], summary["chosen"]
        return {"chosen hyperparameters": json.dumps(chosen[0], sort_keys=True) if summary["values"] else "—",
                "σ": "—" if sigma is None else f"{sigma:.4f}",
                "σ_H": f"{run_sigma_H(sigma):g}" if sigma and c.method.startswith("dcsgd") else "—"}

    def figure_runs(self) -> list[Experiment]:
        """The selected figures' points (Figs. 4 and 8 are measurements: :func:`.dcsgd_figures.measure`)."""
        runs = []
        for fig in (f for f in self.figures if f in FIGURES):
            for point, base in self.figure_points(fig):
                try:
                    runs += reproduce.planned_runs(base, [{}], self.figure_seeds)
                except ValueError as err:
                    self.note(f"Fig. {fig} {point}", err)
        return runs

    # -- figure points -------------------------------------------------------------------------------------------

    def figure_base(self, dataset: str, model: str, method: str, epsilon: float, name: str, value) -> Experiment:
        """One figure point: Adam, no tuning cost, the method's defaults except the swept hyperparameter."""
        hyperparameters = {"p": self.figure_p} if method == "dcsgd-p" else {}
        hyperparameters[name] = value
        if FIGURE_DEFAULTS.get(name) == value:
            del hyperparameters[name]
        return self.base_of("IV", model, dataset, epsilon, method, **hyperparameters)

    def in_figure(self, dataset: str) -> bool:
        return self.figure_datasets is None or dataset in self.figure_datasets

    def figure_points(self, fig: str):
        """Every point of figure ``fig``: ((dataset, model, method, epsilon, value), base)."""
        name, fig_methods, panels = FIGURES[fig]
        for dataset, model in panels:
            if self.in_figure(dataset):
                for method in fig_methods:
                    for epsilon in self.figure_epsilons:
                        for value in self.swept[name]:
                            yield (dataset, model, method, float(epsilon), value), self.figure_base(
                                dataset, model, method, epsilon, name, value)

    # -- what the chapter shows ------------------------------------------------------------------------------------

    def measured_times(self, model: str, method: str, dataset: str | None = None) -> tuple[list[float], str | None]:
        """Wall times of the recorded Adam runs of (model, method) on the device most of them ran on."""
        match = dict(model=model, method=method, optimizer="adam", epochs=self.epochs_of(model),
                     batch_size=self.batch_size)
        if dataset is not None:
            match["dataset"] = dataset
        records = [r for r in results.load_results(STUDY, root=self.results, smoke=self.smoke, **match)
                   if not r.get("resumed")]
        if not records:
            return [], None
        device_name = collections.Counter(r["device"] for r in records).most_common(1)[0][0]  # one device per row
        return [r["wall_time_s"] for r in records if r["device"] == device_name], device_name

    def table_i(self) -> str:
        """Table I: one training run's time times the grid size G, the paper's and ours."""
        rows = []
        for r in paper_table("I")["rows"]:
            times, device_name = self.measured_times(r["model"], r["method"], r.get("dataset"))
            rows.append({
                "model": MODEL_NAMES[r["model"]], "method": LABELS[r["method"]], "G": r["G"],
                "paper": f"{hms(r['value'])} × {r['G']} = {hms(r['value'] * r['G'])}",
                "measured": (f"{hms(np.mean(times))} × {r['G']} = {hms(np.mean(times) * r['G'])} "
                             f"(n={len(times)}, {device_name})" if times else "not run yet"),
            })
        return ("**Table I.** Time of tuning with Adam: one training run × grid size $G$.\n\n"
                + results.markdown_table(rows, ["model", "method", "G", "paper", "measured"],
                                         ["model", "method", "G", "paper: one run × G", "ours: one run × G"]))

    def shown_cells(self) -> list[Cell]:
        """Every cell of every table: the page shows them all, selected or not."""
        return [c for t in TABLES for c in table_cells(t)]

    def table_text(self, t: str) -> str:
        """Table ``t`` as the paper lays it out (:meth:`~dpbook.repro.papers.chapter.Chapter.paper_layout`), under
        its title, protocol, optimizer and count of cells with results."""
        cells = table_cells(t)
        header = (f"**Table {t}.** {paper_table(t)['title']} Protocol `{PROTOCOL[t]}`, optimizer `{OPTIMIZER[t]}`. "
                  + self.count_line(cells))
        return header + self.paper_layout(cells) + reproduce.stand_in_note(self.stand_ins)

    def selected_detail(self, only_with_results: bool) -> str | None:
        """The selected cells with status, chosen hyperparameters, sigma and sigma_H (None when there is none)."""
        rows = [row for row in self.compared(self.selected) if row["n"] > 0 or not only_with_results]
        if not rows:
            return None
        columns = ["table", "model", "dataset", "ε", "method", "status", "paper", "reproduced",
                   "chosen hyperparameters", "σ", "σ_H"]
        return results.markdown_table(rows, columns, [{"reproduced": "ours"}.get(k, k) for k in columns])

    def recorded_files(self) -> int:
        """How many result files of this study (smoke or real, as selected) are recorded."""
        return sum(p.name.startswith("smoke_") == bool(self.smoke) for p in (self.results / STUDY).glob("*/*.json"))


def table_cells(t: str) -> list[Cell]:
    """Every cell (model, dataset, epsilon, method) of the paper's table t."""
    return [Cell(t, r["model"], r["dataset"], float(r["epsilon"]), r["method"]) for r in paper_table(t)["rows"]]


def hms(seconds: float) -> str:
    """A duration as the paper's Table I writes it.

    >>> hms(59.6), hms(3725)
    ('1m00s', '1h02m05s')
    """
    seconds = int(round(seconds))
    h, m, s = seconds // 3600, seconds % 3600 // 60, seconds % 60
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
