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

from dpbook.repro.dispatch import KERNEL_START_TIMEOUT_S

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
    if not has_checked_cells(path):
        return
    different = checked_outputs.differences(path.stem, out)
    if different:
        pytest.fail(f"{path.name}: checked cells that did not reproduce their recorded outputs:\n"
                    + "\n".join(different), pytrace=False)


#: A misspelt name in each kind of notebook parameter that selects something, and the error that must name it.
MISSPELT = [
    ("reproduce_dcsgd", "methods", "dcsgd-x", "unknown method(s) ['dcsgd-x'] (did you mean 'dcsgd-p'?); valid:"),
    ("reproduce_dpdr", "datasets", "mnistt", "unknown dataset(s) ['mnistt'] (did you mean 'mnist'?); valid:"),
    ("reproduce_psasc", "methods", "dpsgdd", "unknown method(s) ['dpsgdd'] (did you mean 'dpsgd'?); valid:"),
    ("digits_benchmark", "methods", "psacc", "unknown method(s) ['psacc'] (did you mean 'psac'?); valid:"),
    ("dcsgd_privacy_tuning", "methods", "dpsgdd", "unknown method(s) ['dpsgdd'] (did you mean 'dpsgd'?); valid:"),
]


@pytest.mark.notebook
def test_a_misspelt_name_stops_the_notebook_run_by_papermill(tmp_path):
    """A name that selects nothing is an error in the notebook's first cells, not an empty run reported as done:
    papermill's command as a reader types it fails with the message (the other notebooks: the next test)."""
    notebook, name, text, message = MISSPELT[0]
    run = subprocess.run([*PAPERMILL, f"{notebook}.ipynb", str(tmp_path / "out.ipynb"), "-p", name, text],
                         capture_output=True, text=True, cwd=ROOT / "notebooks")
    assert run.returncode != 0 and message in run.stderr, run.stderr[-2000:]


def first_error(path: Path, given: dict[str, str]) -> tuple[int, BaseException | None]:
    """Execute the notebook's code cells in order in this process, from its folder, with papermill's injected cell
    (``given``: each parameter's text) after the ``parameters`` cell and IPython's history ``In``: the index of the
    first cell that raises and its exception (the number of code cells and None if none does)."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    namespace: dict = {"In": [""]}

    def execute(source: str) -> None:
        namespace["In"].append(source)
        exec(compile(source, str(path), "exec"), namespace)

    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        for index, cell in enumerate(cells):
            try:
                execute("".join(cell["source"]))
                if "parameters" in cell["metadata"].get("tags", []):
                    execute("# Parameters\n" + "".join(f"{k} = {v!r}\n" for k, v in given.items()))
            except Exception as err:  # noqa: BLE001 - the error is what the test reads
                return index, err
    finally:
        os.chdir(cwd)
    return len(cells), None


@pytest.mark.parametrize("notebook, name, text, message", MISSPELT[1:], ids=[m[0] for m in MISSPELT[1:]])
def test_a_misspelt_name_stops_the_notebook_before_anything_runs(notebook, name, text, message):
    """The same in every other notebook that selects by name, its cells executed here (a kernel for each would
    cost seconds): the first cell to raise is within the opening cells (set-up, parameters, their check and the
    selection), with the message."""
    index, err = first_error(ROOT / "notebooks" / f"{notebook}.ipynb", {name: text})
    assert isinstance(err, ValueError) and message in str(err), err
    assert index <= 5, f"{notebook}: the misspelt name stopped cell {index}, after cells that ran"


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
