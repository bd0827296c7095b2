"""What running the book costs, measured and recorded: the record behind the book's page "What it costs"
(``book/costs.md``), whose tables this tool renders.

    python tools/costs.py record "make test" --where "fresh clone, nothing else running" -- make test
    python tools/costs.py chapters _build/chapter_times.json     # after make book: each chapter's execution
    python tools/costs.py --table                                # the page's tables, from the record
    python tools/costs.py --write-page                           # ... written into book/costs.md

``record`` runs the command, and when it succeeds records its wall time, the CPU time of the command and its
children, the date (UTC), the commit, the machine's cores and where it ran, under its name (a later measurement
replaces it). ``chapters`` records the execution times ``make book`` wrote, each with its date. Entries measured
before this tool existed say how they were measured (``how``). The record is ``data/results/costs/analysis/costs.json``;
``tests/test_costs.py`` checks that the page shows what the record holds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpbook.io import atomic_write_json, claimed  # noqa: E402
from dpbook.repro.results import markdown_table  # noqa: E402

RECORD = ROOT / "data" / "results" / "costs" / "analysis" / "costs.json"
PAGE = ROOT / "book" / "costs.md"
MARKERS = ("<!-- costs:start -->", "<!-- costs:end -->")


#: An analysis record's parameters (what data/results/ requires of a record that is not a run's result).
PARAMETERS = {"written_by": "tools/costs.py", "holds": "the costs of the book's commands and chapters"}


def read(path: Path = RECORD) -> dict:
    """The record in ``path`` (a fresh one where there is none); a file this tool did not write stops it."""
    if not path.exists():
        return {"parameters": PARAMETERS, "commands": {}, "chapters": {}}
    try:
        return claimed(path, PARAMETERS)
    except ValueError as error:
        raise SystemExit(f"costs: {error}; give another --record-file, or restore it (git checkout -- {path})")


def _commit(where: Path) -> str:
    found = subprocess.run(["git", "rev-parse", "--short=8", "HEAD"], cwd=where, capture_output=True, text=True)
    return found.stdout.strip() or "unknown"


def record(name: str, command: list[str], *, where: str, detail: str = "", cwd: Path = ROOT,
           path: Path = RECORD) -> dict:
    """Run ``command`` in ``cwd``; when it exits 0, record its costs under ``name`` and return the entry. A failing
    command is not recorded: a SystemExit says so (and before it runs, for a record this tool did not write)."""
    read(path)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    status = subprocess.run(command, cwd=cwd).returncode
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if status != 0:
        raise SystemExit(f"costs: `{' '.join(command)}` exited {status}: nothing recorded")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    entry = {"command": " ".join(command), "seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
             "measured": datetime.now(timezone.utc).date().isoformat(), "commit": _commit(cwd),
             "cores": os.cpu_count(), "where": where, "detail": detail, "how": "tools/costs.py record"}
    costs = read(path)
    costs["commands"][name] = entry
    atomic_write_json(costs, path, indent=1)
    return entry


def chapters(times: Path, path: Path = RECORD) -> dict:
    """Record each chapter's execution time at its book defaults, as ``make book`` wrote them (``times``)."""
    costs = read(path)
    costs["chapters"] = {name: {"seconds": e["seconds"], "measured": e["executed"][:10]}
                         for name, e in json.loads(times.read_text()).items()}
    atomic_write_json(costs, path, indent=1)
    return costs["chapters"]


def duration(seconds: float) -> str:
    """
    >>> duration(42.4), duration(568.0), duration(7260)
    ('42 s', '9 min 28 s', '2 h 1 min')
    """
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def table(costs: dict) -> str:
    """The page's tables: every recorded command (what, time, CPU time, when, how it was measured, where and what it
    did), then every chapter's execution at its book defaults, slowest first."""
    rows = [{"what": name, "time": duration(e["seconds"]),
             "CPU": "" if e.get("cpu_seconds") is None else duration(e["cpu_seconds"]),
             "measured": f"{e['measured']} ({e['commit']})", "how": e["how"],
             "where": e["where"] + (f"; {e['detail']}" if e["detail"] else "")}
            for name, e in costs["commands"].items()]
    commands = markdown_table(rows, ["what", "time", "CPU", "measured", "how", "where"],
                              ["what", "wall time", "CPU time", "measured (commit)", "how it was measured",
                               "where, and what it did"])
    chapters_ = sorted(costs["chapters"].items(), key=lambda item: -item[1]["seconds"])
    total = sum(e["seconds"] for _, e in chapters_)
    dates = {e["measured"] for _, e in chapters_}
    one_date = len(dates) == 1
    cells = [(f"`{name}`", duration(e["seconds"]) + ("" if one_date else f" ({e['measured']})"))
             for name, e in chapters_]
    half = (len(cells) + 1) // 2  # two pages to a row, the slowest half on the left: a page per row ran 14 screens
    rows = [{"a": a, "ta": ta, "b": b, "tb": tb}
            for (a, ta), (b, tb) in zip(cells[:half], cells[half:] + [("", "")])]
    lines = markdown_table(rows, ["a", "ta", "b", "tb"], ["page", "execution", "page", "execution"])
    when = f", measured {dates.pop()}" if one_date else ", each with the date it was measured"
    return (f"{commands}\n\nEach page's execution at its book defaults, as `make book` recorded it (one thread per "
            f"kernel, two pages at a time on 2 cores{when}): {duration(total)} in all, slowest first.\n\n{lines}")


def block(text: str) -> str:
    """What a page holds between :data:`MARKERS`.

    >>> block("a\\n<!-- costs:start -->\\n| x |\\n<!-- costs:end -->\\nb")
    '| x |'
    """
    return text.split(MARKERS[0], 1)[1].split(MARKERS[1], 1)[0].strip("\n")


def write_page(costs: dict, page: Path = PAGE) -> None:
    """Replace what ``page`` holds between :data:`MARKERS` with :func:`table` of ``costs``."""
    before, rest = page.read_text().split(MARKERS[0], 1)
    after = rest.split(MARKERS[1], 1)[1]
    page.write_text(f"{before}{MARKERS[0]}\n{table(costs)}\n{MARKERS[1]}{after}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="tools/costs.py", description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print the page's tables from the record")
    parser.add_argument("--write-page", action="store_true", help="write them into book/costs.md")
    parser.add_argument("--record-file", type=Path, default=RECORD, help="the record (default: %(default)s)")
    commands = parser.add_subparsers(dest="action")
    run = commands.add_parser("record", help="run a command and record what it cost")
    run.add_argument("name", help="its name on the page, e.g. 'make test'")
    run.add_argument("--where", required=True, help="where it ran, e.g. 'fresh clone, nothing else running'")
    run.add_argument("--detail", default="", help="what it did, e.g. '3,282 tests'")
    run.add_argument("--cwd", type=Path, default=ROOT, help="the folder to run it in (default: this repository)")
    run.epilog = "then -- and the command (everything after -- is the command)"
    times = commands.add_parser("chapters", help="record the chapters' execution times that make book wrote")
    times.add_argument("times", type=Path, help="_build/chapter_times.json")
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.action == "record":
        if not command:
            parser.error("give the command after --")
        print(json.dumps(record(args.name, command, where=args.where, detail=args.detail, cwd=args.cwd,
                                path=args.record_file), indent=1))
    elif args.action == "chapters":
        print(f"costs: {len(chapters(args.times, args.record_file))} chapters recorded")
    if args.table:
        print(table(read(args.record_file)))
    if args.write_page:
        write_page(read(args.record_file))


if __name__ == "__main__":
    main()
