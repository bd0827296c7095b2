"""``tools/book_cache.py``: a cached execution older than the library or the results is dropped and its notebook
touched, so that ``make book`` executes the page again; a newer one is kept."""

from __future__ import annotations

import os
import sys
import time
from datetime import timezone
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book_cache  # noqa: E402

jupyter_cache = pytest.importorskip("jupyter_cache", reason="the book's tools (requirements.txt) are not installed")


def _executed_notebook(path: Path, text: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"print({text!r})")])
    nb.cells[0].execution_count = 1
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
    nbformat.write(nb, path)
    return path


def test_a_page_older_than_its_inputs_is_executed_again(tmp_path):
    cache_dir = tmp_path / "cache"
    cache = jupyter_cache.get_cache(cache_dir)
    old, new = (_executed_notebook(tmp_path / f"{name}.ipynb", name) for name in ("old", "new"))
    cache.cache_notebook_file(old, check_validity=False)
    _executed_notebook(old, "old, second version")  # another version of its code: a second record, same file
    cache.cache_notebook_file(old, check_validity=False)
    time.sleep(0.01)
    cache.cache_notebook_file(new, check_validity=False)
    for notebook in (old, new):
        os.utime(notebook, (0, 0))
    created = {Path(r.uri).name: r.created.replace(tzinfo=timezone.utc).timestamp()  # naive UTC in the cache
               for r in cache.list_cache_records()}  # the old notebook's latest record
    assert len(cache.list_cache_records()) == 3
    assert created["old.ipynb"] < created["new.ipynb"]

    assert book_cache.refresh(cache_dir, created["new.ipynb"]) == [old]  # an input changed between the two
    assert [Path(r.uri).name for r in cache.list_cache_records()] == ["new.ipynb"]
    assert old.stat().st_mtime > 0 and new.stat().st_mtime == 0  # Sphinx reads the stale page again, not the other
    assert book_cache.refresh(cache_dir, 0.0) == []  # nothing is older than the epoch
    assert book_cache.refresh(tmp_path / "no cache", 1e12) == []


def test_the_newest_input_is_the_latest_file_but_bytecode(tmp_path):
    (tmp_path / "dpbook" / "__pycache__").mkdir(parents=True)
    (tmp_path / "data").mkdir()
    for name, when in [("dpbook/a.py", 100), ("data/r.json", 200), ("dpbook/__pycache__/a.pyc", 300)]:
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (when, when))
    assert book_cache.newest_input(tmp_path) == 200
    assert book_cache.newest_input(tmp_path / "elsewhere") == 0.0
