r"""Where a sweep's runs execute: this machine's process pool, in-process for debugging, or SLURM through submitit.

Three executors (:data:`EXECUTORS`), one call (:func:`dpbook.repro.sweep.run_all`):

``"local"`` (the default)
    A pool of ``jobs`` processes on this machine, with a progress bar.
``"debug"``
    submitit's ``DebugExecutor``: every run in this process, one after the other, so that a debugger can stop in it
    (an error in the harness itself opens ``pdb``; a run's own error is reported as a failed run, as elsewhere).
``"slurm"``
    submitit's SLURM executor: the runs still missing go out as **one job array** (``runs_per_job`` runs per array
    task), with the partition, account, QOS, GPUs, CPUs, memory, time limit and array parallelism of
    :class:`SlurmOptions` (command-line flags, or a TOML file: :meth:`SlurmOptions.from_file`). A preempted or
    timed-out task saves its run's checkpoint after the current step (:func:`dpbook.train.request_stop`), is
    requeued by submitit, and resumes from that checkpoint.

Every sweep writes a manifest (:class:`Manifest`) under ``<results_dir>/.sweeps/``: each run's key, its result file,
its job id and log files. ``python -m dpbook.repro.sweep status MANIFEST`` prints what is pending, running, done
or failed (with the failing line), and ``python -m dpbook.repro.sweep resume MANIFEST`` submits again only what is
not done. A run's result file is the truth: a finished run is skipped whatever the manifest says.

Ray is not needed here: the runs are independent batch jobs that each write their own file, which is what SLURM
job arrays do natively (queueing, time limits, preemption and requeue), with no service to start in an allocation.
"""

from __future__ import annotations

__all__ = [
    "EXECUTORS", "Outcome", "SlurmOptions", "RunTask", "KERNEL_START_TIMEOUT_S", "papermill_yaml", "Execution",
    "NotebookTask", "submit", "submit_tasks", "collect", "executed_without_error", "sweep_folder", "MANIFEST_VERSION",
    "Manifest"
]

import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import submitit

from dpbook import checks, io, train
from dpbook.repro import results
from dpbook.repro.experiment import Experiment

EXECUTORS = ("local", "debug", "slurm")


class Outcome(NamedTuple):
    """What became of one run (or one notebook execution) of a sweep: ``state`` is ``"done"`` (made by this sweep),
    ``"skipped"`` (recorded already, or made meanwhile by the process this sweep waited for), ``"held"`` (another
    process is making it: the sweep comes back to it at the end) or ``"failed"``, with ``why`` in one line."""

    path: str
    seconds: float
    state: str = "done"
    why: str = ""


def _option(default, help_text: str, domain: checks.Domain):
    """A field of :class:`SlurmOptions` with the help text and the domain of its command-line flag (the file's
    value is checked by the same domain; its messages end with the help text)."""
    return dataclasses.field(default=default, metadata={"help": help_text,
                                                        "domain": dataclasses.replace(domain, fix=help_text)})


@dataclass(frozen=True)
class SlurmOptions:
    """What a SLURM job array asks for: per array task (``gpus``, ``cpus``, ``mem_gb``, ``time_min``), where it
    runs (``partition``, ``account``, ``qos``), how many tasks run at once (``array_parallelism``) and how many runs
    one task trains in turn (``runs_per_job``). ``extra`` passes any other ``#SBATCH`` option, e.g.
    ``{"constraint": "a100"}``.

    >>> SlurmOptions(partition="gpu", gpus=1).parameters()["slurm_partition"]
    'gpu'
    """

    partition: str | None = _option(None, "SLURM partition", checks.text())
    account: str | None = _option(None, "SLURM account", checks.text())
    qos: str | None = _option(None, "SLURM QOS", checks.text())
    gpus: int = _option(0, "GPUs per array task", checks.integers(0))
    cpus: int = _option(1, "CPUs per array task", checks.integers(1))
    mem_gb: float | None = _option(None, "memory per array task, GB", checks.numbers(above=0))
    time_min: int = _option(60, "time limit per array task, minutes", checks.integers(1))
    array_parallelism: int = _option(32, "array tasks running at once", checks.integers(1))
    runs_per_job: int = _option(1, "runs one array task trains in turn", checks.integers(1))
    extra: dict = dataclasses.field(default_factory=dict)  # the file only: any other #SBATCH option

    @classmethod
    def flags(cls) -> dict[str, tuple[checks.Domain, str]]:
        """The options a command line sets, ``{name: (domain, help)}`` (every field but ``extra``).

        >>> domain, text = SlurmOptions.flags()["time_min"]
        >>> domain.what, text
        ('an integer >= 1', 'time limit per array task, minutes')
        """
        return {f.name: (f.metadata["domain"], f.metadata["help"]) for f in dataclasses.fields(cls)
                if "domain" in f.metadata}

    def __post_init__(self):
        for name, (domain, _) in self.flags().items():
            domain.check(name, getattr(self, name))

    @classmethod
    def from_file(cls, path: str | Path, **overrides) -> "SlurmOptions":
        """Options from a TOML file (its top level, or its ``[slurm]`` table), then ``overrides`` (flags given
        on the command line; None means not given). A misspelt key is an error that names the valid ones."""
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib
        with open(path, "rb") as f:
            try:
                table = tomllib.load(f)
            except tomllib.TOMLDecodeError as err:
                raise ValueError(f"{path} is not valid TOML ({err}): fix the file (dpbook.repro.dispatch shows one)") \
                    from None
        table = table.get("slurm", table)
        valid = [f.name for f in dataclasses.fields(cls)]
        wrong = [k for k in table if k not in valid]
        if wrong:
            hint = checks.did_you_mean(wrong[0], valid)
            raise ValueError(f"{path}: unknown SLURM option(s) {wrong}{hint}; valid: {', '.join(valid)}")
        return cls(**{**table, **{k: v for k, v in overrides.items() if v is not None}})

    def parameters(self) -> dict[str, Any]:
        """submitit's ``update_parameters`` keywords."""
        out = {"timeout_min": self.time_min, "cpus_per_task": self.cpus, "slurm_array_parallelism":
               self.array_parallelism, "slurm_additional_parameters": dict(self.extra)}
        if self.gpus:
            out["gpus_per_node"] = self.gpus
        if self.mem_gb is not None:
            out["mem_gb"] = self.mem_gb
        for name in ("partition", "account", "qos"):
            if getattr(self, name) is not None:
                out[f"slurm_{name}"] = getattr(self, name)
        return out


# ----------------------------------------------------------------------------------------------------------------
# The work of one job
# ----------------------------------------------------------------------------------------------------------------

class RunTask(submitit.helpers.Checkpointable):
    """One job's work: train ``experiments`` in turn (each skipped when recorded, resumed from its checkpoint when
    one exists), with ``run`` (:func:`dpbook.repro.sweep.run_one`), and then those another process held, waiting
    for each. Returns an :class:`Outcome` per run.

    When submitit's preemption or time-limit signal arrives, the training run stops after its current step with a
    checkpoint, and submitit's own handler then requeues the job with this same task (``checkpoint`` is
    submitit's default: resubmit with the same arguments), which resumes it.
    """

    def __init__(self, experiments: Sequence[Experiment], run_kwargs: dict, run: Callable):
        self.experiments, self.run_kwargs, self.run = list(experiments), dict(run_kwargs), run

    def __call__(self) -> list[Outcome]:
        submitit_handler = signal.getsignal(signal.SIGUSR2)
        signal.signal(signal.SIGUSR2, lambda signum, frame: train.request_stop())
        try:
            first = [self.run(exp, self.run_kwargs) for exp in self.experiments]
            return [self.run(exp, self.run_kwargs, wait=True) if outcome.state == "held" else outcome
                    for exp, outcome in zip(self.experiments, first)]
        except train.Interrupted as stopped:
            print(f"dpbook: {stopped}", file=sys.stderr, flush=True)
            if callable(submitit_handler):  # under submitit: checkpoint, requeue, exit
                submitit_handler(signal.SIGUSR2, None)
            raise
        finally:
            signal.signal(signal.SIGUSR2, submitit_handler)
            train.clear_stop_request()


def _make_executor(kind: str, folder: Path, slurm: SlurmOptions | None = None) -> submitit.Executor:
    """submitit's executor for ``"debug"`` or ``"slurm"``, logging under ``folder``."""
    checks.one_of("executor", kind, ("debug", "slurm"))
    executor = submitit.AutoExecutor(folder=folder, cluster=kind)
    if kind == "slurm":
        executor.update_parameters(name="dpbook", **(slurm or SlurmOptions()).parameters())
    return executor


#: Seconds papermill waits for a notebook's kernel to start (papermill's default, 60 s, fails a grid point when
#: several kernels start at once on a busy machine: seen on a 2-core CI runner).
KERNEL_START_TIMEOUT_S = 600


def papermill_yaml(parameters: dict[str, Any]) -> str:
    """``parameters`` as the one-line YAML mapping papermill's ``-y`` reads back to the same values (a tuple as a
    list), and records in the executed notebook.

    >>> papermill_yaml({"epsilons": [2.0, 1e-05], "mode": "run", "smoke": True, "n": "2"})
    "{epsilons: [2.0, 1.0e-05], mode: run, smoke: true, n: '2'}"
    """
    import yaml  # papermill's own YAML library, which reads the mapping back

    plain = json.loads(json.dumps(parameters))  # tuples as lists, keys as text
    return yaml.safe_dump(plain, default_flow_style=True, sort_keys=False, width=10**6).strip()


@dataclass(frozen=True)
class Execution:
    """One papermill execution of a notebook sweep: ``notebook`` run with ``parameters`` on ``kernel``, written to
    ``out``. ``parameters`` are as papermill records them in the executed notebook (JSON values)."""

    notebook: Path
    out: Path
    parameters: dict
    kernel: str = "python3"

    def command(self) -> list[str]:
        """The papermill command; the parameters go as one YAML mapping (:func:`papermill_yaml`)."""
        return [sys.executable, "-m", "papermill", str(self.notebook), str(self.out), "-k", self.kernel,
                "--no-progress-bar", "--start-timeout", str(KERNEL_START_TIMEOUT_S), "-y",
                papermill_yaml(self.parameters)]

    def done(self) -> bool:
        """Whether papermill executed it to its end with these parameters (:func:`executed_without_error`)."""
        return executed_without_error(self.out, self.parameters)


class NotebookTask(submitit.helpers.Checkpointable):
    """One job's work in a notebook sweep: one :class:`Execution`; returns its :class:`Outcome`, a failure
    described by ``describe(out, stderr)``. A requeued task runs the notebook again, whose training runs resume
    from their checkpoints."""

    def __init__(self, execution: Execution, describe: Callable[[Path, str], str]):
        self.execution, self.describe = execution, describe

    def __call__(self) -> list[Outcome]:
        started = time.perf_counter()
        out = str(self.execution.out)
        done = subprocess.run(self.execution.command(), capture_output=True, text=True)
        if done.returncode != 0:
            return [Outcome(out, time.perf_counter() - started, "failed", self.describe(Path(out), done.stderr))]
        return [Outcome(out, time.perf_counter() - started)]


def submit(todo: Sequence[Experiment], *, kind: str, folder: Path, slurm: SlurmOptions | None, run_kwargs: dict,
           run: Callable) -> list[tuple[list[Experiment], submitit.Job]]:
    """Submit the runs: one job array of ``runs_per_job``-run tasks (SLURM), or one debug job per run."""
    size = (slurm or SlurmOptions()).runs_per_job if kind == "slurm" else 1
    groups = [list(todo[i:i + size]) for i in range(0, len(todo), size)]
    return list(zip(groups, submit_tasks([RunTask(g, run_kwargs, run) for g in groups], kind=kind, folder=folder,
                                         slurm=slurm)))


def submit_tasks(tasks: Sequence[Callable], *, kind: str, folder: Path,
                 slurm: SlurmOptions | None) -> list[submitit.Job]:
    """Submit callables as one job array (SLURM) or as debug jobs."""
    executor = _make_executor(kind, folder, slurm)
    with executor.batch():
        return [executor.submit(task) for task in tasks]


def collect(submitted: Sequence[tuple[Sequence[str], submitit.Job]], on_outcome: Callable[..., None], *,
            poll_s: float = 2.0) -> None:
    """Wait for every job; report each outcome its task returns as the job ends. A job that died (killed, out of
    memory, cancelled): each of its ``labels`` (a result path, an executed notebook) failed, with the job's last
    error line."""
    waiting = list(submitted)
    while waiting:
        still = []
        for labels, job in waiting:
            if not job.done():
                still.append((labels, job))
                continue
            try:
                outcomes = job.result()
            except Exception as err:  # the job died: name why
                reason = _last_error_line(job) or f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
                outcomes = [Outcome(label, 0.0, "failed", f"job {job.job_id}: {reason}") for label in labels]
            for outcome in outcomes:
                on_outcome(outcome)
        waiting = still
        if waiting:
            time.sleep(poll_s)


def _last_error_line(job: submitit.Job) -> str:
    """The last line of the job's stderr that names an error ("" when there is none)."""
    return _error_line(job.paths.stderr)


def _error_line(path: str | Path | None) -> str:
    """The last line of a log that names an error (else its last line; "" for a missing or empty log)."""
    if not path or not Path(path).exists():
        return ""
    lines = [line for line in Path(path).read_text(errors="replace").splitlines() if line.strip()]
    named = [line for line in lines if "Error" in line or "error" in line or "Killed" in line]
    return (named or lines or [""])[-1].strip()[:300]


def executed_without_error(notebook: str | Path, parameters: dict | None = None) -> bool:
    """Whether papermill executed ``notebook`` to its end: its metadata records an end time and no cell's exception
    (papermill writes None, or True once a cell raised), and, when ``parameters`` are given, that it ran with those
    (the file is the execution a sweep asked for, not another one's)."""
    try:
        meta = json.loads(Path(notebook).read_text())["metadata"].get("papermill", {})
    except (OSError, ValueError, KeyError):
        return False
    ran_with = parameters is None or meta.get("parameters") == parameters
    return meta.get("end_time") is not None and not meta.get("exception") and ran_with


def sweep_folder(root: str | Path) -> Path:
    """A new folder where a sweep started now keeps its manifest and job logs: ``<root>/.sweeps/<UTC time>``, with
    ``-2``, ``-3``, ... when sweeps into the same root start in the same second (each keeps its own manifest).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as root:
    ...     first, second = sweep_folder(root), sweep_folder(root)
    ...     print(first != second, first.is_dir() and second.is_dir())
    True True
    """
    base = Path(root) / ".sweeps" / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for n in itertools.count(1):
        folder = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue


# ----------------------------------------------------------------------------------------------------------------
# The manifest
# ----------------------------------------------------------------------------------------------------------------

#: The manifest's format: results and logs are written relative to the manifest's own folder, so that a moved
#: results folder (its manifests inside it, under ``.sweeps/``) keeps its sweeps' status and resume.
MANIFEST_VERSION = 2

_LOGS = ("stdout", "stderr")


def _inside(base: str | Path, path: str | None) -> str | None:
    """``path`` (relative to ``base``) as a path from here; None stays None."""
    return None if path is None else os.path.normpath(os.path.join(base, path))


def _relative(base: str | Path, path: str | None) -> str | None:
    return None if path is None else os.path.relpath(os.path.abspath(path), os.path.abspath(base))


@dataclass
class Manifest:
    """What a sweep submitted, in ``<folder>/manifest.json``: the executor, its options, and per entry its key,
    output (a run's result file, or an executed notebook), what it executes (the run's experiment fields, or the
    notebook and its parameters), job id and log files. ``kind`` is "runs" or "notebooks". A benchmark's sweep also
    records its ``plan`` (:meth:`dpbook.repro.benchmark.Benchmark.plan`, with the benchmark's study): its second
    phase, the re-runs of the best points, is known only from the first phase's results, so ``status`` and
    ``resume`` plan it again from the plan. A convenience for ``status`` and ``resume``; the outputs stay the truth:
    a run is done when its result file is recorded, a notebook when papermill executed it with its parameters
    without an exception.

    On disk the results folder is written relative to the manifest's folder (and as it was, absolute), and each
    output relative to the results folder (:data:`MANIFEST_VERSION`); in memory they are paths from here. A results
    folder moved with its ``.sweeps/`` is found where it now is; one that is gone is an error naming both places."""

    path: Path
    kind: str
    executor: str
    results_dir: str
    run_kwargs: dict
    slurm: dict | None
    entries: list[dict]
    plan: dict | None = None

    @classmethod
    def new(cls, folder: Path, executor: str, results_dir, run_kwargs: dict, slurm: SlurmOptions | None,
            todo: Iterable[Experiment], plan: dict | None = None) -> "Manifest":
        """The manifest of the runs ``todo`` (every run the sweep plans), and the benchmark ``plan`` they come from."""
        entries = [{"key": exp.key(), "result": str(exp.path(results_dir)), "experiment": dataclasses.asdict(exp)}
                   for exp in todo]
        kwargs = json.loads(json.dumps({k: v for k, v in run_kwargs.items() if k != "results_dir"}, default=str))
        manifest = cls._create(folder, "runs", executor, results_dir, kwargs, slurm, entries)  # paths, devices as text
        manifest.plan = plan
        return manifest

    @classmethod
    def new_notebooks(cls, folder: Path, executor: str, output_dir, slurm: SlurmOptions | None,
                      executions: Iterable[Execution]) -> "Manifest":
        """The manifest of a notebook sweep: one entry per :class:`Execution` (its notebook by its absolute path:
        ``resume`` may run from another folder)."""
        entries = [{"key": e.out.stem, "result": str(e.out), "notebook": str(Path(e.notebook).absolute()),
                    "parameters": e.parameters, "kernel": e.kernel} for e in executions]
        return cls._create(folder, "notebooks", executor, output_dir, {}, slurm, entries)

    @classmethod
    def _create(cls, folder, kind, executor, results_dir, run_kwargs, slurm, entries) -> "Manifest":
        """In a folder that holds a manifest already (``resume``, a benchmark's second phase), each entry keeps the
        job it had, and the entries not planned again are kept (one sweep, one manifest)."""
        path = Path(folder) / "manifest.json"
        before = {e["key"]: e for e in cls.read(path).entries} if path.exists() else {}
        for entry in entries:
            entry.update({f: before.get(entry["key"], {}).get(f) for f in ("job", *_LOGS)})
        planned = {entry["key"] for entry in entries}
        entries = [e for key, e in before.items() if key not in planned] + entries
        return cls(path, kind, executor, str(results_dir), run_kwargs,
                   None if slurm is None else dataclasses.asdict(slurm), entries)

    @classmethod
    def read(cls, path: str | Path) -> "Manifest":
        """The manifest at ``path`` (or in the folder ``path``), its paths resolved from where it now is."""
        path = Path(path)
        if path.is_dir():
            path = path / "manifest.json"
        try:
            data = json.loads(path.read_text())
            fields = {k: data[k] for k in ("kind", "executor", "results_dir", "run_kwargs", "slurm", "entries")}
        except FileNotFoundError:
            raise FileNotFoundError(f"no sweep manifest at {path}: give the manifest.json a sweep printed") from None
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path} is not a sweep manifest ({type(err).__name__}: {err})") from None
        if data.get("version") != MANIFEST_VERSION:
            raise ValueError(f"{path} was written by an older dpbook (manifest version {data.get('version', 1)}; "
                             f"this one reads version {MANIFEST_VERSION}): run the sweep's own command again, which "
                             f"skips every run it finished")
        here = path.absolute().parent
        results_dir = cls._results_folder(path, fields["results_dir"], data.get("results_dir_absolute"))
        for entry in fields["entries"]:
            entry["result"] = _inside(results_dir, entry["result"])
            entry.update({log: _inside(here, entry.get(log)) for log in _LOGS})
        return cls(path=path, **{**fields, "results_dir": results_dir}, plan=data.get("plan"))

    @staticmethod
    def _results_folder(path: Path, relative: str, absolute: str | None) -> str:
        """Where the sweep's results now are: the folder the manifest's ``.sweeps`` sits in when it moved with it
        (the recorded path from the manifest's folder leads there), else the folder recorded when the manifest was
        written, if it is still there; else a FileNotFoundError naming both."""
        here = path.absolute().parent
        moved_with_it = _inside(here, relative)
        if here.parent.name == ".sweeps" and Path(moved_with_it) == here.parent.parent and here.parent.parent.is_dir():
            return moved_with_it
        if absolute is not None and Path(absolute).is_dir():
            return absolute
        raise FileNotFoundError(
            f"{path}: the sweep's results folder is gone: it was {absolute}, and the manifest is not in the .sweeps "
            f"folder of a results folder it moved with ({moved_with_it}); put the results folder back, or give the "
            f"manifest inside it (a sweep's outputs are never made again elsewhere)")

    def record_jobs(self, submitted: Sequence[tuple[Sequence[str], submitit.Job]]) -> None:
        """Record the job of each entry: ``submitted`` pairs the keys a job executes with the job."""
        by_key = {e["key"]: e for e in self.entries}
        for keys, job in submitted:
            for key in keys:
                by_key[key].update(job=str(job.job_id), stdout=str(job.paths.stdout), stderr=str(job.paths.stderr))
        self.write()

    def write(self) -> None:
        here = self.path.absolute().parent
        entries = [{**entry, "result": _relative(self.results_dir, entry["result"]),
                    **{log: _relative(here, entry.get(log)) for log in _LOGS}} for entry in self.entries]
        fields = {k: v for k, v in dataclasses.asdict(self).items() if k != "path"}
        io.atomic_write_json({"version": MANIFEST_VERSION, **fields, "results_dir": _relative(here, self.results_dir),
                              "results_dir_absolute": os.path.abspath(self.results_dir), "entries": entries},
                             self.path, indent=1)

    def experiments(self) -> list[Experiment]:
        """The runs of a run sweep."""
        return [Experiment(**e["experiment"]) for e in self.entries]

    def executions(self) -> list[Execution]:
        """The papermill executions of a notebook sweep; a notebook no longer where the sweep found it is a
        FileNotFoundError naming it."""
        gone = sorted({e["notebook"] for e in self.entries if not Path(e["notebook"]).is_file()})
        if gone:
            raise FileNotFoundError(f"the notebook(s) {', '.join(gone)} that the sweep {self.path} executed are no "
                                    f"longer there: put them back, or run the sweep's command again")
        return [Execution(Path(e["notebook"]), Path(e["result"]), e["parameters"], e["kernel"]) for e in self.entries]

    def done(self, entry: dict) -> bool:
        if self.kind == "runs":
            return results.recorded(entry["result"]) is not None
        return executed_without_error(entry["result"], entry["parameters"])

    def states(self) -> list[dict]:
        """Per run: its state (done, or the job's: pending, running, failed, ...) and, if it failed, why."""
        rows = []
        for entry in self.entries:
            state, why = "done", ""
            if not self.done(entry):
                state, why = self._job_state(entry)
            rows.append({"run": Path(entry["result"]).name, "job": entry["job"] or "", "state": state,
                         "why": why, "log": entry["stderr"] or ""})
        return rows

    def _job_state(self, entry: dict) -> tuple[str, str]:
        if self.executor != "slurm" or entry["job"] is None:
            return "not done", _error_line(entry["stderr"])
        job = submitit.SlurmJob(folder=Path(entry["stderr"]).parent, job_id=entry["job"])
        state = job.state.lower()
        if state in ("pending", "running", "requeued", "completing", "unknown"):
            return state, ""
        return ("failed" if state != "completed" else "not done"), _error_line(entry["stderr"])
