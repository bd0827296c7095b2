"""The reproduction protocol every paper's chapter follows: a paper is its cells, the spec of a cell, and the paper's
value and label of a cell; training them, summarising them and setting them next to the paper are written here once.

A subclass (one per paper, ``Reproduction`` in its module) gives

- :attr:`Chapter.selected`: the cells its parameters select (hashable keys, e.g. ``(dataset, method)``);
- :meth:`Chapter.spec`: a cell as a base :class:`~dpbook.repro.experiment.Experiment` and its grid of points (None
  while it waits for another cell's best point, :meth:`Chapter.prerequisite`);
- :meth:`Chapter.paper_row`: the transcribed row of a cell (``data/paper/``), or None;
- :meth:`Chapter.label`: the columns that name a cell in the chapter's table;

and may refine how many seeds or searches a cell takes (:meth:`Chapter.repetitions`), the runs its figures add
(:meth:`Chapter.figure_runs`), the columns that describe a cell's chosen point (:meth:`Chapter.details`), the
table's caption (:meth:`Chapter.caption`), the paper's table a cell belongs to (:meth:`Chapter.table_of`) and the
parameters that select every table (:meth:`Chapter.every_table`, the dry run's: :mod:`dpbook.repro.dry_run`).
:mod:`dpbook.repro.reproduce` turns a (base, grid) into runs and reads them back. "Reproducing another paper" in
the book walks through a new one.
"""

from __future__ import annotations

__all__ = ["OPERATIONAL", "MODES", "MODEL_TITLES", "Chapter", "method_labels", "model_title", "setting_title"]

import abc
import dataclasses
from dataclasses import dataclass
from typing import Callable, ClassVar, Hashable, Iterable, Mapping, Sequence

from dpbook import checks, io
from dpbook.data import DatasetNotFoundError
from dpbook.repro import reproduce, results
from dpbook.repro.coverage import Item, coverage_table
from dpbook.repro.experiment import Experiment, load_task_data
from dpbook.repro.plotting import method_label
from dpbook.repro.sources import Source, sources_table
from dpbook.tasks import TASKS

#: The models of the papers' tables by the names the papers print (the registry's: :data:`dpbook.models.MODELS`).
MODEL_TITLES = {"mnist_cnn": "CNN", "cifar10_cnn": "CNN", "resnet18_gn": "ResNet18", "resnet34_gn": "ResNet34",
                "resnet9": "ResNet9", "linear_classifier": "linear", "bert_base": "BERT-base", "char_lstm": "LSTM"}


def model_title(name: str) -> str:
    """The name a table prints for the registry's model ``name``; a ``_gn`` variant the book adds says so.

    >>> model_title("resnet18_gn"), model_title("mnist_cnn_gn")
    ('ResNet18', 'CNN with GroupNorm')
    """
    if name in MODEL_TITLES:
        return MODEL_TITLES[name]
    return f"{MODEL_TITLES[name.removesuffix('_gn')]} with GroupNorm"


def setting_title(dataset: str, model: str) -> str:
    """A dataset and the registry's model trained on it, as a table's row or a figure's title names them.

    >>> setting_title("mnist", "mnist_cnn_gn")
    'MNIST, CNN with GroupNorm'
    """
    return f"{TASKS[dataset].title}, {model_title(model)}"


def method_labels(methods: Iterable[str], aliases: Mapping[str, str] | None = None) -> dict[str, str]:
    """The label of each of a paper's ``methods``, in its order: the one the method declares
    (:class:`~dpbook.methods.declaration.Declaration`), or the paper's own name for it in ``aliases``.

    >>> method_labels(["dpsgd", "autos"], {"autos": "AutoClip"})
    {'dpsgd': 'DP-SGD', 'autos': 'AutoClip'}
    """
    aliases = aliases or {}
    return {m: aliases[m] if m in aliases else method_label(m) for m in methods}


#: The parameters of every chapter that say where and how its runs execute, not what they compute.
OPERATIONAL = ("device", "stand_ins", "data_root", "download", "results_dir", "smoke", "jobs")

#: A reproduction notebook's ``mode``: what each does.
MODES = {"render": "reads the recorded result files and trains nothing", "run": "trains the selected cells first"}


@dataclass
class Chapter(abc.ABC):
    """The parameters common to the reproduction chapters (each chapter's ``Reproduction`` adds its own, ``seeds``
    among them), and the protocol.

    ``device``: "auto" (CUDA when available), "cpu", "cuda", ...; ``stand_ins``: train the MNIST cells on MNIST-5k
    (:data:`dpbook.repro.reproduce.STAND_INS`); ``data_root`` and ``results_dir`` (None: ``data/results``), relative
    paths being relative to the repository root; ``download``: fetch missing datasets; ``smoke``: generated
    stand-in data of the real shapes (tests only; their result files are named ``smoke_*``); ``jobs``: runs at once
    in run mode (processes).
    """

    #: Where each parameter's default comes from (:mod:`dpbook.repro.sources`): every parameter but the
    #: :data:`OPERATIONAL` ones and the :attr:`SELECTION`.
    SOURCES: ClassVar[Mapping[str, Source]] = {}
    #: The parameters that choose which of the paper's cells and figures run or show, and how finely a figure is
    #: drawn: they change no run.
    SELECTION: ClassVar[tuple[str, ...]] = ()
    #: Every table and figure of the paper, and what the book does with it (:mod:`dpbook.repro.coverage`).
    COVERAGE: ClassVar[Mapping[str, Item]] = {}
    #: The range of each numeric parameter (:mod:`dpbook.checks`), checked before anything runs; a chapter's own
    #: extend the base's (:meth:`domains`). Names are checked against the chapter's lists in ``__post_init__``.
    DOMAINS: ClassVar[Mapping[str, checks.Domain]] = {"jobs": checks.integers(1, "runs at once")}
    #: The :meth:`label` columns that describe one cell rather than a row of the paper's table (DP-PSASC's ``s``,
    #: which only its own methods have): :meth:`paper_layout` leaves them out.
    CELL_ONLY: ClassVar[tuple[str, ...]] = ()

    device: str = "auto"
    stand_ins: bool = False
    data_root: str = "data/downloads"
    download: bool = False
    results_dir: str | None = None
    smoke: bool = False
    jobs: int = 1

    def __post_init__(self):
        for name, domain in self.domains().items():
            domain.check(name, getattr(self, name))
        self.results = results.repo_path(self.results_dir)
        self.data = results.repo_path(self.data_root)
        self._summaries: dict[Hashable, dict] = {}
        self._compared: dict[tuple, list[dict]] = {}  # compared(cells), once per cells while the results stand
        self.unreachable: dict[str, str] = {}   # run mode's notes: a cell that cannot run -> why
        self.missing: dict[str, str] = {}       # a cell whose data is missing -> the error
        self.assume_first = False               # the dry run's: a prerequisite's best point is its first point

    @classmethod
    def defaults(cls) -> dict[str, object]:
        """Every parameter's default value."""
        return {f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default
                for f in dataclasses.fields(cls)}

    @classmethod
    def domains(cls) -> dict[str, checks.Domain]:
        """Every numeric parameter's domain: the base's :attr:`DOMAINS` and the chapter's."""
        return {**Chapter.DOMAINS, **cls.DOMAINS}

    @classmethod
    def sources_table(cls) -> str:
        """Where each setting's default comes from, as the chapter shows it
        (:func:`dpbook.repro.sources.sources_table`)."""
        return sources_table(cls.defaults(), cls.SOURCES)

    @classmethod
    def coverage_table(cls) -> str:
        """Every table and figure of the paper and what the book does with it, as the chapter shows it."""
        return coverage_table(cls.COVERAGE)

    # -- what varies per paper -------------------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def selected(self) -> list[Hashable]:
        """The cells the chapter's parameters select, in the order its table shows them."""

    @abc.abstractmethod
    def spec(self, cell: Hashable) -> tuple[Experiment, list[dict]] | None:
        """(base, grid) of ``cell``; None while it waits for the best point of :meth:`prerequisite`. A ValueError
        when the cell cannot be run (its budget or its method's constraints)."""

    @abc.abstractmethod
    def paper_row(self, cell: Hashable) -> Mapping | None:
        """The paper's transcribed row of ``cell`` (its ``value``, and ``std`` if printed), or None."""

    @abc.abstractmethod
    def label(self, cell: Hashable) -> dict[str, object]:
        """The columns that name ``cell`` in the table: ``{header: value}``."""

    def label_text(self, cell: Hashable) -> str:
        """:meth:`label` on one line, for a sentence: ``"header value, ..."`` (empty values left out)."""
        return ", ".join(f"{k} {v}" for k, v in self.label(cell).items() if v != "")

    def repetitions(self, base: Experiment) -> int:
        """Re-runs of the best point (protocol "none"), or independent searches, of a cell: ``seeds``."""
        return int(self.seeds)

    def prerequisite(self, cell: Hashable) -> Hashable | None:
        """The cell whose grid ``cell`` waits for (when :meth:`spec` gives None), or None."""
        return None

    def figure_runs(self) -> list[Experiment]:
        """Runs that run mode trains for the chapter's figures, besides the cells'."""
        return []

    def details(self, cell: Hashable, summary: Mapping) -> dict[str, object]:
        """Columns that describe a cell's summary after its status (e.g. its chosen point): ``{header: value}``."""
        return {}

    def caption(self) -> str:
        """The text above the table."""
        return ""

    def table_of(self, cell: Hashable) -> str:
        """The paper's table that shows ``cell``."""
        return ""

    def shown_cells(self) -> list[Hashable]:
        """The cells the chapter's page shows in its tables: the :attr:`selected` ones (a chapter whose tables show
        every cell of the paper, selected or not, says so)."""
        return self.selected

    @classmethod
    def every_table(cls, **parameters) -> "Chapter":
        """The chapter with every cell of every table of the paper selected (its defaults, unless overridden)."""
        return cls(**parameters)

    def best_run(self, base: Experiment, grid: Sequence[Mapping]) -> Experiment | None:
        """The best grid run of a prerequisite cell (:func:`dpbook.repro.reproduce.best_run`; None while its grid
        is not done); with :attr:`assume_first` (the dry run), its first grid run, so that a waiting cell is built at
        the prerequisite's first point."""
        if self.assume_first:
            return reproduce.search(base.replace(protocol="none"), grid)[0]
        return reproduce.best_run(base, grid, self.results)

    def runs_to_fill(self, cell: Hashable) -> list[Experiment]:
        """Every run that filling ``cell`` takes, whatever is recorded: its planned runs, and (protocol "none" with a
        grid) the re-runs of one point, distinct. Plans and builds the method of every grid point at the cell's noise
        (a ValueError when the cell is unreachable); a waiting cell needs :attr:`assume_first` or its prerequisite's
        results."""
        found = self.spec(cell)
        if found is None:
            raise ValueError(f"waits for {self.prerequisite(cell)}'s grid")
        base, grid = found
        runs = reproduce.planned_runs(base, grid, self.repetitions(base))
        if reproduce.free(base) and len(grid) > 1:
            runs += [runs[0].replace(seed=s) for s in range(self.repetitions(base))]
        return list({run.key(): run for run in runs}.values())

    # -- run mode ------------------------------------------------------------------------------------------------

    def cell_runs(self, cell: Hashable) -> list[Experiment]:
        """What ``cell`` needs trained now: its planned runs and re-runs, or its prerequisite's grid while it
        waits."""
        found = self.spec(cell)
        if found is None:
            return reproduce.search(*self.spec(self.prerequisite(cell)))
        base, grid = found
        return reproduce.cell_runs(base, grid, self.repetitions(base), self.results)

    def wanted(self) -> list[Experiment]:
        """What run mode trains now: every selected cell's runs, and the figures'. A cell that cannot run
        (:attr:`unreachable`) or whose data is missing (:attr:`missing`) is printed once, with why."""
        runs = []
        for cell in self.selected:
            try:
                runs += self.cell_runs(cell)
            except (ValueError, FileNotFoundError) as err:
                self.note(self.label_text(cell), err)
        return runs + self.figure_runs()

    def note(self, what: str, err: ValueError | FileNotFoundError) -> None:
        """Print once that ``what`` cannot run (a ValueError: :attr:`unreachable`) or misses its data
        (:attr:`missing`), with why."""
        notes = self.unreachable if isinstance(err, ValueError) else self.missing
        if what not in notes:
            notes[what] = str(err).splitlines()[0]
            print(f"{what}: {'unreachable' if notes is self.unreachable else 'FAILED'}: {notes[what]}")

    def run(self) -> list[tuple[str, str]]:
        """Train the selected cells (grids, searches, re-runs of their best points, what those unlock) and the
        figures' runs, round after round (:func:`dpbook.repro.reproduce.train_until_done`). Returns the failures as
        (what, error): the runs that failed and the cells whose data is missing. A dataset that is not here stops
        it before any run starts (:meth:`check_data`), and so does a results folder it cannot write in."""
        io.writable(self.results, "the chapter's results_dir")
        self.check_data()
        done = reproduce.train_until_done(self.wanted, self.results, jobs=self.jobs, device=self.device,
                                          data_root=self.data, download=self.download)
        self._summaries.clear()
        self._compared.clear()
        return list(done["failed"].items()) + list(self.missing.items())

    def filled(self, mode: str, *measurements: Callable[["Chapter"], list[tuple[str, str]]]) -> list[tuple[str, str]]:
        """A reproduction notebook's step of its ``mode`` (:data:`MODES`): ``"run"`` trains (:meth:`run`), then takes
        the chapter's ``measurements`` (DC-SGD's figures measured inside training), and returns their failures;
        ``"render"`` trains nothing and says so. :meth:`finish` raises the failures at the end of the page."""
        checks.one_of("mode", mode, MODES)
        if mode != "run":
            print("Nothing is trained on this page: its tables and figures show the recorded result files.")
            return []
        return self.run() + [failure for measure in measurements for failure in measure(self)]

    @staticmethod
    def finish(failures: Sequence[tuple[str, str]]) -> None:
        """The end of a reproduction notebook: a RuntimeError naming the runs that failed and the cells whose data is
        missing (:meth:`filled`'s), so that a run of the notebook fails, after the page has shown what it could."""
        if failures:
            raise RuntimeError(f"{len(failures)} run(s) failed: " + "; ".join(str(what) for what, _ in failures))

    def check_data(self) -> None:
        """Load once each dataset the selected runs train on: a missing one is a
        :class:`~dpbook.data.DatasetNotFoundError` that says how to get it (and, for MNIST, that ``stand_ins`` trains
        its cells on the MNIST-5k digits shipped offline), raised once, before any run starts."""
        for run in {(r.dataset, r.smoke, r.train_size): r for r in self.wanted()}.values():
            try:
                load_task_data(run, root=self.data, download=self.download)
            except DatasetNotFoundError as err:
                hint = ("\nOr train the MNIST cells on MNIST-5k, 4,000 real digits that ship offline: -p stand_ins True"
                        if run.dataset == "mnist" else "")
                raise DatasetNotFoundError(f"{err}{hint}", dataset=err.dataset, root=err.root) from None

    # -- what the chapter shows ------------------------------------------------------------------------------------

    def summary(self, cell: Hashable) -> dict:
        """:func:`dpbook.repro.reproduce.summary_or_unreachable` of ``cell``, read from the result files once."""
        if cell not in self._summaries:
            def found():
                spec = self.spec(cell)
                return None if spec is None else (*spec, self.repetitions(spec[0]))

            prerequisite = self.prerequisite(cell)
            waits_for = "another cell" if prerequisite is None else self.label(prerequisite).get("method", prerequisite)
            self._summaries[cell] = reproduce.summary_or_unreachable(found, self.results, waits_for)
        return self._summaries[cell]

    @property
    def summaries(self) -> dict[Hashable, dict]:
        """The summary of every selected cell."""
        return {cell: self.summary(cell) for cell in self.selected}

    def compared(self, cells: Sequence[Hashable]) -> list[dict]:
        """One row per cell: its label, the paper's value, ours (mean ± std over seeds or searches), the
        difference, its status and details (:func:`dpbook.repro.results.compare`); ``cell`` holds the cell and
        ``detail_columns`` the headers its :meth:`details` added. Computed once per ``cells`` (a page shows the same
        rows in its table and its detail)."""
        if tuple(cells) in self._compared:
            return self._compared[tuple(cells)]
        rows = results.compare([{**self.label(cell), "cell": cell} for cell in cells],
                               reproduced=lambda row: self.summary(row["cell"])["values"],
                               paper=lambda row: self.paper_row(row["cell"]))
        for row in rows:
            summary = self.summary(row["cell"])
            details = self.details(row["cell"], summary)
            row.update(status=summary["status"], detail_columns=list(details), **details)
        self._compared[tuple(cells)] = rows
        return rows

    def paper_layout(self, cells: Sequence[Hashable]) -> str:
        """``cells`` as the paper lays them out: one row per setting (the :meth:`label` columns that vary over the
        cells, but the method and :attr:`CELL_ONLY`), one column per method. A cell with results reads "paper → ours
        (mean ± std over its seeds or searches), Δ difference", one without the paper's value alone (in bold where
        the paper prints it so), one that cannot run "paper → unreachable (k)", with reason k under the table."""
        compared = self.compared(cells)
        labels = [self.label(row["cell"]) for row in compared]
        settings = [k for k in labels[0] if k != "method" and k not in self.CELL_ONLY
                    and len({str(label[k]) for label in labels}) > 1]
        rows: dict[tuple, dict] = {}
        reasons: dict[str, int] = {}
        for row, label in zip(compared, labels):
            summary, paper = self.summary(row["cell"]), self.paper_row(row["cell"]) or {}
            line = rows.setdefault(tuple(str(label[k]) for k in settings), {k: label[k] for k in settings})
            text = f"**{row['paper']}**" if paper.get("bold") else row["paper"]
            if summary["status"].startswith("unreachable"):
                k = reasons.setdefault(summary["reason"].splitlines()[0], len(reasons) + 1)
                text += f" → unreachable ({k})"
            elif row["n"]:
                partial = " (partial)" if summary["status"] != "done" else ""
                text += f" → {row['mean']:.2f} ± {row['std']:.2f}, Δ {row['difference']}{partial}"
            line[str(label["method"])] = text
        methods = list(dict.fromkeys(str(label["method"]) for label in labels))
        notes = "".join(f"\n\n({k}) {reason}" for reason, k in reasons.items())
        return results.markdown_table(list(rows.values()), [*settings, *methods]) + notes

    def layout_table(self) -> str:
        """The selected cells in the paper's layout (:meth:`paper_layout`), under the :meth:`caption` and the count
        of cells with results; :meth:`table` gives each cell's detail."""
        return self.caption() + self.count_line(self.selected) + self.paper_layout(self.selected) + \
            reproduce.stand_in_note(self.stand_ins)

    def count_line(self, cells: Sequence[Hashable]) -> str:
        """How many of ``cells`` have results, and how to read a cell that has, for above a table."""
        done, total = sum(row["n"] > 0 for row in self.compared(cells)), len(cells)
        others = "" if done == total else "; the others show the paper's value alone"
        legend = (" A cell with results reads: the paper's value → ours, the mean ± standard deviation over its seeds "
                  "(or searches), and Δ, ours minus the paper's.") if done else ""
        return f"*Cells with results: {done} of {total}{others}.*{legend}\n\n"

    def table(self) -> str:
        """The selected cells, paper vs reproduced, under the :meth:`caption`; while no cell has results, compactly:
        the paper's value and the cell's status, one short line per cell."""
        rows = self.compared(self.selected)
        names = list(dict.fromkeys(k for cell in self.selected for k in self.label(cell)))
        done = sum(row["n"] > 0 for row in rows)
        if not done:
            return (self.caption() + f"*No cell has results yet (0 of {len(rows)}): the paper's values.*\n\n"
                    + results.markdown_table(rows, [*names, "paper", "status"], [*names, "paper (%)", "status"])
                    + reproduce.stand_in_note(self.stand_ins))
        details = list(dict.fromkeys(k for row in rows for k in row["detail_columns"]))
        return self.caption() + f"*Cells with results: {done} of {len(rows)}.*\n\n" + results.markdown_table(
            rows, [*names, "paper", "reproduced", "difference", "status", *details],
            [*names, "paper (%)", "reproduced (%)", "difference", "status", *details]) + reproduce.stand_in_note(
            self.stand_ins)
