r"""A real-data benchmark: every method, several budgets, the three tuning protocols, n seeds per cell.

A :class:`Benchmark` is a setting (dataset, model, epochs, expected batch size, optimizer, learning rate, delta),
budgets, a grid per method and a number of seeds. Its cells are filled as :mod:`dpbook.repro.reproduce` describes,
under DC-SGD's three protocols: ``"none"`` (free tuning: the best grid point re-trained with n seeds, as Tables
IV-V), ``"rdp"`` and ``"lt"`` (the search charged to the budget by RDP composition or by Liu-Talwar random
stopping, n independent searches, as Tables III and II). Two benchmarks are defined:
:data:`dpbook.repro.digits_benchmark.BENCHMARK` and :data:`dpbook.repro.mnist5k_benchmark.BENCHMARK`; ``python -m
dpbook.repro.sweep digits`` and ``python -m dpbook.repro.sweep mnist5k`` run them.

>>> from dpbook.tuning import grid_product
>>> tiny = Benchmark(study="doctest", setting=dict(dataset="digits", model="digits_mlp", epochs=1, batch_size=128),
...                  epsilons=(4.0,), grids={"dpsgd": grid_product(C=(0.5, 1.0))}, paper_G={"dpsgd": 10})
>>> [(r.hyperparameters["C"], r.seed) for r in tiny.planned_runs("dpsgd", 4.0, "rdp")][:3]
[(0.5, 0), (1.0, 1), (0.5, 100000)]
"""

from __future__ import annotations

__all__ = ["PROTOCOLS", "declared_grids", "Benchmark"]

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from dpbook.methods import METHODS, in_book_order
from dpbook.repro import reproduce, results
from dpbook.repro.experiment import Experiment, load_task_data
from dpbook.repro.params import check_known
from dpbook.repro.sources import Source, sources_table
from dpbook.repro.sweep import run_all

PROTOCOLS = ("none", "rdp", "lt")


def declared_grids(study: str) -> dict[str, list[dict]]:
    """Every method's grid in the benchmark ``study``, as its module declares it (``declaration.grids``), in the
    book's order; a method that declares none for ``study`` is not in the benchmark.

    >>> from dpbook.methods.declaration import DIGITS
    >>> grids = declared_grids(DIGITS)
    >>> list(grids)[:3], grids["dpsgd"][:2]
    (['dpsgd', 'dcsgd-p', 'dcsgd-e'], [{'C': 0.1}, {'C': 0.5}])
    """
    grids = {name: METHODS[name].declaration.grids.get(study) for name in in_book_order()}
    return {name: grid for name, grid in grids.items() if grid is not None}


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
                              seeds or self.seeds, results_dir)

    def planned_runs(self, method: str, epsilon: float, protocol: str, *, seeds: int | None = None,
                     epochs: int | None = None) -> list[Experiment]:
        """The cell's runs known before any result (a ValueError when it is unreachable)."""
        return reproduce.planned_runs(self.base(method, epsilon, protocol, epochs=epochs), self.grids[method],
                                      seeds or self.seeds)

    def run(self, *, jobs: int = 2, results_dir=results.RESULTS_DIR, methods: Sequence[str] | None = None,
            epsilons: Sequence[float] | None = None, seeds: int | None = None, epochs: int | None = None,
            progress: bool | None = None, executor: str = "local", slurm=None) -> list[dict]:
        """Phase 1 (every grid and search), then phase 2 (the re-runs of the best points); both sweep summaries.

        ``seeds`` and ``epochs`` other than the defaults make a smaller benchmark (a notebook's smoke test);
        ``executor`` and ``slurm`` say where the runs execute (:func:`dpbook.repro.sweep.run_all`).
        """
        methods = list(methods or self.methods)
        check_known("method(s)", methods, self.methods)
        load_task_data(self.base(methods[0], self.epsilons[0], "none"))  # a missing dataset says so once, here
        cells = [(m, e, p) for m in methods for e in (epsilons or self.epsilons) for p in PROTOCOLS]
        phase1, unreachable = [], []
        for m, e, p in cells:
            try:
                phase1 += self.planned_runs(m, e, p, seeds=seeds, epochs=epochs)
            except ValueError as err:
                unreachable.append(f"{m} eps={e:g} {p}: {str(err).splitlines()[0][:160]}")
        where = dict(jobs=jobs, executor=executor, slurm=slurm, results_dir=results_dir, progress=progress)
        first = run_all(phase1, device="cpu" if executor == "local" else "auto", **where)
        first["unreachable"] = unreachable
        phase2 = [r for m, e, p in cells if p == "none" for r in self._reruns(m, e, results_dir, seeds, epochs)]
        second = run_all(phase2, device="cpu" if executor == "local" else "auto", **where)
        return [first, second]

    def _reruns(self, method: str, epsilon: float, results_dir, seeds: int | None,
                epochs: int | None) -> list[Experiment]:
        try:
            return reproduce.reruns(self.base(method, epsilon, "none", epochs=epochs), self.grids[method],
                                    seeds or self.seeds, results_dir)
        except ValueError:
            return []
