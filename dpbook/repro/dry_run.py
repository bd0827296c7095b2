r"""Every cell of every table at full shape, for a few steps: what reproducing a paper's tables costs, measured.

``python -m dpbook.repro.dry_run dcsgd dpdr psasc`` walks every cell of every table of the three reproduction
chapters (:meth:`Chapter.every_table <dpbook.repro.papers.chapter.Chapter.every_table>`) through the one protocol:

1. the runs that filling the cell takes (:meth:`Chapter.runs_to_fill
   <dpbook.repro.papers.chapter.Chapter.runs_to_fill>`): every grid point's plan calibrated at the real T and
   delta, and its method built at that noise (a cell that waits for another's best point is built at that cell's
   first point);
2. its first run built as a real run is (:func:`dpbook.repro.experiment.prepare`: the real model, BERT-base with
   random weights, the method from its plan), on ``source="shapes"``: synthetic tensors of the real dataset's
   shapes, classes and N (:func:`dpbook.repro.experiment.shape_data`), which no result file is written from;
3. ``steps`` training steps of it through :class:`dpbook.train.Trainer` (Poisson batches at the real q), after one
   warm-up step, once per distinct :func:`combination` (model, method, B, micro-batch, input; step 2 too: a cell
   whose combination is measured only calibrates its first run's plan): their median time and the peak memory
   (CUDA: peak allocated; CPU: the process's peak resident memory, as :mod:`dpbook.repro.bench` reads it).

A cell that cannot be built or stepped is recorded with why; a combination whose peak is above 15 GB (a Colab
T4's memory) is flagged. The record, ``data/results/dry_run/analysis/<study>_<device>.json``, holds the device,
every combination's step time and peak memory, and per cell its runs, steps per run and the projected time, runs x
steps x measured step (evaluation, data loading and start-up are not in it). A rerun with the same parameters skips
what is recorded. :func:`cost_table` renders "what reproducing this table costs" from it; each reproduction chapter
shows it.

>>> from dpbook.repro.papers.psasc import Reproduction
>>> record = dry_run(Reproduction(cells=[("mnist", "psasc")], batch_size=16, epochs=1), steps=1, output=None)
>>> cell = record["cells"]['["mnist", "psasc"]']
>>> cell["runs"], cell["steps_per_run"], record["combinations"][cell["combination"]]["measured_steps"]
(8, 3750, 1)
"""

from __future__ import annotations

__all__ = [
    "DRY_RUN_DIR", "FITS_MIB", "OUT_OF_MEMORY", "record_path", "combination", "return_freed_memory",
    "measure", "sample", "dry_run", "reproduction", "cost_rows", "cost_table", "stale_parameters", "machine",
    "recorded_on", "status", "parser", "main"
]

import argparse
import collections
import ctypes
import dataclasses
import json
import re
import statistics
import time
from pathlib import Path
from typing import Hashable

import torch

from dpbook import checks, io
from dpbook.repro import bench, papers, results
from dpbook.repro.experiment import Experiment, Prepared, plan_of, prepare, shapes_size
from dpbook.repro.papers.chapter import Chapter
from dpbook.repro.params import assignment, assignments, field_names, unknown_parameters
from dpbook.tasks import TASKS

DRY_RUN_DIR = results.RESULTS_DIR / "dry_run" / "analysis"
FITS_MIB = 15 * 1024
"""A Colab T4's memory (15 GB): a combination whose measured peak is above it is flagged."""
OUT_OF_MEMORY = ("out of memory", "can't allocate memory")
"""What a step's error says when its memory did not fit (CUDA; the CPU under a memory limit, ``ulimit -v``)."""


def record_path(study: str, device: str, root: Path = DRY_RUN_DIR) -> Path:
    """``<root>/<study>_<device type>.json``.

    >>> record_path("dcsgd", "cuda:0").name
    'dcsgd_cuda.json'
    """
    return Path(root) / f"{study}_{torch.device(device).type}.json"


def combination(exp: Experiment) -> str:
    """What the cost of a step depends on: model, method, B, micro-batch, and the task's input shape and classes (not
    its N or its values: CIFAR10 and SVHN share their steps).

    >>> combination(Experiment(study="s", dataset="svhn", model="resnet18_gn", method="dpsgd"))
    'resnet18_gn dpsgd B=256 micro=None on (3, 32, 32) x 10 classes'
    """
    task = TASKS[exp.dataset]
    return (f"{exp.model} {exp.method} B={exp.batch_size} micro={exp.micro_batch_size} on {task.shape} x "
            f"{task.classes} classes")


def return_freed_memory() -> None:
    """glibc: give every freed block of 64 KiB or more back to the system, so that resident memory follows the
    tensors alive (:mod:`dpbook.repro.bench` sets the same in its children's environment); elsewhere nothing. The
    command line does it first: without it, a CPU peak is the process's resident peak, memory freed earlier
    included (and with it, a CPU step spends more time in the kernel, which the suite's sample avoids)."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
    except OSError:
        pass


def measure(run: Prepared, steps: int, warmup: int = 1) -> dict:
    """Train ``run`` for ``warmup`` steps and ``steps`` more (its Trainer: Poisson batches, micro-batches, the
    method, the optimizer); the median step time (s) and the peak memory (MiB) over those ``steps`` (the first step
    holds one-time costs, e.g. Book-Keeping's self-check: ``warmup=0`` only where speed matters more, the suite's)."""
    trainer = run.trainer(progress=False)
    bench.reset_peak_memory(run.device)
    stamps = [bench.now(run.device)]

    def on_step(trainer, info):
        stamps.append(bench.now(run.device))
        if trainer.step == warmup:
            bench.reset_peak_memory(run.device)
            stamps[:] = stamps[-1:]

    trainer.run(max_steps=min(trainer.T, steps + warmup), on_step=on_step)
    durations = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"step_s": statistics.median(durations), "measured_steps": len(durations),
            "warmup": warmup, "peak_mib": round(bench.peak_memory_mib(run.device), 1),
            "parameters": sum(p.numel() for p in run.model.parameters() if p.requires_grad)}


def sample(chapter: Chapter) -> list[Hashable]:
    """The first selected cell of every distinct (dataset, model, method), and of every reason a cell cannot be
    specified (NAMES without its files): ``--sample`` (a cell that waits for another's grid is taken at that grid's
    first point). The suite dry-runs the part of it that covers every dataset, model, method and table."""
    chapter.assume_first = True
    firsts = {}
    for cell in chapter.selected:
        try:
            base = chapter.spec(cell)[0]
            firsts.setdefault((base.dataset, base.model, base.method), cell)
        except (ValueError, FileNotFoundError) as err:
            firsts.setdefault(_error(err), cell)
    return list(firsts.values())


def _error(err: BaseException) -> str:
    return _reason(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")


def _reason(text: str) -> str:
    """An error's first line without the folder it names (a record is read on other machines), at most 300
    characters.

    >>> _reason("DatasetNotFoundError: NAMES not found: missing Arabic.txt in '/work/data/downloads/names'.")
    'DatasetNotFoundError: NAMES not found: missing Arabic.txt.'
    """
    return re.sub(r" in '[^']*'", "", text)[:300]


def _dry_cell(chapter: Chapter, cell: Hashable, combinations: dict, steps: int, warmup: int) -> dict:
    """One cell: its runs (calibrated and built), its combination measured once (its first run prepared on shapes);
    a cell whose combination is measured already calibrates its first run's plan without building the model."""
    entry = {"label": {k: str(v) for k, v in chapter.label(cell).items()}, "table": chapter.table_of(cell)}
    started = time.perf_counter()
    try:
        runs = chapter.runs_to_fill(cell)
        key = combination(runs[0])
        run = None if key in combinations else prepare(runs[0], device=chapter.device, source="shapes")
        plan = plan_of(runs[0], shapes_size(runs[0])) if run is None else run.plan
    except (ValueError, FileNotFoundError, ImportError, RuntimeError) as err:
        return {**entry, "error": _error(err), "build_s": round(time.perf_counter() - started, 3)}
    entry.update(runs=len(runs), steps_per_run=plan.steps, sigma=plan.sigma, combination=key,
                 build_s=round(time.perf_counter() - started, 3))
    if run is not None:
        try:
            combinations[key] = measure(run, steps, warmup)
        except (RuntimeError, ValueError) as err:  # out of memory, or a model the engine cannot step
            combinations[key] = {"error": _error(err)}
        if run.device.type == "cuda":
            torch.cuda.empty_cache()
    return entry


def _parameters(chapter: Chapter, steps: int) -> dict:
    """What decides a dry run's record: the chapter's parameters (not where it keeps files) and ``steps``."""
    fields = {f.name: getattr(chapter, f.name) for f in dataclasses.fields(chapter)
              if f.name not in ("results_dir", "data_root", "jobs", "download")}
    return json.loads(json.dumps({"chapter": type(chapter).__module__, "steps": steps, **fields}, default=str))


def dry_run(chapter: Chapter, *, steps: int = 2, warmup: int = 1, cells: list[Hashable] | None = None,
            output: Path | None = None, force: bool = False) -> dict:
    """Walk ``cells`` (default: every selected cell) of ``chapter`` at full shape (module docstring) and return the
    record; ``output`` (None: keep nothing) is written atomically after every cell, and a rerun with the same
    parameters skips the cells recorded there."""
    chapter.assume_first = True
    device = torch.device("cuda" if chapter.device == "auto" and torch.cuda.is_available()
                          else "cpu" if chapter.device == "auto" else chapter.device)
    parameters = {**_parameters(chapter, steps), "warmup": warmup, "device": device.type}
    record = {"study": "dry_run", "parameters": parameters, "provenance": results.provenance(device),
              "combinations": {}, "cells": {}}
    if output is not None and output.exists() and not force:
        try:
            earlier = io.claimed(output, parameters)
        except ValueError as err:
            raise ValueError(f"{err}; pass force=True (--force) to replace it, or choose another output") from err
        record.update(combinations=earlier["combinations"], cells=earlier["cells"])
    for cell in chapter.selected if cells is None else cells:
        key = json.dumps(list(cell))
        if key in record["cells"]:
            continue
        record["cells"][key] = _dry_cell(chapter, cell, record["combinations"], steps, warmup)
        if output is not None:
            io.atomic_write_json(record, output)
    return record


# --- what a chapter shows ---------------------------------------------------------------------------------------


def _hours(seconds: float) -> str:
    """
    >>> _hours(5400), _hours(86400 * 10), _hours(170), _hours(20)
    ('1.5 h', '240 h (10 days)', '3 min', 'under a minute')
    """
    if seconds < 3600:
        return f"{seconds / 60:.0f} min" if seconds >= 30 else "under a minute"
    hours = f"{seconds / 3600:,.1f} h" if seconds < 36000 else f"{seconds / 3600:,.0f} h"
    return hours if seconds < 86400 * 3 else f"{hours} ({seconds / 86400:,.0f} days)"


def _projected(record: dict | None, cell_key: str) -> float | None:
    """A cell's projected seconds in ``record`` (runs x steps x measured step), or None."""
    if record is None:
        return None
    cell = record["cells"].get(cell_key, {})
    measured = record["combinations"].get(cell.get("combination"), {})
    if "step_s" not in measured:
        return None
    return cell["runs"] * cell["steps_per_run"] * measured["step_s"]


def _projected_text(projected: list[float | None]) -> str:
    """The projected time of some cells (None: a cell not measured), saying how many were measured when not all.

    >>> _projected_text([3600.0, None]), _projected_text([None]), _projected_text([1800.0, 1800.0])
    ('1.0 h (1 of 2 cells)', 'not measured', '1.0 h')
    """
    measured = [t for t in projected if t is not None]
    if not measured:
        return "not measured"
    return _hours(sum(measured)) + ("" if len(measured) == len(projected) else
                                    f" ({len(measured)} of {len(projected)} cells)")


def _out_of_memory(measured: dict) -> bool:
    return any(m in measured.get("error", "") for m in OUT_OF_MEMORY)


def cost_rows(cpu: dict | None, gpu: dict | None = None) -> list[dict]:
    """One row per table of the dry-run records of a chapter on the CPU and on a GPU (either may be None; the cells
    are the fuller record's): cells, runs, steps, each device's projected seconds per built cell (None where it
    measured none) and their total as text ("not measured" without its record, the share of cells it measured when
    partial), cells that failed to build (and why, once per reason) and cells
    above 15 GB (by the GPU's peak allocated memory where the ``gpu`` record measured the cell's combination, else
    by the CPU's resident peak, which also counts the runtime's own memory)."""
    records = {"cpu": cpu, "gpu": gpu}
    cells = max((r for r in records.values() if r is not None), key=lambda r: len(r["cells"]))["cells"]
    tables: dict[str, dict] = {}
    for key, cell in cells.items():
        row = tables.setdefault(cell["table"], {"table": cell["table"], "cells": 0, "runs": 0, "steps": 0,
                                                "failed": collections.Counter(), "big": 0, **{d: [] for d in records}})
        row["cells"] += 1
        if "error" in cell:
            row["failed"][cell["error"]] += 1
            continue
        row["runs"] += cell["runs"]
        row["steps"] += cell["runs"] * cell["steps_per_run"]
        measured = [r["combinations"][r["cells"][key]["combination"]] for r in (gpu, cpu)
                    if r is not None and r["cells"].get(key, {}).get("combination") in r["combinations"]]
        if measured and "error" in measured[0] and not _out_of_memory(measured[0]):
            row["failed"][f"step: {measured[0]['error']}"] += 1
        row["big"] += bool(measured) and (_out_of_memory(measured[0]) or measured[0].get("peak_mib", 0) > FITS_MIB)
        for device, record in records.items():  # the cells that were built
            row[device].append(_projected(record, key))
    for row in tables.values():
        for device in records:
            row[f"{device}_text"] = _projected_text(row[device])
        row["failed_text"] = "; ".join(f"{n} × {_reason(why)}" for why, n in row["failed"].items()) or "none"
    return list(tables.values())


def cost_table(study: str, root: Path = DRY_RUN_DIR) -> str:
    """"What reproducing this table costs" for a chapter, from its dry-run records under ``root`` (CPU; CUDA when
    one was recorded, else "not measured"), or how to make the record when there is none."""
    cpu, gpu = _read(record_path(study, "cpu", root)), _read(record_path(study, "cuda", root))
    if cpu is None and gpu is None:
        return (f"*No dry-run record yet ({record_path(study, 'cpu', root).name}): `python -m dpbook.repro.dry_run "
                f"{study}` makes it.*")
    rows = cost_rows(cpu, gpu)
    for row in rows:
        row.update(runs=f"{row['runs']:,}", steps=f"{row['steps']:,}")
    made = "; ".join(f"{name}: {r['provenance']['device']}, {r['provenance']['created'][:10]}, "
                     f"{len(r['cells'])} cells, {r['parameters']['steps']} measured step(s) after "
                     f"{r['parameters']['warmup']} warm-up" for name, r in (("CPU", cpu), ("GPU", gpu)) if r)
    text = ("What reproducing each table costs, projected from dry runs of every cell at full shape on synthetic "
            f"data of the real shapes ({made}). Projected time = runs × steps × measured step, without evaluation. "
            "A cell above 15 GB (a Colab T4's memory) needs the chapter's `micro_batch_size` there: it bounds "
            "memory and changes no result.\n\n")
    for name, r in (("CPU", cpu), ("GPU", gpu)):
        if r and (changed := stale_parameters(study, r)):
            names = ", ".join(f"`{c}`" for c in changed)
            text += (f"**The {name} record was made with other values of** {names} than the chapter's defaults: the "
                     f"runs and steps counted are the defaults', the time of a step is the one measured then; "
                     f"`python -m dpbook.repro.dry_run {study} --force` on that device measures again.\n\n")
    return text + results.markdown_table(
        rows, ["table", "cells", "runs", "steps", "cpu_text", "gpu_text", "failed_text", "big"],
        ["table", "cells", "runs", "steps", f"time on {recorded_on(cpu)}" if cpu else "CPU time",
         f"time on {recorded_on(gpu)}" if gpu else "GPU time", "cells that failed to build", "cells above 15 GB"])


def stale_parameters(study: str, record: dict) -> list[str]:
    """The parameters of chapter ``study`` whose defaults differ from those a dry-run ``record`` was made with (its
    cells and times are of the recorded values).

    >>> stale_parameters("dpdr", {"parameters": {**_parameters(reproduction("dpdr"), 2), "group_norm": False}})
    ['group_norm']
    """
    now = _parameters(reproduction(study), record["parameters"]["steps"])
    recorded = record["parameters"]
    return [name for name in now if name not in ("device", "smoke") and recorded.get(name) != now[name]]


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def machine(record: dict) -> str:
    """The machine a dry-run record measured, in words.

    >>> machine({"provenance": {"device": "cpu: x86_64 (2 threads)"}})
    '2-thread x86_64 CPU'
    >>> machine({"provenance": {"device": "cuda: NVIDIA H200"}})
    'NVIDIA H200'
    """
    kind, _, name = record["provenance"]["device"].partition(": ")
    threads = re.fullmatch(r"(.+) \((\d+) threads?\)", name)
    return f"{threads[2]}-thread {threads[1]} CPU" if kind == "cpu" and threads else name


def recorded_on(record: dict) -> str:
    """The machine a dry-run record measured, and the record's date.

    >>> recorded_on({"provenance": {"device": "cuda: NVIDIA H200", "created": "2026-11-26T15:24:02+00:00"}})
    'the NVIDIA H200 (measured 2026-11-26)'
    """
    return f"the {machine(record)} (measured {record['provenance']['created'][:10]})"


def status(chapter: Chapter, study: str, root: Path = DRY_RUN_DIR) -> str:
    """Where a reproduction chapter stands, for the top of its page: how many of the cells its tables show
    (:meth:`Chapter.shown_cells`) have results and which devices their result files came from; the cheapest cell
    still empty, its runs and its hours on the machine of the dry run's record (the GPU's when there is one); then
    one row per table of the paper: its cells, those with results, and what filling the others takes on each
    recorded machine, projected by the dry run (``root``'s records of ``study``: every cell's runs × steps ×
    measured step)."""
    records = {kind: record for kind in ("cpu", "cuda") if (record := _read(record_path(study, kind, root)))}
    tables: dict[str, dict] = {}
    cells = {json.dumps(list(cell)): cell for cell in chapter.shown_cells()}
    for key, cell in cells.items():
        row = tables.setdefault(chapter.table_of(cell), {"table": chapter.table_of(cell), "cells": 0, "done": 0,
                                                         "empty": []})
        row["cells"] += 1
        if chapter.summary(cell)["values"]:
            row["done"] += 1
        else:
            row["empty"].append(key)
    for row in tables.values():
        for kind, record in records.items():
            row[kind] = (_projected_text([_projected(record, key) for key in row["empty"]]) if row["empty"]
                         else "nothing left")
    devices = collections.Counter(r["device"] for r in results.load_results(study, root=chapter.results,
                                                                            smoke=chapter.smoke))
    came = ", ".join(f"{n} from {device}" for device, n in devices.most_common()) or "none yet"
    done, total = sum(r["done"] for r in tables.values()), sum(r["cells"] for r in tables.values())
    text = f"**Cells with results: {done} of {total}.** Result files: {came}.\n\n"
    empty = [key for row in tables.values() for key in row["empty"]]
    if empty and records:
        kind = "cuda" if "cuda" in records else "cpu"
        priced = [(t, key) for key in empty if (t := _projected(records[kind], key)) is not None]
        if priced:
            seconds, key = min(priced)
            cell = records[kind]["cells"][key]
            label = chapter.label_text(cells[key])
            runs = f"{cell['runs']} run{'s' * (cell['runs'] != 1)}"
            text += (f"**The cheapest cell still empty** ({label}) takes {runs} of {cell['steps_per_run']:,} "
                     f"steps: {_hours(seconds)} on {recorded_on(records[kind])}.\n\n")
    names = {kind: f"the rest on {recorded_on(record)}" for kind, record in records.items()}
    return text + results.markdown_table(list(tables.values()), ["table", "cells", "done", *records],
                                          ["table", "cells", "with results", *names.values()])


def reproduction(study: str, **parameters) -> Chapter:
    """The ``Reproduction`` of chapter ``study`` (:func:`dpbook.repro.papers.chapters`) with every table selected
    (:meth:`Chapter.every_table <dpbook.repro.papers.chapter.Chapter.every_table>`), ``parameters`` overriding its
    defaults.

    >>> len(reproduction("dcsgd").tables)
    5
    """
    return papers.chapters()[study].every_table(**parameters)


def _checked_chapters(parser: argparse.ArgumentParser, args) -> dict[str, Chapter]:
    """Every asked chapter, built with the command line's device and ``--set`` parameters; a bad chapter name,
    parameter or device exits 2 with the fix, before any work."""
    chapters = {}
    for study in args.studies:
        try:
            set_ = assignments(args.set, lists=False)
            if unknown := unknown_parameters(set_, field_names(papers.chapters()[study])):
                raise ValueError(f"--set: {unknown} of the {study} chapter")
            chapters[study] = reproduction(study, device=args.device, **set_)
        except (ValueError, RuntimeError) as err:
            parser.error(str(err))
    return chapters


def parser() -> argparse.ArgumentParser:
    """The command line, every option's domain declared (:mod:`dpbook.checks`)."""
    parser = argparse.ArgumentParser(prog="python -m dpbook.repro.dry_run", description=__doc__.split("\n")[0])
    parser.add_argument("studies", nargs="*", type=checks.choice(papers.chapters(), "chapter"),
                        default=list(papers.chapters()),
                        help=f"chapters, any of {', '.join(papers.chapters())} (default: all)")
    parser.add_argument("--steps", type=checks.integers(1, "measured steps per combination"), default=2,
                        help="measured steps per combination (after a warm-up)")
    parser.add_argument("--device", type=bench.torch_device(), default="cpu",
                        help='"cpu", "cuda", ... (the record is <study>_<device>.json)')
    parser.add_argument("--sample", action="store_true", help="only the first cell of every (dataset, model, "
                        "method)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        type=assignment("e.g. batch_size=16"), help="a chapter parameter (e.g. batch_size=16)")
    parser.add_argument("--output-dir", type=io.folder("the folder of the dry-run records"), default=DRY_RUN_DIR)
    parser.add_argument("--force", action="store_true", help="replace a record made with other parameters")
    parser.add_argument("--table", action="store_true", help="print the cost tables of the records and exit")
    return parser


def main(argv=None) -> None:
    parser_ = parser()
    args = parser_.parse_args(argv)
    chapters = _checked_chapters(parser_, args)
    return_freed_memory()
    for study, chapter in chapters.items():
        if not args.table:
            started = time.perf_counter()
            try:
                record = dry_run(chapter, steps=args.steps, cells=sample(chapter) if args.sample else None,
                                 output=record_path(study, args.device, args.output_dir), force=args.force)
            except ValueError as err:  # a record made with other parameters
                parser_.error(f"{err} (--force replaces it)")
            failed = sum("error" in c for c in record["cells"].values())
            print(f"{study}: {len(record['cells'])} cell(s), {failed} failed to build, "
                  f"{len(record['combinations'])} combination(s) measured, {time.perf_counter() - started:.0f} s")
        print(f"\n{study}\n\n{cost_table(study, args.output_dir)}\n")


if __name__ == "__main__":
    main()
