"""``python -m dpbook.repro.sweep``: the sweeps' command line, every option's domain declared (:mod:`dpbook.checks`).

- ``digits`` / ``mnist5k``: a benchmark (:data:`BENCHMARKS`), both phases (the grids and searches, then the re-runs
  of the best points), one manifest that records the plan;
- ``notebook``: papermill executions of a notebook over a parameter grid, refused before any kernel starts when a
  point gives a parameter the notebook (or its chapter's ``Reproduction``) refuses;
- ``status MANIFEST``: every run of a sweep by state, a benchmark's second phase included;
- ``resume MANIFEST``: what a sweep has not done (a benchmark: both phases, planned again from its plan, so that a
  sweep killed in any phase finishes the same set of runs as one never interrupted).

A wrong option exits 2 before any work, naming the option, the problem and the fix.
"""

from __future__ import annotations

__all__ = ["BENCHMARKS", "parser", "main"]

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

from dpbook import checks, io
from dpbook.optim import PER_SAMPLE_ENGINES
from dpbook.repro import digits_benchmark, dispatch, mnist5k_benchmark, papers, params, results
from dpbook.repro.benchmark import Benchmark
from dpbook.repro.sweep import check_notebook_grid, notebook_executions, run_all, run_notebook_grid, run_notebooks
from dpbook.tuning import grid_product

#: The benchmarks ``python -m dpbook.repro.sweep NAME`` runs.
BENCHMARKS: dict[str, Benchmark] = {"digits": digits_benchmark.BENCHMARK, "mnist5k": mnist5k_benchmark.BENCHMARK}


def parser() -> argparse.ArgumentParser:
    """The command line, every option's domain declared (:mod:`dpbook.checks`)."""
    parser = argparse.ArgumentParser(prog="python -m dpbook.repro.sweep", description="The book's sweeps: a "
                                     "benchmark's two phases, a notebook over a parameter grid, a sweep's status, "
                                     "resume. A wrong option exits 2 before any work, naming it.")
    sub = parser.add_subparsers(dest="command", required=True)
    jobs = checks.integers(1, "runs at once")
    for name, benchmark in BENCHMARKS.items():
        bench = sub.add_parser(name, help=f"the {name} benchmark of every method ({benchmark.study})")
        bench.add_argument("--jobs", type=jobs, default=max(1, (os.cpu_count() or 1)), help="runs at once")
        bench.add_argument("--results-dir", type=io.folder(), default=str(results.RESULTS_DIR))
        bench.add_argument("--methods", type=checks.listing(checks.choice(benchmark.methods, "method")), default=None,
                           help="comma-separated subset of the methods")
        bench.add_argument("--epsilons", type=checks.listing(checks.numbers(above=0, fix="privacy budgets")),
                           default=None,
                           help=f"comma-separated budgets (default: {', '.join(f'{e:g}' for e in benchmark.epsilons)})")
        bench.add_argument("--seeds", type=checks.integers(1, "seeds per cell"), default=None,
                           help=f"seeds per cell (a smaller benchmark; default {benchmark.seeds})")
        bench.add_argument("--epochs", type=checks.integers(1, "epochs per run"), default=None,
                           help="epochs per run (a smaller benchmark; default: the benchmark's)")
        bench.add_argument("--per-sample", type=checks.choice(PER_SAMPLE_ENGINES, "per-sample engine"), default="auto",
                           help="the engine's per-sample path: auto (Book-Keeping wherever the method allows), "
                                "book-keeping or vmap; the same results to float rounding, not the same speed")
        _executor_arguments(bench)
    manifest = io.input_file("a sweep's manifest.json", dispatch.Manifest.read, "give the manifest a sweep printed",
                              folders=True)
    status = sub.add_parser("status", help="what a sweep's runs are doing: pending, running, done, failed")
    status.add_argument("manifest", type=manifest, help="the manifest.json a sweep wrote (or its folder)")
    resume = sub.add_parser("resume", help="run again what a sweep has not done (a benchmark: both phases)")
    resume.add_argument("manifest", type=manifest, help="the manifest.json a sweep wrote (or its folder)")
    resume.add_argument("--jobs", type=jobs, default=max(1, (os.cpu_count() or 1)), help="runs at once (local)")
    nb = sub.add_parser("notebook", help="papermill executions of a notebook over a parameter grid")
    nb.add_argument("notebook", type=io.input_file("a notebook (.ipynb)", _read_notebook))
    nb.add_argument("--grid", action="append", default=[], type=params.assignment("name=v1,v2,..."),
                    help="name=v1,v2,... (repeatable)")
    nb.add_argument("--set", action="append", default=[], type=params.assignment("name=value"),
                    help="name=value, the same for every run (repeatable)")
    nb.add_argument("--jobs", type=jobs, default=1)
    nb.add_argument("--output-dir", type=io.folder("where the executed notebooks go"),
                    default="data/results/executed")
    nb.add_argument("--plan", action="store_true",
                    help="check every grid point and print the executions the sweep would make; execute nothing")
    _executor_arguments(nb)
    return parser


def _benchmark(name: str) -> Benchmark:
    """The benchmark ``name``: a key of :data:`BENCHMARKS` or a benchmark's study (a manifest's plan)."""
    for key, benchmark in BENCHMARKS.items():
        if name in (key, benchmark.study):
            return benchmark
    raise ValueError(f"unknown benchmark {name!r}; valid: {', '.join(BENCHMARKS)}")


def _read_notebook(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "status":
            return _print_status(dispatch.Manifest.read(args.manifest))
        summaries = _run(args)
    except (ValueError, FileNotFoundError) as err:  # a grid, a name, a value or a file refused before anything ran
        print(f"python -m dpbook.repro.sweep: {err}", file=sys.stderr)
        return 2

    if summaries and not sum(s["planned"] for s in summaries):  # every cell unreachable: nothing could run
        for line in _summary_lines(summaries):
            print(line, file=sys.stderr)
        print("python -m dpbook.repro.sweep: nothing to run: every cell above is unreachable (its budget cannot be met "
              "with these settings); change the budgets or the settings", file=sys.stderr)
        return 2
    for line in _summary_lines(summaries):
        print(line)
    return 1 if any(s["failed"] for s in summaries) else 0


def _summary_lines(summaries: list[dict]) -> list[str]:
    """The end of a sweep: per phase, what was planned, done, skipped (already recorded) and failed, with why, and
    how many runs another process was training when this sweep came to them (it waited for them).

    >>> _summary_lines([{"planned": 3, "skipped": 1, "done": 1, "failed": [("a.json", "ValueError: x")]}])
    ['planned 3: done 1, skipped 1 (already recorded), failed 1', '  FAILED a.json: ValueError: x']
    >>> _summary_lines([{"planned": 4, "skipped": 2, "done": 2, "failed": [], "elsewhere": 2}])[0]
    'planned 4: done 2, skipped 2 (already recorded; 2 by another sweep, which this one waited for), failed 0'
    """
    lines = []
    for s in summaries:
        elsewhere = f"; {s['elsewhere']} by another sweep, which this one waited for" if s.get("elsewhere") else ""
        skipped = f", skipped {s['skipped']} (already recorded{elsewhere})" if "skipped" in s else ""
        lines.append(f"planned {s['planned']}: done {s['done']}{skipped}, failed {len(s['failed'])}")
        lines += [f"  FAILED {where}: {why}" for where, why in s["failed"]]
        lines += [f"  unreachable {why}" for why in s.get("unreachable", [])]
    return lines


def _executor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executor", type=checks.choice(dispatch.EXECUTORS, "executor"), default="local",
                        metavar="{" + ",".join(dispatch.EXECUTORS) + "}",
                        help="local: a process pool here (default); debug: in this process; slurm: a job array")
    parser.add_argument("--slurm-config", type=io.input_file("a TOML file of SLURM options",
                                                              dispatch.SlurmOptions.from_file),
                        default=None, help="a TOML file of SLURM options (dpbook.repro.dispatch)")
    for name, (domain, text) in dispatch.SlurmOptions.flags().items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=domain, default=None, help=f"{text} (--executor slurm)")


def _slurm_options(args) -> dispatch.SlurmOptions | None:
    """The SLURM options of the command line (flags over the config file); None unless --executor slurm."""
    given = {name: getattr(args, name) for name in dispatch.SlurmOptions.flags()}
    if args.executor != "slurm":
        used = [f"--{k.replace('_', '-')}" for k, v in given.items() if v is not None]
        if used or args.slurm_config:
            raise ValueError(f"{', '.join(used) or '--slurm-config'} apply to --executor slurm only")
        return None
    if args.slurm_config:
        return dispatch.SlurmOptions.from_file(args.slurm_config, **given)
    return dispatch.SlurmOptions(**{k: v for k, v in given.items() if v is not None})


def _print_status(manifest: dispatch.Manifest) -> int:
    """Print a sweep's runs (or notebook executions) by state, the ones not done with why and where their log is;
    0 when all are done. A benchmark's sweep counts its second phase too: the re-runs known from the first phase's
    results (not submitted yet: "planned"), and the cells whose grid is not complete yet."""
    from tabulate import tabulate

    rows = manifest.states()
    waiting = []
    if manifest.plan is not None:
        plan = {k: v for k, v in manifest.plan.items() if k != "benchmark"}
        reruns, waiting = _benchmark(manifest.plan["benchmark"]).phase2(manifest.results_dir, **plan)
        known = {row["run"] for row in rows}
        rows += [{"run": run.path(manifest.results_dir).name, "job": "", "state": "planned (phase 2)", "why": "",
                  "log": ""} for run in reruns if run.path(manifest.results_dir).name not in known
                 and not results.recorded(run.path(manifest.results_dir))]
    counts = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    noun = "run" if manifest.kind == "runs" else "notebook"
    print(f"{manifest.path}: {len(rows)} {noun}(s), " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if waiting:
        print(f"phase 2: {len(waiting)} cell(s) wait for their grid to finish before their re-runs are planned: "
              + ", ".join(waiting))
    open_rows = [row for row in rows if row["state"] != "done"]
    if open_rows:
        print(tabulate([[r["run"], r["job"], r["state"], r["why"], r["log"]] for r in open_rows],
                       headers=[noun, "job", "state", "why", "log"]))
    return 0 if not open_rows and not waiting else 1


def _run(args) -> list[dict]:
    if args.command in BENCHMARKS:
        summaries = _benchmark(args.command).run(
            jobs=args.jobs, results_dir=args.results_dir, methods=args.methods, epsilons=args.epsilons,
            seeds=args.seeds, epochs=args.epochs, executor=args.executor, slurm=_slurm_options(args),
            per_sample=args.per_sample)
    elif args.command == "resume":
        manifest = dispatch.Manifest.read(args.manifest)
        again = dict(jobs=args.jobs, executor=manifest.executor, sweep_dir=manifest.path.parent,
                     slurm=None if manifest.slurm is None else dispatch.SlurmOptions(**manifest.slurm))
        if manifest.kind == "notebooks":
            summaries = [run_notebooks(manifest.executions(), output_dir=manifest.results_dir, skip_done=True,
                                       **again)]
        elif manifest.plan is not None:  # a benchmark: both phases, planned again as the sweep planned them
            plan = {k: v for k, v in manifest.plan.items() if k != "benchmark"}
            summaries = _benchmark(manifest.plan["benchmark"]).run(
                results_dir=manifest.results_dir, per_sample=manifest.run_kwargs.get("per_sample", "auto"), **again,
                **plan)
        else:
            summaries = [run_all(manifest.experiments(), results_dir=manifest.results_dir, **again,
                                 **manifest.run_kwargs)]
    else:
        grid, fixed = params.assignments(args.grid, lists=True), params.assignments(args.set, lists=False)
        _check_chapter_grid(args.notebook, grid, fixed)
        if args.plan:
            _slurm_options(args)  # its options are checked too
            executions = notebook_executions(args.notebook, grid, fixed, output_dir=args.output_dir)
            for execution in executions:
                print(shlex.join(execution.command()))
            print(f"planned {len(executions)} notebook execution(s) ({args.executor}); nothing executed (--plan)")
            return []
        summaries = [run_notebook_grid(args.notebook, grid, fixed, output_dir=args.output_dir, jobs=args.jobs,
                                       executor=args.executor, slurm=_slurm_options(args))]
    return summaries


def _check_chapter_grid(notebook: Path, grid: dict, fixed: dict) -> None:
    """Refuse the sweep before any kernel starts: a parameter the notebook lacks or a value of the wrong type
    (:func:`dpbook.repro.sweep.check_notebook_grid`), then, for a reproduction chapter, a grid point its
    ``Reproduction`` refuses (a misspelt name, a value out of range), each problem once."""
    points = [{**fixed, **point} for point in grid_product(**grid)]
    declared, annotations = check_notebook_grid(notebook, points)
    chapter = papers.chapters().get(notebook.stem.removeprefix("reproduce_"))
    problems = []
    for point in points if chapter is not None else []:
        values = {name: params.checked(name, point.get(name, default), default, annotations.get(name))
                  for name, default in declared.items() if name in params.field_names(chapter)}
        try:
            chapter(**{**values, "fresh": False} if "fresh" in values else values)  # a check: it deletes nothing
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise ValueError(f"{notebook}: the sweep was not started:\n  " + "\n  ".join(dict.fromkeys(problems)))


if __name__ == "__main__":
    raise SystemExit(main())
