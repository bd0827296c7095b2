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
    "EXECUTORS", "Outcome", "SlurmOptions", "RunTask", "NotebookTask", "submit", "submit_tasks", "collect",
    "command_parameters", "executed_without_error", "sweep_folder", "Manifest"
]

import dataclasses
import itertools
import json
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


class NotebookTask(submitit.helpers.Checkpointable):
    """One job's work in a notebook sweep: one papermill ``command`` writing ``out``; returns its :class:`Outcome`,
    a failure described by ``describe(out, stderr)``. A requeued task runs the notebook again,
    whose training runs resume from their checkpoints."""

    def __init__(self, command: Sequence[str], out: str, describe: Callable[[Path, str], str]):
        self.command, self.out, self.describe = list(command), str(out), describe

    def __call__(self) -> list[Outcome]:
        started = time.perf_counter()
        done = subprocess.run(self.command, capture_output=True, text=True)
        if done.returncode != 0:
            return [Outcome(self.out, time.perf_counter() - started, "failed", self.describe(Path(self.out),
                                                                                             done.stderr))]
        return [Outcome(self.out, time.perf_counter() - started)]


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


def command_parameters(command: Sequence[str]) -> dict | None:
    """The parameters a papermill ``command`` passes as one YAML mapping (``-y``), as papermill reads them; None for
    a command without one (a manifest written before sweeps passed them so).

    >>> command_parameters(["papermill", "a.ipynb", "b.ipynb", "-y", "{seeds: [0, 1], mode: run}"])
    {'seeds': [0, 1], 'mode': 'run'}
    """
    import yaml  # papermill's own YAML library

    return yaml.safe_load(command[command.index("-y") + 1]) if "-y" in command else None


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

@dataclass
class Manifest:
    """What a sweep submitted, in ``<folder>/manifest.json``: the executor, its options, and per entry its key,
    output (a run's result file, or an executed notebook), what it executes (the run's experiment fields, or the
    papermill command), job id and log files. ``kind`` is "runs" or "notebooks". A benchmark's sweep also records its
    ``plan`` (:meth:`dpbook.repro.benchmark.Benchmark.plan`, with the benchmark's study): its second phase, the
    re-runs of the best points, is known only from the first phase's results, so ``status`` and ``resume`` plan it
    again from the plan. A convenience for ``status`` and ``resume``; the outputs stay the truth: a run is done when
    its result file is recorded, a notebook when papermill executed it without an exception."""

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
                      commands: Iterable[tuple[list[str], Path]]) -> "Manifest":
        """The manifest of a notebook sweep: one entry per papermill ``(command, executed notebook)``."""
        entries = [{"key": Path(out).stem, "result": str(out), "command": list(command)} for command, out in commands]
        return cls._create(folder, "notebooks", executor, output_dir, {}, slurm, entries)

    @classmethod
    def _create(cls, folder, kind, executor, results_dir, run_kwargs, slurm, entries) -> "Manifest":
        """In a folder that holds a manifest already (``resume``, a benchmark's second phase), each entry keeps the
        job it had, and the entries not planned again are kept (one sweep, one manifest)."""
        path = Path(folder) / "manifest.json"
        before = {e["key"]: e for e in cls.read(path).entries} if path.exists() else {}
        for entry in entries:
            entry.update({f: before.get(entry["key"], {}).get(f) for f in ("job", "stdout", "stderr")})
        planned = {entry["key"] for entry in entries}
        entries = [e for key, e in before.items() if key not in planned] + entries
        return cls(path, kind, executor, str(results_dir), run_kwargs,
                   None if slurm is None else dataclasses.asdict(slurm), entries)

    @classmethod
    def read(cls, path: str | Path) -> "Manifest":
        path = Path(path)
        if path.is_dir():
            path = path / "manifest.json"
        try:
            data = json.loads(path.read_text())
            return cls(path=path, **{k: data[k] for k in ("kind", "executor", "results_dir", "run_kwargs", "slurm",
                                                             "entries")}, plan=data.get("plan"))
        except FileNotFoundError:
            raise FileNotFoundError(f"no sweep manifest at {path}: give the manifest.json a sweep printed") from None
        except (ValueError, KeyError) as err:
            raise ValueError(f"{path} is not a sweep manifest ({type(err).__name__}: {err})") from None

    def record_jobs(self, submitted: Sequence[tuple[Sequence[str], submitit.Job]]) -> None:
        """Record the job of each entry: ``submitted`` pairs the keys a job executes with the job."""
        by_key = {e["key"]: e for e in self.entries}
        for keys, job in submitted:
            for key in keys:
                by_key[key].update(job=str(job.job_id), stdout=str(job.paths.stdout), stderr=str(job.paths.stderr))
        self.write()

    def write(self) -> None:
        fields = {k: v for k, v in dataclasses.asdict(self).items() if k != "path"}
        io.atomic_write_json(fields, self.path, indent=1)

    def experiments(self) -> list[Experiment]:
        """The runs of a run sweep."""
        return [Experiment(**e["experiment"]) for e in self.entries]

    def commands(self) -> list[tuple[list[str], Path]]:
        """The papermill commands of a notebook sweep, with the notebook each one writes."""
        return [(e["command"], Path(e["result"])) for e in self.entries]

    def done(self, entry: dict) -> bool:
        if self.kind == "runs":
            return results.recorded(entry["result"]) is not None
        return executed_without_error(entry["result"], command_parameters(entry["command"]))

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
