"""Every notebook in notebooks/ is a test: papermill's command line runs it once with its smoke parameters, typed as
a shell user types them (``-p seeds "0, 1"``, ``-p cells "[['mnist', 3.0, 'dpsgd']]"``: text, which the notebook's
parameter check turns into each parameter's type); the cells tagged ``nbval-check-output`` of that execution must
then print what ``tests/checked_outputs.json`` records (compared as nbval compares them: ``tests/checked_outputs.py``).
Tags, not comments: readers never see them.

Adding a notebook to notebooks/ is enough for it to be tested. Its smoke parameters live in one place, the
notebook's own metadata: ``metadata["dpbook"]["smoke_parameters"]`` (a dict of values; :func:`shell_text` writes
each as the text after ``-p name``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpbook.repro.sweep import KERNEL_START_TIMEOUT_S

from . import checked_outputs

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXECUTED = checked_outputs.EXECUTED  # the executed copies, which checked_outputs.py --update reads
#: papermill as the tests run it, with the sweep's kernel start timeout: a kernel can take over a minute to start
#: while both cores of a CI runner are busy (papermill's default, 60 s, failed a run there).
PAPERMILL_BASE = [sys.executable, "-m", "papermill", "--no-progress-bar",
                  "--start-timeout", str(KERNEL_START_TIMEOUT_S)]
PAPERMILL = [*PAPERMILL_BASE, "-k", "python3"]


def smoke_parameters(path: Path) -> dict:
    meta = json.loads(path.read_text())["metadata"]
    try:
        return meta["dpbook"]["smoke_parameters"]
    except KeyError:
        pytest.fail(f"{path.name}: declare its smoke parameters in metadata['dpbook']['smoke_parameters']")


def has_parameters_cell(path: Path) -> bool:
    cells = json.loads(path.read_text())["cells"]
    return any("parameters" in c.get("metadata", {}).get("tags", []) for c in cells)


def has_checked_cells(path: Path) -> bool:
    """Whether a code cell is tagged ``nbval-check-output`` (its outputs are compared with the record)."""
    cells = json.loads(path.read_text())["cells"]
    return any("nbval-check-output" in c["metadata"].get("tags", []) for c in cells if c["cell_type"] == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_test_marker_in_what_readers_see(path: Path):
    """nbval's markers are cell tags: a ``# NBVAL_...`` comment would be printed on the book's page."""
    cells = json.loads(path.read_text())["cells"]
    shown = [i for i, c in enumerate(cells) if "NBVAL_" in "".join(c["source"])]
    assert not shown, f"{path.name}: cells {shown} hold an NBVAL_ marker; tag them nbval-check-output instead"


def shell_text(value) -> str:
    """The text a shell user types after ``-p name``: a flat list comma-separated (``0, 1``; one element alone,
    ``0``), anything else as its Python literal (``[['mnist', 'mnist_cnn']]``, ``{'mnist': 32}``, ``True``).

    >>> shell_text([0, 1]), shell_text(["dpsgd"]), shell_text([["mnist", 3.0]]), shell_text({"a": 1}), shell_text(2.0)
    ('0, 1', 'dpsgd', "[['mnist', 3.0]]", "{'a': 1}", '2.0')
    """
    if isinstance(value, str):
        return value
    scalars = isinstance(value, list) and value and all(
        isinstance(v, (int, float, str)) and not isinstance(v, bool) and "," not in str(v) for v in value)
    return ", ".join(map(str, value)) if scalars else repr(value)


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook(path: Path):
    assert has_parameters_cell(path), f"{path.name} has no cell tagged 'parameters'"
    EXECUTED.mkdir(parents=True, exist_ok=True)
    out = EXECUTED / path.name
    options = [arg for name, value in smoke_parameters(path).items() for arg in ("-p", name, shell_text(value))]
    run = subprocess.run([*PAPERMILL, str(path), str(out), "--cwd", str(path.parent), *options],
                         capture_output=True, text=True)
    if run.returncode != 0:
        pytest.fail(f"{path.name}: papermill {' '.join(options)} failed:\n{run.stderr[-4000:]}", pytrace=False)
    if not has_checked_cells(path) or os.environ.get("DPBOOK_CHECK_OUTPUTS") == "0":
        return  # make oldest: older numerical libraries may print the last digits differently
    different = checked_outputs.differences(path.stem, out)
    if different:
        pytest.fail(f"{path.name}: checked cells that did not reproduce their recorded outputs:\n"
                    + "\n".join(different), pytrace=False)


@pytest.mark.notebook
@pytest.mark.parametrize("notebook, options, message", [
    ("reproduce_dcsgd", ["-p", "methods", "dcsgd-x"],
     "unknown method(s) ['dcsgd-x'] (did you mean 'dcsgd-p'?); valid:"),
    ("reproduce_dpdr", ["-p", "datasets", "mnistt"], "unknown dataset(s) ['mnistt'] (did you mean 'mnist'?); valid:"),
    ("reproduce_psasc", ["-p", "methods", "dpsgdd"], "unknown method(s) ['dpsgdd'] (did you mean 'dpsgd'?); valid:"),
    ("digits_benchmark", ["-p", "methods", "psacc"], "unknown method(s) ['psacc'] (did you mean 'psac'?); valid:"),
    ("dcsgd_privacy", ["-p", "methods", "dpsgdd"], "unknown method(s) ['dpsgdd'] (did you mean 'dpsgd'?); valid:"),
])
def test_a_misspelt_name_stops_the_notebook_before_anything_runs(notebook, options, message, tmp_path):
    """A name that selects nothing is an error in the notebook's first cells, not an empty run reported as done."""
    run = subprocess.run([*PAPERMILL, f"{notebook}.ipynb", str(tmp_path / "out.ipynb"), *options],
                         capture_output=True, text=True, cwd=ROOT / "notebooks")
    assert run.returncode != 0 and message in run.stderr, run.stderr[-2000:]


@pytest.mark.notebook
def test_stand_ins_train_the_mnist_cells_on_mnist5k(tmp_path):
    """``stand_ins=True``: a reproduction chapter's MNIST cells train on MNIST-5k, and the table says so."""
    path = ROOT / "notebooks" / "reproduce_psasc.ipynb"
    smoke = smoke_parameters(path) | {"cells": [["mnist", "dpsgd"]], "results_dir": str(tmp_path), "seeds": 2,
                                      "stand_ins": True}
    options = [arg for name, value in smoke.items() for arg in ("-p", name, shell_text(value))]
    out = tmp_path / "out.ipynb"
    run = subprocess.run([*PAPERMILL, str(path), str(out), "--cwd", str(path.parent), *options],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    trained = sorted(p.name for p in (tmp_path / "psasc" / "dpsgd").glob("*.json"))
    assert trained and all(name.startswith("smoke_mnist5k_") for name in trained), trained
    assert "the MNIST rows are trained on MNIST-5k" in out.read_text()
