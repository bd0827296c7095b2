r"""A real-data benchmark: every method, several budgets, the four tuning protocols, n seeds per cell.

A :class:`Benchmark` is a setting (dataset, model, epochs, expected batch size, optimizer, learning rate, delta),
budgets, a grid per method and a number of seeds. Its cells are filled as :mod:`dpbook.repro.reproduce` describes,
under DC-SGD's three protocols and Papernot and Steinke's: ``"none"`` (free tuning: the best grid point re-trained
with n seeds, as Tables IV-V), ``"rdp"``, ``"lt"`` and ``"ps"`` (the search charged to the budget by RDP
composition, by Liu–Talwar random stopping as Tables III and II, or as the best of a random number of runs, n
independent searches each). Two benchmarks are defined:
:data:`dpbook.repro.digits_benchmark.BENCHMARK` and :data:`dpbook.repro.mnist5k_benchmark.BENCHMARK`; ``python -m
dpbook.repro.sweep digits`` and ``python -m dpbook.repro.sweep mnist5k`` run them.

>>> from dpbook.tuning import grid_product
>>> tiny = Benchmark(study="doctest", setting=dict(dataset="digits", model="digits_mlp", epochs=1, batch_size=128),
...                  epsilons=(4.0,), grids={"dpsgd": grid_product(C=(0.5, 1.0))}, paper_G={"dpsgd": 10})
>>> [(r.hyperparameters["C"], r.seed) for r in tiny.planned_runs("dpsgd", 4.0, "rdp")][:3]
[(0.5, 0), (1.0, 1), (0.5, 100000)]
"""

from __future__ import annotations

__all__ = ["PROTOCOLS", "CHARGED", "declared_grids", "Benchmark"]

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from dpbook import checks, io
from dpbook.optim import PER_SAMPLE_ENGINES
from dpbook.repro import cast, reproduce, results
from dpbook.repro.experiment import Experiment, load_task_data
from dpbook.repro.params import check_known
from dpbook.repro.sources import Source, sources_table
from dpbook.repro.sweep import run_all

PROTOCOLS = ("none", "rdp", "lt", "ps")
#: The protocols that charge the search to the budget, with the marker their points take in the figures.
CHARGED = {"rdp": "o", "lt": "s", "ps": "^"}


def declared_grids(study: str) -> dict[str, list[dict]]:
    """Every method's grid in the benchmark ``study``, as the book's cast gives it (:data:`dpbook.repro.cast.CAST`),
    in the book's order; a method with no grid for ``study`` is not in the benchmark.

    >>> grids = declared_grids(cast.DIGITS)
    >>> list(grids)[:3], grids["dpsgd"][:2]
    (['dpsgd', 'dcsgd-p', 'dcsgd-e'], [{'C': 0.1}, {'C': 0.5}])
    """
    return {name: role.grids[study] for name, role in cast.CAST.items() if study in role.grids}


@dataclass(frozen=True)
class Benchmark:
    """The setting, budgets, grids and seeds of one benchmark; its cells, runs and sweep.

    ``setting`` holds the :class:`dpbook.repro.experiment.Experiment` fields every run shares (without ``study``);
    ``paper_G`` the DC-SGD paper's grid sizes (Adam) that ``grids`` scale down; ``sources`` where each setting
    comes from (:mod:`dpbook.repro.sources`): every key of ``setting``, ``epsilons``, ``seeds`` and ``grids``.
    """

    study: str
    setting: Mapping
    epsilons: tuple[float, ...]
    grids: Mapping[str, list[dict]]
    paper_G: Mapping[str, int] = field(default_factory=dict)
    seeds: int = 5
    sources: Mapping[str, Source] = field(default_factory=dict)

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self.grids)

    @property
    def protocols(self) -> tuple[str, ...]:
        return PROTOCOLS

    def defaults(self) -> dict[str, object]:
        """Every setting the benchmark fixes: the run fields of ``setting``, the budgets, the seeds, the grids."""
        return {**self.setting, "epsilons": self.epsilons, "seeds": self.seeds,
                "grids": f"{len(self.grids)} methods, {sum(map(len, self.grids.values()))} points"}

    def sources_table(self) -> str:
        """Where each setting comes from, as the chapter shows it (:func:`dpbook.repro.sources.sources_table`)."""
        return sources_table(self.defaults(), self.sources)

    def base(self, method: str, epsilon: float, protocol: str, *, epochs: int | None = None) -> Experiment:
        """The cell's experiment (seed and grid point are filled in by :mod:`dpbook.repro.reproduce`)."""
        setting = dict(self.setting) | ({} if epochs is None else {"epochs": epochs})
        return Experiment(study=self.study, method=method, epsilon=epsilon, protocol=protocol, **setting)

    def cell(self, method: str, epsilon: float, protocol: str, results_dir=results.RESULTS_DIR, *,
             seeds: int | None = None, epochs: int | None = None) -> dict:
        """One cell of the benchmark table (see :func:`dpbook.repro.reproduce.cell`)."""
        return reproduce.cell(self.base(method, epsilon, protocol, epochs=epochs), self.grids[method],
                              self._seeds(seeds), results_dir)

    def planned_runs(self, method: str, epsilon: float, protocol: str, *, seeds: int | None = None,
                     epochs: int | None = None) -> list[Experiment]:
        """The cell's runs known before any result (a ValueError when it is unreachable)."""
        return reproduce.planned_runs(self.base(method, epsilon, protocol, epochs=epochs), self.grids[method],
                                      self._seeds(seeds))

    def _seeds(self, seeds: int | None) -> int:
        """``seeds`` (None: the benchmark's); 0 or a negative count is an error, never the default."""
        return self.seeds if seeds is None else checks.integer("seeds", seeds)

    def run(self, *, jobs: int = 2, results_dir=results.RESULTS_DIR, methods: Sequence[str] | None = None,
            epsilons: Sequence[float] | None = None, seeds: int | None = None, epochs: int | None = None,
            progress: bool | None = None, executor: str = "local", slurm=None,
            sweep_dir: str | Path | None = None, per_sample: str = "auto") -> list[dict]:
        """Phase 1 (every grid and search), then phase 2 (the re-runs of the best points); both sweep summaries.

        ``methods``, ``epsilons``, ``seeds`` and ``epochs`` other than the defaults (None) make a smaller benchmark
        (a notebook's smoke test); ``executor`` and ``slurm`` say where the runs execute
        (:func:`dpbook.repro.sweep.run_all`), ``per_sample`` the engine's per-sample path
        (:func:`dpbook.repro.experiment.run_experiment`). Both phases share one manifest in ``sweep_dir`` (default: a
        new folder under ``<results_dir>/.sweeps``), which records this plan: ``resume`` runs it again, phase 2
        included.
        """
        plan = self.plan(methods=methods, epsilons=epsilons, seeds=seeds, epochs=epochs)
        checks.integer("jobs", jobs)
        checks.one_of("per_sample (the engine's per-sample path)", per_sample, PER_SAMPLE_ENGINES)
        io.writable(results_dir, "results_dir, where the runs write their result files")
        load_task_data(self.base(plan["methods"][0], plan["epsilons"][0], "none"))  # a missing dataset says so here
        phase1, unreachable = self.phase1(**plan)
        where = dict(jobs=jobs, executor=executor, slurm=slurm, results_dir=results_dir, progress=progress,
                     plan={"benchmark": self.study, **plan}, device="cpu" if executor == "local" else "auto",
                     per_sample=per_sample)
        first = run_all(phase1, sweep_dir=sweep_dir, **where)
        first["unreachable"] = unreachable
        if "manifest" in first:  # phase 2 joins phase 1's manifest
            sweep_dir = Path(first["manifest"]).parent
        second = run_all(self.phase2(results_dir, **plan)[0], sweep_dir=sweep_dir, **where)
        return [first, second]

    def plan(self, *, methods: Sequence[str] | None = None, epsilons: Sequence[float] | None = None,
             seeds: int | None = None, epochs: int | None = None) -> dict:
        """The methods, budgets, seeds and epochs of a sweep, checked, None meaning the benchmark's own.

        >>> from dpbook.repro.digits_benchmark import BENCHMARK
        >>> BENCHMARK.plan(methods=["dpsgd"], seeds=2)
        {'methods': ['dpsgd'], 'epsilons': [1.0, 2.0, 4.0, 8.0], 'seeds': 2, 'epochs': None}
        >>> BENCHMARK.plan(seeds=0)
        Traceback (most recent call last):
        ...
        ValueError: seeds must be an integer >= 1, got 0
        """
        methods = list(self.methods if methods is None else methods)
        epsilons = [float(e) for e in (self.epsilons if epsilons is None else epsilons)]
        check_known("method(s)", methods, self.methods)
        for name, values in (("methods", methods), ("epsilons", epsilons)):
            if not values:
                raise ValueError(f"{name} is empty: give at least one, or None for the benchmark's")
        for epsilon in epsilons:
            checks.positive("epsilon", epsilon)
        self._seeds(seeds)
        if epochs is not None:
            checks.integer("epochs", epochs)
        return {"methods": methods, "epsilons": epsilons, "seeds": seeds, "epochs": epochs}

    def phase1(self, *, methods, epsilons, seeds, epochs) -> tuple[list[Experiment], list[str]]:
        """Every run of the :meth:`plan`'s grids and searches, and the cells that cannot run, with why."""
        runs, unreachable = [], []
        for m, e, p in ((m, e, p) for m in methods for e in epsilons for p in PROTOCOLS):
            try:
                runs += self.planned_runs(m, e, p, seeds=seeds, epochs=epochs)
            except ValueError as err:
                unreachable.append(f"{m} eps={e:g} {p}: {str(err).splitlines()[0]}")
        return runs, unreachable

    def phase2(self, results_dir, *, methods, epsilons, seeds, epochs) -> tuple[list[Experiment], list[str]]:
        """The re-runs of the best points known from ``results_dir``, and the cells whose grid is not complete yet
        (their re-runs are planned once it is)."""
        runs, waiting = [], []
        for m, e in ((m, e) for m in methods for e in epsilons):
            found = self._reruns(m, e, results_dir, seeds, epochs)
            runs += found
            if not found and self._reachable(m, e, seeds, epochs):
                waiting.append(f"{m} eps={e:g}")
        return runs, waiting

    def _reachable(self, method: str, epsilon: float, seeds: int | None, epochs: int | None) -> bool:
        try:
            self.planned_runs(method, epsilon, "none", seeds=seeds, epochs=epochs)
            return True
        except ValueError:
            return False

    def _reruns(self, method: str, epsilon: float, results_dir, seeds: int | None,
                epochs: int | None) -> list[Experiment]:
        try:
            return reproduce.reruns(self.base(method, epsilon, "none", epochs=epochs), self.grids[method],
                                    self._seeds(seeds), results_dir)
        except ValueError:
            return []
