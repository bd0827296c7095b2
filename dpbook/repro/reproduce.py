r"""Table cells as runs: searches, re-runs of the best point, and the numbers a "paper vs reproduced" table shows.

A cell of a paper's table is one (dataset, model, method, epsilon, protocol) with a hyperparameter grid. How it is
filled depends on the protocol's re-run rule (DC-SGD's three and Papernot and Steinke's, :mod:`dpbook.protocols`):

``"none"`` (no tuning cost; DC-SGD Tables IV, V, VIII, DPDR Table 1, DP-PSASC Table III)
    Every grid point trained once at the whole budget (seed = its index), then the best point re-trained with
    seeds 0..n-1; the cell is their mean ± std. A grid of one point is just the n seeds.
``"rdp"`` / ``"lt"`` / ``"ps"`` (tuning cost charged; DC-SGD Tables III / II; Papernot and Steinke)
    One search (its runs fixed in advance by :func:`dpbook.tuning.search_schedule`) gives one number, the best
    run's test accuracy; the cell is the mean ± std over n independent searches with base seeds
    0, 100000, 200000, ... (their run seeds never overlap). Under ``"lt"`` and ``"ps"`` the number of runs K of each
    search is random (drawn from its base seed, before any training) and recorded in the cell; under ``"ps"`` it is
    logarithmic with mean G, so K >= 1 and every search releases a model.

All runs are :class:`dpbook.repro.experiment.Experiment` s, so they are found on disk, skipped when done, and run by a
sweep (:mod:`dpbook.repro.sweep`). A cell whose budget the protocol cannot reach (LT at epsilon = 1), or whose method
cannot run at that noise (Andrew et al. need 2 sigma_b > sigma), is reported with the reason.

>>> base = Experiment(study="doctest", dataset="digits", model="digits_mlp", method="dpsgd", epsilon=4.0,
...                   delta=1e-5, epochs=1, batch_size=128, protocol="rdp")
>>> runs = search(base, [{"C": 0.5}, {"C": 1.0}], rep=1)
>>> [(r.hyperparameters["C"], r.G, r.seed) for r in runs]
[(0.5, 2, 100000), (1.0, 2, 100001)]
"""

from __future__ import annotations

__all__ = [
    "REP_SEED", "STAND_INS", "measured_size", "stand_in", "stand_in_note", "training_size", "plan", "RUN_FIELDS",
    "free", "search", "infeasible", "best_of", "reruns", "chosen_point", "planned_runs", "cell", "best_run",
    "cell_runs", "summarise", "empty_summary", "summary_or_unreachable", "within_budget", "train_until_done"
]

import functools
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import torch

from dpbook import data
from dpbook.methods import METHODS
from dpbook.protocols import PROTOCOLS
from dpbook.repro import results
from dpbook.repro.experiment import Experiment, load_task_data, plan_of
from dpbook.repro.sweep import run_all
from dpbook.tasks import TASKS
from dpbook.tuning import TuningPlan, search_schedule

REP_SEED = 100_000  # base seed of search r is r * REP_SEED

#: Offline stand-ins: a paper's dataset -> a dataset of the same shape and classes that ships with the book, which
#: a reproduction chapter can train that dataset's cells on (``stand_ins=True``) where the real one cannot be had.
STAND_INS = {"mnist": "mnist5k"}


def stand_in(exp: Experiment, use: bool) -> Experiment:
    """``exp`` on its dataset's stand-in (:data:`STAND_INS`) when ``use``, else unchanged.

    >>> exp = Experiment(study="s", dataset="mnist", model="mnist_cnn", method="dpsgd")
    >>> stand_in(exp, True).dataset, stand_in(exp, False).dataset
    ('mnist5k', 'mnist')
    """
    return exp.replace(dataset=STAND_INS[exp.dataset]) if use and exp.dataset in STAND_INS else exp


def stand_in_note(used: bool) -> str:
    """The paragraph under a "paper vs reproduced" table whose MNIST rows trained on a stand-in ("" otherwise)."""
    if not used:
        return ""
    return ("\n\n*With `stand_ins=True` the MNIST rows are trained on MNIST-5k (`dpbook.data.load_mnist5k`, "
            "4,000 training images), not on MNIST: compare the methods with each other, not their accuracies or "
            "the difference column with the paper's.*")


def training_size(exp: Experiment) -> int:
    """N of the experiment's training set, so that a search is planned without loading data: the task registry's
    (:data:`dpbook.tasks.TASKS`), the stand-in's for a smoke run, ``train_size`` when it subsamples, and
    :func:`measured_size` where the registry cannot know it (NAMES)."""
    task = TASKS[exp.dataset]
    if exp.smoke:
        N = task.smoke_sizes[0]
    else:
        N = task.train_size if task.train_size is not None else measured_size(exp.dataset)
    return min(N, exp.train_size) if exp.train_size is not None else N


#: The sizes :func:`measured_size` loaded, by dataset: the first root a process reads a dataset from is the one its
#: runs are planned with (a dict, not ``functools.cache``: the root is not part of the key).
_MEASURED: dict[str, int] = {}


def measured_size(dataset: str, root: str | Path = data.DEFAULT_ROOT) -> int:
    """N of a dataset whose size the task registry cannot give (NAMES: a split of whatever names its files hold),
    loaded from ``root`` once and remembered for the planning of this process's runs.

    Raises :class:`dpbook.data.DatasetNotFoundError` (a ``FileNotFoundError``) while the files are missing.
    """
    if dataset not in _MEASURED:
        probe = Experiment(study="size", dataset=dataset, model=TASKS[dataset].model, method="dpsgd")
        _MEASURED[dataset] = len(load_task_data(probe, root=root).y_train)
    return _MEASURED[dataset]


def plan(base: Experiment, G: int) -> TuningPlan:
    """The calibrated plan of the cell's runs (a ValueError says why when the budget is unreachable); each setting
    is calibrated once per process (:func:`dpbook.repro.experiment.plan_of`)."""
    return plan_of(base.replace(G=G), training_size(base))


def free(base: Experiment) -> bool:
    """The re-run rule of the cell's protocol (:attr:`dpbook.protocols.Protocol.free`): True when tuning is free,
    so that the grid is trained once and its best point re-trained with every seed; False when every repetition is a
    whole search, charged."""
    return PROTOCOLS[base.protocol].free


def _check_feasible(base: Experiment, grid: Sequence[Mapping], the_plan: TuningPlan) -> None:
    """Build and bind the method at the plan's noise for every grid point: a ValueError names the first
    constraint violated (e.g. DPDR's GDR steps alone overspend, or Andrew et al.'s 2 sigma_b <= sigma), so that a
    sweep never plans a run that cannot start."""
    for point in grid:
        problem = _infeasible(base.method, the_plan, tuple(sorted(dict(point).items())), base.batch_size)
        if problem is not None:
            raise ValueError(problem)


@functools.cache
def _infeasible(method: str, the_plan: TuningPlan, point: tuple, B: int) -> str | None:
    """Why ``method`` cannot run at ``the_plan``'s noise with the hyperparameters ``point`` (sorted items) and
    expected batch size B, or None. Checked once per process: a chapter asks for the same cell many times, and
    DPDR's check is a calibration."""
    try:
        METHODS[method].from_plan(the_plan, **dict(point)).bind([torch.zeros(1)], expected_batch_size=B)
    except ValueError as err:
        return str(err)
    return None


#: Grid keys that set a field of the run instead of a method hyperparameter (they do not change its noise).
RUN_FIELDS = ("lr", "optimizer")


def _split(base: Experiment, point: Mapping) -> dict:
    """The changes a grid point makes to ``base``: run fields (:data:`RUN_FIELDS`) and method hyperparameters."""
    fields = {k: v for k, v in point.items() if k in RUN_FIELDS}
    hyperparameters = dict(base.hyperparameters) | {k: v for k, v in point.items() if k not in RUN_FIELDS}
    return fields | {"hyperparameters": hyperparameters}


def search(base: Experiment, grid: Sequence[Mapping], rep: int = 0) -> list[Experiment]:
    """The runs of one search over ``grid`` for the cell ``base`` (its protocol, budget, method, setting).

    A grid point may also set the learning rate or the optimizer (:data:`RUN_FIELDS`), e.g. DC-SGD's Table V
    tunes eta: ``[{"C": 1.0, "lr": 0.01}, ...]``.

    Raises ValueError when the protocol cannot reach the budget or the method cannot run at that noise.
    """
    points = [_split(base, point) for point in grid]
    the_plan = plan(base, len(points))
    _check_feasible(base, [p["hyperparameters"] for p in points], the_plan)
    if free(base):
        return [base.replace(G=1, seed=i, **p) for i, p in enumerate(points)]
    return [base.replace(G=len(points), seed=seed, **points[index])
            for _, index, seed in search_schedule(the_plan, rep * REP_SEED)]


def infeasible(run: Experiment) -> str | None:
    """Why ``run`` cannot start (its budget unreachable, or its method unable to run at the plan's noise: a DPDR s
    whose GDR steps alone exceed the budget), in one line, or None. As cheap to ask again as :func:`search`: its
    plan and its method's check are computed once per process."""
    try:
        search(run, [{}])
    except ValueError as err:
        return str(err).splitlines()[0]
    return None


def best_of(runs: Sequence[Experiment], results_dir=results.RESULTS_DIR,
            metric: str = "test_accuracy") -> tuple[Experiment, float] | None:
    """The run with the highest final ``metric`` (the first on ties); None while any run is missing."""
    best = None
    for exp in runs:
        path = exp.path(results_dir)
        if not path.exists():
            return None
        value = results.final_metric(results.read_result(path), metric)
        if best is None or value > best[1]:
            best = (exp, value)
    return best


def reruns(base: Experiment, grid: Sequence[Mapping], seeds: int, results_dir=results.RESULTS_DIR) -> list[Experiment]:
    """Protocol "none": the best grid point re-trained with seeds 0..seeds-1 ([] until the grid is complete)."""
    grid_runs = search(base.replace(protocol="none"), grid)
    if len(grid_runs) == 1:
        return [grid_runs[0].replace(seed=s) for s in range(seeds)]
    best = best_of(grid_runs, results_dir)
    return [] if best is None else [best[0].replace(seed=s) for s in range(seeds)]


def chosen_point(run: Experiment, base: Experiment) -> dict:
    """What a search chose: the run's hyperparameters, plus its learning rate or optimizer when they differ."""
    return dict(run.hyperparameters) | {k: getattr(run, k) for k in RUN_FIELDS if getattr(run, k) != getattr(base, k)}


def planned_runs(base: Experiment, grid: Sequence[Mapping], seeds: int) -> list[Experiment]:
    """Every run the cell needs that is known before any result: the grid ("none") or all n searches."""
    if free(base):
        runs = search(base, grid)
        return runs if len(runs) > 1 else [runs[0].replace(seed=s) for s in range(seeds)]
    return [run for rep in range(seeds) for run in search(base, grid, rep)]


def cell(base: Experiment, grid: Sequence[Mapping], seeds: int, results_dir=results.RESULTS_DIR) -> dict:
    """The cell's values (fractions), the hyperparameters chosen, sigma, and a status.

    ``status``: "ok" (``seeds`` values), "partial", "not run yet", or "unreachable" with the ``reason``. ``K``: the
    number of runs of each search (empty under "none").
    """
    K = []
    try:
        if free(base):
            runs = reruns(base, grid, seeds, results_dir)
            found = [results.read_result(r.path(results_dir)) for r in runs if r.path(results_dir).exists()]
            values = [results.final_metric(r) for r in found]
            chosen = [chosen_point(runs[0], base)] if runs else []
            sigmas = [r["sigma"] for r in found]
        else:
            values, chosen, sigmas = [], [], []
            for rep in range(seeds):
                runs = search(base, grid, rep)
                K.append(len(runs))
                best = best_of(runs, results_dir)
                if best is not None:
                    values.append(best[1])
                    chosen.append(chosen_point(best[0], base))
                    sigmas.append(results.read_result(best[0].path(results_dir))["sigma"])
    except ValueError as err:
        return {"status": "unreachable", "reason": str(err), "values": [], "chosen": [], "sigma": None, "K": []}
    status = "ok" if len(values) == seeds else ("partial" if values else "not run yet")
    return {"status": status, "values": values, "chosen": chosen, "sigma": sigmas[0] if sigmas else None, "K": K}


# ----------------------------------------------------------------------------------------------------------------
# A chapter's cells: what to train next, what to show, and the run-mode loop


def best_run(base: Experiment, grid: Sequence[Mapping], results_dir=results.RESULTS_DIR) -> Experiment | None:
    """The grid run (protocol "none") with the highest final test accuracy, the first on ties; None while any grid
    run is missing."""
    found = best_of(search(base.replace(protocol="none"), grid), results_dir)
    return None if found is None else found[0]


def cell_runs(base: Experiment, grid: Sequence[Mapping], seeds: int,
              results_dir=results.RESULTS_DIR) -> list[Experiment]:
    """What the cell needs trained now: its planned runs, then (protocol "none", once the grid is complete) the
    re-runs of its best point."""
    runs = planned_runs(base, grid, seeds)
    return runs + reruns(base, grid, seeds, results_dir) if free(base) else runs


def summarise(base: Experiment, grid: Sequence[Mapping], seeds: int, results_dir=results.RESULTS_DIR) -> dict:
    """:func:`cell`, with what a chapter's tables and figures show.

    ``status``: "not run yet", "grid k/G done", "grid done, n/seeds seeds", "n/seeds searches done" or "done";
    ``best``: the best grid run of a protocol "none" cell (None until its grid is complete, and for searches);
    ``records``: the result records of its re-runs found. A ValueError when the cell is unreachable.
    """
    best, records = None, []
    if free(base):
        best = best_run(base, grid, results_dir)
        if best is None:
            done = sum(run.path(results_dir).exists() for run in search(base.replace(protocol="none"), grid))
            return empty_summary(f"grid {done}/{len(grid)} done" if done else "not run yet")
        paths = [run.path(results_dir) for run in reruns(base, grid, seeds, results_dir)]
        records = [results.read_result(path) for path in paths if path.exists()]
    the_cell = cell(base, grid, seeds, results_dir)
    if the_cell["status"] == "unreachable":
        raise ValueError(the_cell["reason"])
    n = len(the_cell["values"])
    if n == seeds:
        status = "done"
    elif free(base):
        status = f"grid done, {n}/{seeds} seeds"
    else:
        status = f"{n}/{seeds} searches done" if n else "not run yet"
    return {**the_cell, "status": status, "records": records, "best": best}


def empty_summary(status: str) -> dict:
    """What :func:`summarise` returns for a cell without results: its ``status`` and nothing else."""
    return {"status": status, "values": [], "chosen": [], "records": [], "best": None, "sigma": None, "K": []}


def summary_or_unreachable(spec: Callable[[], tuple[Experiment, Sequence[Mapping], int] | None],
                           results_dir=results.RESULTS_DIR, waits_for: str = "another cell") -> dict:
    """:func:`summarise` of the cell ``spec()`` gives as (base, grid, seeds). A ``spec()`` of None is a cell that
    waits for another's best point (DPDR's on DP-SGD's: ``waits_for`` names it); a ValueError (from ``spec`` or the
    plan) makes it unreachable, with the ``reason``; a missing dataset whose size the plan needs (NAMES) leaves it
    not run yet.

    >>> summary_or_unreachable(lambda: None, waits_for="DP-SGD")["status"]
    "waits for DP-SGD's grid"
    >>> def unreachable():
    ...     raise ValueError("no sigma reaches epsilon = 0.1")
    >>> summary_or_unreachable(unreachable)["status"]
    'unreachable: no sigma reaches epsilon = 0.1'
    """
    try:
        found = spec()
        return empty_summary(f"waits for {waits_for}'s grid") if found is None else summarise(*found, results_dir)
    except ValueError as err:
        return {**empty_summary("unreachable: " + str(err).splitlines()[0][:100]), "reason": str(err)}
    except FileNotFoundError as err:
        return {**empty_summary("not run yet"), "reason": str(err)}


def within_budget(study: str, results_dir=results.RESULTS_DIR, smoke: bool = False) -> bool:
    """Whether every recorded run of ``study`` spent at most its epsilon (the chapters' check cell)."""
    recorded = results.load_results(study, root=results_dir, smoke=smoke)
    return all(r["epsilon_spent"] <= r["experiment"]["epsilon"] * (1 + 1e-9) for r in recorded)


def train_until_done(wanted: Callable[[], Iterable[Experiment]], results_dir=results.RESULTS_DIR,
                     **run_kwargs) -> dict:
    """Run mode: train what ``wanted()`` lists, round after round, until nothing new can be trained.

    A finished round can unlock more runs (the re-runs of a completed grid, a cell that waits for another's best
    point), so ``wanted`` is called again after every round; a run that failed is not retried. ``run_kwargs`` go
    to :func:`dpbook.repro.sweep.run_all` (``jobs``, ``device``, ``data_root``, ``download``, ...). Prints one line per
    round and the failures grouped by error; returns ``{"rounds": n, "failed": {path: error}}``.
    """
    failed, rounds = {}, 0
    while True:
        todo = {}
        for run in wanted():
            path = run.path(results_dir)
            if not results.recorded(path) and str(path) not in failed:
                todo[path] = run
        if not todo:
            break
        rounds += 1
        summary = run_all(list(todo.values()), results_dir=results_dir, **run_kwargs)
        failed.update(dict(summary["failed"]))
        print(f"round {rounds}: {summary['done']} run(s) trained, {len(summary['failed'])} failed")
        if summary["done"] == 0:
            break
    errors = {}
    for path, error in failed.items():
        errors.setdefault(error.strip(), []).append(Path(path).name)
    for error, names in errors.items():
        print(f"FAILED ({len(names)} run(s), e.g. {names[0]}): {error}")
    print(f"run mode: {rounds} round(s); {len(failed)} run(s) failed")
    return {"rounds": rounds, "failed": failed}
