"""Drop the book's cached executions that are older than the library or the recorded results a page shows.

jupyter-cache (``_config.yml``: ``execute_notebooks: cache``) keys a notebook by its code cells alone. A chapter
that reads a recorded file (the bench's record, a benchmark's result files) or prints what library code computes
would be shown with its old outputs after that file or that code changed. ``make book`` runs this first: every
cached execution older than the newest file under ``dpbook/`` or ``data/`` is removed, and its notebook's
modification time is set to now, so that Sphinx reads the page again and jupyter-cache executes it again. A
checkout that changed neither keeps its whole cache (``make book`` again: nothing executed).

    .venv/bin/python tools/book_cache.py [CACHE_DIR]      # default: _build/.jupyter_cache

``--execute`` (``make book`` runs it next) executes the book's notebooks whose current code has no cached execution
one per core at a time, each kernel on one thread, and caches them where the build looks: Jupyter Book executes one
notebook at a time, so the build then only renders them. A notebook that fails is left to the build, which executes
it again and reports its error as it would have.

After the build, ``make book`` prints each chapter's execution time at its book defaults (``--times``: the time
jupyter-cache recorded when it executed the page, this build or an earlier one) and writes them to
``_build/chapter_times.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ("dpbook", "data")
"""What a page's outputs depend on besides its own code: the library and the recorded results."""


def newest_input(root: Path = ROOT, inputs=INPUTS) -> float:
    """The latest modification time (seconds since the epoch) of the files under ``inputs`` (Python's bytecode
    caches left out), 0 if there are none."""
    files = (p for d in inputs for p in (root / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return max((p.stat().st_mtime for p in files), default=0.0)


def refresh(cache_dir: Path, since: float) -> list[Path]:
    """Remove the cached executions created before ``since`` (seconds since the epoch) and touch their notebooks;
    the notebooks touched, each once (a notebook may have several cached executions, one per version of its code),
    in the cache's order. A missing cache is an empty one."""
    if not (cache_dir / "global.db").exists():
        return []
    from jupyter_cache import get_cache

    cache = get_cache(cache_dir)
    stale = []
    for record in cache.list_cache_records():
        created = record.created.replace(tzinfo=timezone.utc).timestamp()  # jupyter-cache stores naive UTC
        if created < since:
            cache.remove_cache(record.pk)
            notebook = Path(record.uri)
            if notebook.exists() and notebook not in stale:
                os.utime(notebook)
                stale.append(notebook)
    return stale


def book_notebooks(root: Path = ROOT) -> list[Path]:
    """The notebooks ``_toc.yml`` lists (the pages the build executes), in its order."""
    def files(entry) -> list[str]:
        if isinstance(entry, dict):
            return [entry[k] for k in ("root", "file") if k in entry] + [f for v in entry.values() for f in files(v)]
        return [f for v in entry for f in files(v)] if isinstance(entry, list) else []

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [root / f"{f}.ipynb" for f in files(toc) if (root / f"{f}.ipynb").exists()]


def execute(cache_dir: Path, notebooks: list[Path], timeout: int) -> dict[str, list]:
    """Execute the ``notebooks`` that have no cached execution of their current code in a pool of one process per
    core (jupyter-cache's parallel executor), each in its own folder as the build executes it, with the build's cell
    ``timeout`` (s), and cache what succeeded. Returns jupyter-cache's summary: the notebooks ``succeeded``,
    ``excepted`` (a cell raised) and ``errored``."""
    from jupyter_cache import get_cache
    from jupyter_cache.executors.basic import JupyterExecutorLocalMproc

    cache = get_cache(cache_dir)
    pks = [cache.add_nb_to_project(str(path.resolve())).pk for path in notebooks]
    executor = JupyterExecutorLocalMproc(cache, logging.getLogger("book_cache"))
    result = executor.run_and_cache(filter_pks=pks, timeout=timeout, allow_errors=False)
    return {"succeeded": result.succeeded, "excepted": result.excepted, "errored": result.errored}


def shown_errors(cache_dir: Path, notebooks: list[Path]) -> list[str]:
    """The cells of the cached executions of ``notebooks`` whose outputs hold an error although the cell ran on (a
    figure or display that failed to render after its cell's code had run): the page would show the traceback.
    A notebook with no cached execution of its current code is skipped (the build executes it, and reports a cell
    that raised)."""
    from jupyter_cache import get_cache

    cache = get_cache(cache_dir)
    found = []
    for path in notebooks:
        try:
            record = cache.match_cache_file(str(path.resolve()))
        except (KeyError, FileNotFoundError):
            continue
        for cell in cache.get_cache_bundle(record.pk).nb.cells:
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    found.append(f"{path.name}, cell {cell.get('id')!r}: {output.get('ename')}: "
                                 f"{str(output.get('evalue')).splitlines()[0][:200]}")
    return found


def execution_times(cache_dir: Path) -> dict[str, dict]:
    """Each cached notebook's latest execution: ``{"seconds": ..., "executed": ISO time (UTC)}`` by notebook name
    (jupyter-cache records the time a page took to execute)."""
    if not (cache_dir / "global.db").exists():
        return {}
    from jupyter_cache import get_cache

    latest: dict[str, dict] = {}
    for record in get_cache(cache_dir).list_cache_records():
        name, seconds = Path(record.uri).stem, record.data.get("execution_seconds")
        executed = record.created.replace(tzinfo=timezone.utc)
        if seconds is not None and (name not in latest or executed.isoformat() > latest[name]["executed"]):
            latest[name] = {"seconds": round(seconds, 1), "executed": executed.isoformat(timespec="seconds")}
    return latest


def report_times(cache_dir: Path, output: Path) -> None:
    """Print each chapter's execution time, slowest first, and write them as JSON to ``output``."""
    times = execution_times(cache_dir)
    since = datetime.now(timezone.utc).timestamp() - 24 * 3600
    for name, entry in sorted(times.items(), key=lambda item: -item[1]["seconds"]):
        recent = datetime.fromisoformat(entry["executed"]).timestamp() > since
        when = "" if recent else f" (on {entry['executed'][:10]})"
        print(f"book: {name} executed at its book defaults in {entry['seconds']:.0f} s{when}")
    if times:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(dict(sorted(times.items())), indent=1) + "\n")
        print(f"book: {len(times)} chapters, {sum(e['seconds'] for e in times.values()) / 60:.1f} min of execution "
              f"in all; the times are in {output}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="tools/book_cache.py", description=__doc__.split("\n")[0])
    parser.add_argument("cache_dir", nargs="?", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    parser.add_argument("--times", action="store_true", help="print each chapter's execution time and write them "
                        "to _build/chapter_times.json (after the build) instead of dropping stale executions")
    parser.add_argument("--execute", action="store_true", help="execute the book's notebooks without a cached "
                        "execution, one per core at a time, and cache them (before the build)")
    args = parser.parse_args(argv)
    if args.execute:
        timeout = yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"]
        summary = execute(args.cache_dir, book_notebooks(), timeout)
        for path in summary["excepted"] + summary["errored"]:
            print(f"book_cache: {Path(path).name} failed here; the build executes it again and reports why")
        if errors := shown_errors(args.cache_dir, book_notebooks()):
            sys.exit("book_cache: these cells ran on but show an error (a figure or display that failed to render), "
                     "which the page would print as a traceback; fix them:\n  " + "\n  ".join(errors))
        return
    if args.times:
        report_times(args.cache_dir, args.cache_dir.parent / "chapter_times.json")
        return
    for notebook in refresh(args.cache_dir, newest_input()):
        print(f"book_cache: {notebook.name} is older than the library or the results it reads: executed again")


if __name__ == "__main__":
    main()
