"""Every notebook opens the same way: its first code cell is dpbook.repro.colab.SETUP_CELL (Colab set-up), and the cell
after its parameters cell is dpbook.repro.params.CHECK_CELL (the parameters, checked and converted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dpbook.repro.colab import REPOSITORY, SETUP_CELL
from dpbook.repro.params import CHECK_CELL

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_first_code_cell_is_the_setup_cell(path):
    cells = json.loads(path.read_text())["cells"]
    first = next(c for c in cells if c["cell_type"] == "code")
    assert "".join(first["source"]) == SETUP_CELL, (
        f"{path.name}: the first code cell must be dpbook.repro.colab.SETUP_CELL; run tools/stamp_cells.py")
    assert first["metadata"].get("tags") == ["remove-cell"], (
        f"{path.name}: the set-up cell is for Colab only and stays out of the rendered book (tag remove-cell); "
        "run tools/stamp_cells.py")


def test_setup_cell_clones_the_books_repository():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == REPOSITORY


def test_setup_cell_does_nothing_outside_colab(capsys):
    exec(compile(SETUP_CELL, "setup", "exec"), {})  # no google.colab here: only prints the runtime summary
    out = capsys.readouterr().out
    assert out.startswith(("GPU:", "no GPU"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_parameter_check_follows_the_parameters_cell(path):
    cells = json.loads(path.read_text())["cells"]
    (index,) = [i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])]
    check = cells[index + 1]
    assert "".join(check["source"]) == CHECK_CELL and check["metadata"].get("tags") == ["remove-cell"], (
        f"{path.name}: the cell after the parameters cell must be dpbook.repro.params.CHECK_CELL (tag remove-cell); "
        "run tools/stamp_cells.py")
