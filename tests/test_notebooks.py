"""Every notebook in notebooks/ is a test: papermill runs it with its smoke parameters, then nbval (lax mode)
re-runs the executed copy and checks that the cells marked ``# NBVAL_CHECK_OUTPUT`` reproduce their outputs.

Adding a notebook to notebooks/ is enough for it to be tested. Its smoke parameters live in one place, the
notebook's own metadata: ``metadata["dpbook"]["smoke_parameters"]`` (a dict passed to papermill's ``-p``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import papermill
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXECUTED = ROOT / "tests" / "_executed"


def smoke_parameters(path: Path) -> dict:
    meta = json.loads(path.read_text())["metadata"]
    try:
        return meta["dpbook"]["smoke_parameters"]
    except KeyError:
        pytest.fail(f"{path.name}: declare its smoke parameters in metadata['dpbook']['smoke_parameters']")


def has_parameters_cell(path: Path) -> bool:
    cells = json.loads(path.read_text())["cells"]
    return any("parameters" in c.get("metadata", {}).get("tags", []) for c in cells)


def describe_failure(err: papermill.PapermillExecutionError) -> str:
    return (f"cell {err.cell_index} (execution count {err.exec_count}) failed with {err.ename}: {err.evalue}\n"
            f"--- cell source ---\n{err.source}\n--- traceback ---\n" + "\n".join(err.traceback))


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook(path: Path):
    assert has_parameters_cell(path), f"{path.name} has no cell tagged 'parameters'"
    EXECUTED.mkdir(parents=True, exist_ok=True)
    out = EXECUTED / path.name
    try:
        papermill.execute_notebook(
            str(path), str(out), parameters=smoke_parameters(path), kernel_name="python3",
            cwd=str(path.parent), progress_bar=False, log_output=False,
        )
    except papermill.PapermillExecutionError as err:
        pytest.fail(f"{path.name}: {describe_failure(err)}", pytrace=False)
    # nbval re-executes the papermill output (smoke parameters included) and compares the checked cells.
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-q", "--no-header",
         "-o", "addopts=", str(out)],
        cwd=path.parent, capture_output=True, text=True,
    )
    if run.returncode != 0:
        pytest.fail(f"{path.name}: nbval found cells that did not reproduce:\n{run.stdout[-6000:]}", pytrace=False)
