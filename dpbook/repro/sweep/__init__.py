"""Sweeps: run a grid of reproduction runs, skipping finished ones, surviving interruption, several at once.

Two kinds of sweep share this module:

- **in-process runs** of :class:`dpbook.repro.experiment.Experiment` (:func:`run_all`), used by the benchmarks
  (``python -m dpbook.repro.sweep digits --jobs 2``, ``python -m dpbook.repro.sweep mnist5k --jobs 2``);
- **papermill executions** of a reproduction notebook over a grid of parameters (:func:`run_notebook_grid`), e.g.
  every method x epsilon x seed of one table on a GPU::

      python -m dpbook.repro.sweep notebook notebooks/reproduce_dcsgd.ipynb \\
          --grid "methods=['dpsgd'],['dcsgd-p'],['dcsgd-e']" --grid "epsilons=[2.0],[4.0],[8.0]" \\
          --set mode=run --set table=IV --set "datasets=['mnist']" --jobs 1

  (grid values are separated by the commas outside brackets; each value is read by
  :func:`dpbook.repro.params.assignments`, a value in brackets being a Python list, passed to papermill as YAML).

Every run writes its own result file atomically, so a sweep that is interrupted (Ctrl-C, a Colab disconnect)
loses at most the runs in flight, and those resume from their checkpoints when the same command is run again.
Runs whose result file exists are skipped before anything starts. ``--jobs N`` runs N at once (processes, one
CPU thread each by default); a failed run is reported and the sweep goes on. The command line
(``python -m dpbook.repro.sweep``, with ``status`` and ``resume``) is this package's ``__main__`` module.
"""

from __future__ import annotations

__all__ = [
    "WORKER_MEMORY_GB", "worker_cap", "run_one", "run_all", "check_notebook_grid", "notebook_executions",
    "executed_name", "run_notebook_grid", "run_notebooks"
]

import concurrent.futures as cf
import hashlib
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from tqdm.std import tqdm

from dpbook import checks, io, train
from dpbook.repro import dispatch, params, results
from dpbook.repro.dispatch import Outcome
from dpbook.repro.experiment import Experiment, train_once
from dpbook.tuning import grid_product


def _init_worker(threads: int, parent: int | None = None) -> None:
    import torch

    _die_with_parent(parent)
    torch.set_num_threads(threads)


def _die_with_parent(parent: int | None = None) -> None:
    """Ask Linux to end this process when the process that started it (``parent``, a pid) dies, even by
    ``kill -9``, so that killing a sweep leaves no worker training on its own; a parent that died before the request
    ends this process at once. Elsewhere nothing (pool workers there end with the pool)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if parent is not None and os.getppid() != parent:  # orphaned before the request took effect
            os._exit(1)


def run_one(exp: Experiment, kwargs: dict, wait: bool = False) -> Outcome:
    """Train one run unless it is recorded, holding its claim (:func:`dpbook.repro.experiment.train_once`); its
    :class:`~dpbook.repro.dispatch.Outcome`: done, skipped, failed with the error's first line (its type and
    message), or held by another process (unless ``wait``: then this one waits for it). A run stopped on request
    (:class:`dpbook.train.Interrupted`, a preempted job) is not an error: it propagates, and its checkpoint resumes
    it."""
    started = time.perf_counter()
    path = str(exp.path(kwargs.get("results_dir", results.RESULTS_DIR)))
    try:
        _, trained = train_once(exp, progress=False, wait=wait, **kwargs)
        return Outcome(path, time.perf_counter() - started, "done" if trained else "skipped")
    except io.Held as held:
        return Outcome(path, 0.0, "held", str(held))
    except train.Interrupted:
        raise
    except Exception as err:  # a sweep reports a failed run, in one line, and goes on
        return Outcome(path, 0.0, "failed", f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}")


#: Memory one local worker holds, in GB: a digits or MNIST-5k run's process measured about 0.65 GB resident (the
#: sweep's --jobs is capped so that the workers fit in the memory available).
WORKER_MEMORY_GB = 0.65


def worker_cap(jobs: int) -> tuple[int, str]:
    """``jobs`` capped by this machine's CPUs and by the memory available (:data:`WORKER_MEMORY_GB` a worker),
    with the message that says so ("" when ``jobs`` fits)."""
    cpus = os.cpu_count() or 1
    available = _available_memory_gb()
    by_memory = jobs if available is None else max(1, int(available // WORKER_MEMORY_GB))
    cap = min(jobs, cpus, by_memory)
    if cap == jobs:
        return jobs, ""
    memory = "" if available is None else (f" and {available:.1f} GB of memory available ({WORKER_MEMORY_GB} GB a "
                                           f"worker)")
    return cap, f"--jobs {jobs} capped to {cap}: this machine has {cpus} CPU(s){memory}"


def _available_memory_gb() -> float | None:
    """MemAvailable of /proc/meminfo in GB (None where there is none)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    found = [line.split()[1] for line in lines if line.startswith("MemAvailable:")]
    return int(found[0]) / 2**20 if found else None


def _in_two_passes(todo: Sequence[Experiment], run: Callable[[Sequence[Experiment], bool], Iterable],
                   summary: dict) -> Iterator[Outcome]:
    """The outcomes of the runs ``todo``: ``run(runs, wait)`` yields ``(experiment, outcome)`` pairs; the runs
    another process held in the first pass are run again at the end, waiting for it (two sweeps over one results
    folder each train what the other is not training, then wait for the rest). ``summary["elsewhere"]`` counts those
    the other process recorded."""
    held = []
    for exp, outcome in run(todo, False):
        if outcome.state == "held":
            held.append(exp)
        else:
            yield outcome
    summary["elsewhere"] = 0
    for _, outcome in run(held, True):
        summary["elsewhere"] += outcome.state == "skipped"
        yield outcome


def run_all(experiments: Iterable[Experiment], *, jobs: int = 1, threads: int = 1, progress: bool | None = None,
            executor: str = "local", slurm: dispatch.SlurmOptions | None = None,
            sweep_dir: str | Path | None = None, plan: dict | None = None, **run_kwargs) -> dict:
    """Run every experiment whose result file does not exist yet; return counts, the failures and the manifest.

    ``executor`` (:data:`dpbook.repro.dispatch.EXECUTORS`): ``"local"`` runs ``jobs`` processes at once, each with
    ``threads`` torch threads; ``"debug"`` runs in this process; ``"slurm"`` submits one job array with the
    ``slurm`` options. The manifest goes to ``sweep_dir`` (default ``<results_dir>/.sweeps/<UTC time>``), with the
    benchmark ``plan`` the runs come from (:meth:`dpbook.repro.benchmark.Benchmark.run`).
    ``run_kwargs`` go to :func:`dpbook.repro.experiment.run_experiment` (``results_dir``, ``device``,
    ``data_root``, ...). Each run is claimed while it trains (:func:`dpbook.io.claim`): a run that another sweep is
    training is left to the end, then waited for, and counted as skipped once that sweep has recorded it.
    """
    checks.one_of("executor", executor, dispatch.EXECUTORS)
    results_dir = run_kwargs.get("results_dir", results.RESULTS_DIR)
    unique = {exp.path(results_dir): exp for exp in experiments}
    io.remove_stale_temporaries(Path(results_dir))
    todo = [exp for path, exp in unique.items() if not results.recorded(path)]
    summary = {"planned": len(unique), "skipped": len(unique) - len(todo), "done": 0, "failed": []}
    if not todo:
        return summary
    folder = Path(sweep_dir) if sweep_dir is not None else dispatch.sweep_folder(results_dir)
    manifest = dispatch.Manifest.new(folder, executor, results_dir, run_kwargs, slurm, list(unique.values()), plan)
    manifest.write()
    summary["manifest"] = str(manifest.path)
    bar = tqdm(total=len(todo), disable=None if progress is None else not progress, unit="run", desc="sweep")
    bar.write(f"sweep of {len(todo)} run(s) on {executor}; manifest {manifest.path}")
    if executor != "local":
        submitted = dispatch.submit(todo, kind=executor, folder=folder, slurm=slurm, run_kwargs=run_kwargs,
                                    run=run_one)
        manifest.record_jobs([([exp.key() for exp in group], job) for group, job in submitted])
        bar.write(f"{len(submitted)} {executor} job(s)")
        labelled = [([str(exp.path(results_dir)) for exp in group], job) for group, job in submitted]
        dispatch.collect(labelled, lambda outcome: _collect([outcome], summary, bar))
    elif jobs <= 1:
        _init_worker(threads)
        in_turn = lambda runs, wait: ((exp, run_one(exp, run_kwargs, wait)) for exp in runs)  # noqa: E731
        _collect(_in_two_passes(todo, in_turn, summary), summary, bar)
    else:
        jobs, capped = worker_cap(jobs)
        if capped:
            bar.write(capped)
        context = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker,
                                    initargs=(threads, os.getpid())) as pool:
            def at_once(runs, wait):
                futures = {pool.submit(run_one, exp, run_kwargs, wait): exp for exp in runs}
                return ((futures[f], f.result()) for f in cf.as_completed(futures))

            _collect(_in_two_passes(todo, at_once, summary), summary, bar)
    bar.close()
    return summary


def _collect(outcomes: Iterable[Outcome], summary: dict, bar) -> None:
    for outcome in outcomes:
        if outcome.state == "failed":
            summary["failed"].append((outcome.path, outcome.why))  # printed once, in the sweep's summary
        else:
            summary[outcome.state] = summary.get(outcome.state, 0) + 1
        bar.update(1)
        bar.set_postfix(done=summary["done"], failed=len(summary["failed"]))


# ----------------------------------------------------------------------------------------------------------------
# Notebook grids (papermill)
# ----------------------------------------------------------------------------------------------------------------

def _failed_cell(executed: Path, stderr: str) -> str:
    """Why a papermill run failed, in one line: the failing cell (its first line) and its exception,
    read from the executed notebook; else the last line papermill printed.

    >>> _failed_cell(Path("no-such.ipynb"), "Traceback ...\\nValueError: unknown method 'x'\\n")
    "ValueError: unknown method 'x'"
    """
    try:
        import nbformat

        cells = nbformat.read(executed, as_version=4).cells
    except (OSError, ValueError):
        cells = []
    for cell in cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                first = next((line for line in cell.source.splitlines() if line.strip()), "")[:60]
                return f"the cell {first!r} raised {output['ename']}: {output['evalue']}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else "papermill failed without a message"


def check_notebook_grid(notebook: Path, points: list[dict]) -> tuple[dict, dict]:
    """Refuse the whole sweep, before anything runs, when a grid point names a parameter the notebook does not
    have or gives a value its parameter cannot take (the notebook's own parameter check would stop that run).
    Returns the notebook's parameters with their defaults, and their annotations."""
    import nbformat

    cells = nbformat.read(notebook, as_version=4).cells
    source = [c.source for c in cells if "parameters" in c.metadata.get("tags", [])]
    if len(source) != 1:
        raise ValueError(f"{notebook}: a notebook to sweep needs one cell tagged 'parameters', found {len(source)}")
    declared, annotations = params.parameters_cell(source[0])
    given = [n for point in points for n in point]
    unknown = params.unknown_parameters(given, declared)
    problems = [unknown] if unknown else []
    for name in dict.fromkeys(n for n in given if n in declared):
        values = {repr(point[name]): point[name] for point in points if name in point}  # each value once
        for value in values.values():
            try:
                params.checked(name, value, declared[name], annotations.get(name))
            except ValueError as err:
                problems.append(str(err))
    if problems:
        raise ValueError(f"{notebook}: the sweep was not started:\n  " + "\n  ".join(problems)
                         + f"\n{notebook.name}'s parameters: {', '.join(declared)}")
    return declared, annotations


def notebook_executions(notebook: str | Path, grid: dict[str, list], fixed: dict[str, Any], *,
                        output_dir: str | Path = "data/results/executed",
                        kernel: str = "python3") -> list[dispatch.Execution]:
    """The papermill execution of each grid point (plus the ``fixed`` parameters), every point checked first
    (:func:`check_notebook_grid`). Each writes under ``output_dir`` a notebook named by :func:`executed_name`,
    which no other set of parameters shares."""
    notebook = Path(notebook)
    points = grid_product(**grid)
    check_notebook_grid(notebook, [{**fixed, **point} for point in points])

    def execution(point: dict) -> dispatch.Execution:
        parameters = json.loads(json.dumps({**fixed, **point}))  # as papermill records them: tuples as lists
        return dispatch.Execution(notebook, Path(output_dir) / executed_name(notebook, point, parameters),
                                  parameters, kernel)

    return [execution(point) for point in points]


def executed_name(notebook: Path, point: dict[str, Any], parameters: dict[str, Any]) -> str:
    """The executed notebook's file name: the notebook's stem and the grid ``point`` as a readable prefix, then a
    digest of every parameter it runs with, so that two executions with different parameters never share a file
    (whatever the characters the prefix leaves out).

    >>> executed_name(Path("nb.ipynb"), {"seed": 1}, {"seed": 1, "mode": "run"})
    'nb_seed=1_363f074e26.ipynb'
    >>> executed_name(Path("nb.ipynb"), {"seed": 1}, {"seed": 1, "mode": "render"})
    'nb_seed=1_a66ff71b6a.ipynb'
    """
    tag = re.sub(r"[^A-Za-z0-9._=-]+", "", "_".join(f"{k}={v}" for k, v in point.items()))[:80]
    digest = hashlib.sha256(json.dumps(parameters, sort_keys=True).encode()).hexdigest()  # JSON values already
    return "_".join(filter(None, (notebook.stem, tag, digest[:10]))) + ".ipynb"


def run_notebook_grid(notebook: str | Path, grid: dict[str, list], fixed: dict[str, Any], *,
                      output_dir: str | Path = "data/results/executed", jobs: int = 1,
                      kernel: str = "python3", progress: bool | None = None, executor: str = "local",
                      slurm: dispatch.SlurmOptions | None = None) -> dict:
    """Execute ``notebook`` with papermill once per grid point (plus the ``fixed`` parameters).

    Each execution is a separate ``papermill`` process; the executed notebook is kept under ``output_dir``. The
    notebook itself skips runs whose result file exists (its runs go through
    :func:`dpbook.repro.experiment.run_experiment`), so rerunning the same sweep only trains what is missing.
    ``executor``: ``"local"`` runs ``jobs`` executions at once here; ``"debug"`` and ``"slurm"`` submit one job per
    execution (SLURM: one job array). The manifest and the job logs go under ``<output_dir>/.sweeps/``.
    """
    checks.one_of("executor", executor, dispatch.EXECUTORS)
    executions = notebook_executions(notebook, grid, fixed, output_dir=output_dir, kernel=kernel)
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    return run_notebooks(executions, output_dir=output_dir, jobs=jobs, progress=progress, executor=executor,
                         slurm=slurm)


def run_notebooks(executions: Sequence[dispatch.Execution], *, output_dir: str | Path, jobs: int = 1,
                  progress: bool | None = None, executor: str = "local", slurm: dispatch.SlurmOptions | None = None,
                  sweep_dir: str | Path | None = None, skip_done: bool = False) -> dict:
    """Run the papermill ``executions`` on ``executor`` and write the sweep's manifest (in ``sweep_dir``, default
    ``<output_dir>/.sweeps/<UTC time>``). ``skip_done`` (``resume``): leave out the executions papermill already
    ran to their end with their parameters."""
    folder = Path(sweep_dir) if sweep_dir is not None else dispatch.sweep_folder(output_dir)
    manifest = dispatch.Manifest.new_notebooks(folder, executor, output_dir, slurm, executions)
    manifest.write()
    todo = [e for e in executions if not (skip_done and e.done())]
    summary = {"planned": len(executions), "done": 0, "failed": [], "manifest": str(manifest.path),
               **({"skipped": len(executions) - len(todo)} if skip_done else {})}

    def execute(e: dispatch.Execution) -> Outcome:
        sweep_pid = os.getpid()
        done = subprocess.run(e.command(), capture_output=True, text=True, env=os.environ.copy(),
                              preexec_fn=lambda: _die_with_parent(sweep_pid))  # its kernel ends with it too
        return Outcome(str(e.out), 0.0) if done.returncode == 0 else Outcome(str(e.out), 0.0, "failed",
                                                                            _failed_cell(e.out, done.stderr))

    bar = tqdm(total=len(todo), disable=None if progress is None else not progress, unit="notebook")
    bar.write(f"sweep of {len(todo)} notebook execution(s) on {executor}; manifest {manifest.path}")
    if executor == "local":
        jobs, capped = worker_cap(max(1, jobs))
        if capped:
            bar.write(capped)
        with cf.ThreadPoolExecutor(jobs) as pool:
            _collect(pool.map(execute, todo), summary, bar)
    elif todo:
        tasks = [dispatch.NotebookTask(e, _failed_cell) for e in todo]
        submitted = dispatch.submit_tasks(tasks, kind=executor, folder=folder, slurm=slurm)
        manifest.record_jobs([([e.out.stem], job) for e, job in zip(todo, submitted)])
        bar.write(f"{len(submitted)} {executor} job(s)")
        dispatch.collect([([str(e.out)], job) for e, job in zip(todo, submitted)],
                         lambda outcome: _collect([outcome], summary, bar))
    bar.close()
    return summary
