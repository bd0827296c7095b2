"""Every notebook opens the same way: its first code cell is dpbook.repro.colab.SETUP_CELL (Colab set-up), and the cell
after its parameters cell is dpbook.repro.params.CHECK_CELL (the parameters, checked and converted). The set-up cell is
also executed for real, on a stand-in for Colab (a fresh Python with a google.colab module, a file:// clone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from dpbook.repro.colab import REPOSITORY, SETUP_CELL
from dpbook.repro.params import CHECK_CELL
from tests.test_notebooks import PAPERMILL_BASE, shell_text, smoke_parameters

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


# --- the set-up cell, executed on a stand-in for Colab -----------------------------------------------------------

#: The notebook the stand-in runs after its set-up cell: a reproduction chapter in run mode, as a reader on Colab
#: runs it, with its smoke parameters and its results in the clone (where "Bringing results back" finds them).
COLAB_NOTEBOOK = ROOT / "notebooks" / "reproduce_psasc.ipynb"


#: Where the stand-in Python finds dpbook and torch (the files an import of each would run; torch is not imported).
FOUND_AT = "import importlib.util as u; print(u.find_spec('dpbook').origin); print(u.find_spec('torch').origin)"


def _remote(where: Path) -> Path:
    """A bare clone of this repository standing in for GitHub, its branch at the working tree's tracked files (HEAD
    plus uncommitted changes, ``git stash create``), so that the clone runs the code the notebook comes from."""
    subprocess.run(["git", "clone", "--quiet", "--bare", str(ROOT), str(where)], check=True)
    changes = subprocess.run(["git", "stash", "create"], cwd=ROOT, capture_output=True, text=True, check=True)
    if changes.stdout.strip():
        branch = subprocess.run(["git", "symbolic-ref", "HEAD"], cwd=where, capture_output=True, text=True,
                                check=True).stdout.strip()
        subprocess.run(["git", "config", "receive.shallowUpdate", "true"], cwd=where, check=True)
        subprocess.run(["git", "push", "--quiet", str(where), f"+{changes.stdout.strip()}:{branch}"], cwd=ROOT,
                       check=True)
    return where


def _colab_python(where: Path) -> Path:
    """A fresh venv standing in for Colab's Python: a ``google.colab`` module imported at start-up (as on Colab),
    and this environment's packages (pip, torch, numpy, ...) visible through a ``.pth`` file, as Colab's
    preinstalled ones are, except dpbook, which the set-up cell must install. Every requirement is thus already
    there and pip installs dpbook alone (no network needed); installing the requirements themselves, at the oldest
    versions dpbook supports, is ``make oldest``'s part."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)  # pip: preinstalled
    (site,) = where.glob("lib/python*/site-packages")
    ours = Path(sysconfig.get_paths()["purelib"])
    preinstalled = where / "preinstalled"
    preinstalled.mkdir()
    for entry in ours.iterdir():
        if not entry.name.startswith(("dpbook", "__editable__", "__pycache__")) and entry.suffix != ".pth":
            (preinstalled / entry.name).symlink_to(entry)
    (site / "google" / "colab").mkdir(parents=True)
    (site / "google" / "colab" / "__init__.py").write_text('"""Stand-in for Colab\'s module."""\n')
    (site / "colab_stand_in.pth").write_text(f"{preinstalled}\nimport google.colab\n")
    return where / "bin" / "python"


def _kernel(jupyter: Path, python: Path, env: dict) -> str:
    """A kernelspec for ``python`` under ``jupyter/kernels`` (put on JUPYTER_PATH), with the set-up cell's settings."""
    spec = jupyter / "kernels" / "colab-stand-in"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Colab stand-in",
                                                  "language": "python", "env": env}))
    return spec.name


@pytest.mark.slow
@pytest.mark.notebook
def test_setup_cell_on_a_colab_stand_in(tmp_path):
    """The set-up cell clones a bare copy of this repository's HEAD (a ``file://`` address standing in for GitHub)
    into a folder standing in for ``/content``, installs it with pip into the stand-in Python, keeps that Python's
    torch, and the notebook's next cells then run from the clone and write their results into it."""
    remote = _remote(tmp_path / "remote.git")
    python = _colab_python(tmp_path / "colab-python")
    content = tmp_path / "content"
    content.mkdir()
    root = content / "dpbook"
    env = {"DPBOOK_REPOSITORY": remote.as_uri(), "DPBOOK_ROOT": str(root), "PYTHONPATH": ""}
    jupyter = tmp_path / "jupyter"
    kernel = _kernel(jupyter, python, env)
    # its smoke parameters, one cell of one seed (the suite runs the rest), its results in the clone
    parameters = {**smoke_parameters(COLAB_NOTEBOOK), "cells": [["mnist", "psasc"]], "seeds": 1}
    del parameters["results_dir"]
    options = [arg for name, value in parameters.items() for arg in ("-p", name, shell_text(value))]
    out = tmp_path / COLAB_NOTEBOOK.name
    run = subprocess.run([*PAPERMILL_BASE, "-k", kernel, str(COLAB_NOTEBOOK), str(out), "--cwd", str(content),
                          *options], capture_output=True, text=True,
                         env={**os.environ, "JUPYTER_PATH": str(jupyter), "PYTHONPATH": ""})
    assert run.returncode == 0, run.stderr[-4000:]

    setup = json.loads(out.read_text())["cells"][1]
    setup_output = "".join(line for output in setup["outputs"] for line in output.get("text", []))
    assert setup_output.startswith(("GPU:", "no GPU")), setup_output
    assert (root / ".git").is_dir() and (root / "notebooks" / COLAB_NOTEBOOK.name).is_file()
    where = subprocess.run([str(python), "-c", FOUND_AT],
                           capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": ""},
                           cwd=tmp_path).stdout.split()
    assert where[0] == str(root / "dpbook" / "__init__.py"), "dpbook is not the clone's editable install"
    assert where[1] == str(tmp_path / "colab-python" / "preinstalled" / "torch" / "__init__.py"), (
        "pip replaced the stand-in's own torch")
    written = list((root / "data" / "results" / "psasc").rglob("smoke_*.json"))
    assert written, "run mode wrote no result into the clone"
