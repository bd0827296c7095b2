"""The outputs of the notebooks' checked cells (tag ``nbval-check-output``), compared as nbval compares them, on the
one execution papermill already made.

``tests/test_notebooks.py`` executes each notebook once, at its smoke parameters. The checked cells of that
execution must print what ``tests/checked_outputs.json`` records for them (keyed by notebook and cell id): a claim
that now prints ``False``, a number that moved or a cell that stopped printing fails the test, with both texts. The
comparison is nbval's (``pytest --nbval``): streams merged (carriage returns and backspaces applied) and keyed by
stream name, each MIME type of a display flattened, and nbval's own list of what is never compared (metadata,
tracebacks, execution counts, widget ids, images).

After a deliberate change of a checked cell's output, record the new outputs from the executed copies the notebook
tests leave in ``tests/_executed/`` and review the diff of ``tests/checked_outputs.json``:

    .venv/bin/python -m pytest tests/test_notebooks.py -k dpsgd_from_scratch
    .venv/bin/python tests/checked_outputs.py --update dpsgd_from_scratch
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat
from nbval.plugin import coalesce_streams, transform_streams_for_comparison

ROOT = Path(__file__).resolve().parents[1]
RECORDED = Path(__file__).with_name("checked_outputs.json")
EXECUTED = ROOT / "tests" / "_executed"
TAG = "nbval-check-output"
#: What nbval never compares (``IPyNbFile.skip_compare`` without ``--nbdime``).
SKIP = ("metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
        "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg")


def comparable(outputs: list) -> dict[str, list]:
    """nbval's view of one cell's outputs: a list of values per stream name and per MIME type, in order."""
    view: dict[str, list] = {}
    for output in transform_streams_for_comparison(coalesce_streams([nbformat.from_dict(o) for o in outputs])):
        for key, value in output.items():
            if key in SKIP:
                continue
            items = value.items() if key == "data" else [(key, value)]
            for name, text in items:
                if name not in SKIP:
                    view.setdefault(name, []).append(text)
    return view


def checked_cells(nb) -> dict[str, dict[str, list]]:
    """The comparable outputs of a notebook's checked code cells, by cell id."""
    return {cell["id"]: comparable(cell.get("outputs", [])) for cell in nb["cells"]
            if cell["cell_type"] == "code" and TAG in cell.get("metadata", {}).get("tags", [])}


def recorded() -> dict[str, dict[str, dict[str, list]]]:
    return json.loads(RECORDED.read_text()) if RECORDED.exists() else {}


def differences(name: str, executed: Path, record: dict | None = None) -> list[str]:
    """What the executed notebook's checked cells print differently from the record (``record``, by default
    ``tests/checked_outputs.json``; empty: all reproduced)."""
    expected = (recorded() if record is None else record).get(name)
    found = checked_cells(nbformat.read(executed, as_version=4))
    fix = f"if the change is intended: .venv/bin/python tests/checked_outputs.py --update {name}"
    if expected is None:
        return [f"{name}: no outputs recorded for its checked cells in {RECORDED.name} ({fix})"]
    out = []
    for cell in sorted(expected.keys() | found.keys()):
        if cell not in found or cell not in expected:
            where = "the notebook" if cell not in found else RECORDED.name
            out.append(f"cell {cell!r} is checked but not in {where} ({fix})")
        elif found[cell] != expected[cell]:
            out.append(f"cell {cell!r} printed\n{_shown(found[cell])}\nwhere {RECORDED.name} records\n"
                       f"{_shown(expected[cell])}\n({fix})")
    return out


def _shown(view: dict[str, list]) -> str:
    return "\n".join(f"  [{key}] {text}" for key, texts in view.items() for text in texts)


def update(names: list[str]) -> None:
    """Record the checked outputs of the executed copies of ``names`` (from ``tests/_executed/``)."""
    record = recorded()
    for name in names:
        executed = EXECUTED / f"{name}.ipynb"
        if not executed.exists():
            raise SystemExit(f"checked_outputs: no executed copy {executed}: run "
                             f".venv/bin/python -m pytest tests/test_notebooks.py -k {name} first")
        cells = checked_cells(nbformat.read(executed, as_version=4))
        if cells:
            record[name] = cells
        else:
            record.pop(name, None)
        print(f"checked_outputs: {name}: {len(cells)} checked cell(s) recorded")
    RECORDED.write_text(json.dumps(dict(sorted(record.items())), indent=1, ensure_ascii=False) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="tests/checked_outputs.py", description=__doc__.split("\n")[0])
    parser.add_argument("--update", nargs="+", metavar="NOTEBOOK", required=True,
                        help="record the checked outputs of these notebooks (names without .ipynb)")
    update(parser.parse_args(argv).update)


if __name__ == "__main__":
    sys.exit(main())
