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


def test_each_chapters_latest_execution_time_is_reported(tmp_path, capsys):
    cache_dir = tmp_path / "_build" / ".jupyter_cache"
    cache = jupyter_cache.get_cache(cache_dir)
    fast, slow = (_executed_notebook(tmp_path / f"{name}.ipynb", name) for name in ("fast", "slow"))
    cache.cache_notebook_file(fast, check_validity=False, data={"execution_seconds": 30.0})
    _executed_notebook(fast, "fast, second version")  # its latest execution counts
    time.sleep(0.01)
    cache.cache_notebook_file(fast, check_validity=False, data={"execution_seconds": 12.34})
    cache.cache_notebook_file(slow, check_validity=False, data={"execution_seconds": 250.0})

    times = book_cache.execution_times(cache_dir)
    assert {name: t["seconds"] for name, t in times.items()} == {"fast": 12.3, "slow": 250.0}
    book_cache.main([str(cache_dir), "--times"])
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == ["book: slow executed at its book defaults in 250 s",
                           "book: fast executed at its book defaults in 12 s"]
    assert "2 chapters, 4.4 min of execution" in printed[2]
    assert book_cache.json.loads((tmp_path / "_build" / "chapter_times.json").read_text()) == times
    assert book_cache.execution_times(tmp_path / "no cache") == {}


@pytest.mark.notebook
def test_notebooks_executed_ahead_are_what_the_build_finds_in_the_cache(tmp_path):
    """``--execute`` caches each notebook's execution as the build's own cache lookup (myst-nb's ``cache`` mode:
    ``match_cache_notebook``) finds it; a notebook that fails is not cached, for the build to execute and report."""
    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    for path, source in [(good, "import os\nprint(os.path.basename(os.getcwd()))"), (bad, "1 / 0")]:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, path)
    cache_dir = tmp_path / "cache"
    summary = book_cache.execute(cache_dir, [good, bad], timeout=600)
    assert [Path(p).name for p in summary["succeeded"]] == ["good.ipynb"]
    assert [Path(p).name for p in summary["excepted"]] == ["bad.ipynb"]
    cache = jupyter_cache.get_cache(cache_dir)
    record = cache.match_cache_notebook(nbformat.read(good, as_version=4))
    _, executed = cache.merge_match_into_notebook(nbformat.read(good, as_version=4))
    assert executed.cells[0].outputs[0]["text"] == f"{tmp_path.name}\n"  # executed in its own folder
    assert record.data["execution_seconds"] > 0
    with pytest.raises(KeyError):
        cache.match_cache_notebook(nbformat.read(bad, as_version=4))
    assert book_cache.execute(cache_dir, [good], timeout=600)["succeeded"] == []  # cached: not executed again


def test_a_cell_that_ran_on_but_shows_an_error_is_reported(tmp_path):
    """A display formatter that raises (a figure matplotlib cannot draw) leaves an error output in a cell that
    nbclient counts as executed; the book would show its traceback, so ``--execute`` names the cell and fails."""
    cache_dir = tmp_path / "cache"
    cache = jupyter_cache.get_cache(cache_dir)
    good, bad = (_executed_notebook(tmp_path / f"{name}.ipynb", name) for name in ("good", "bad"))
    nb = nbformat.read(bad, as_version=4)
    nb.cells[0].outputs.append(nbformat.v4.new_output("error", ename="ParseSyntaxException",
                                                      evalue="Unknown symbol: \\mathcal", traceback=["..."]))
    nbformat.write(nb, bad)
    for notebook in (good, bad):
        cache.cache_notebook_file(notebook, check_validity=False)
    found = book_cache.shown_errors(cache_dir, [good, bad, tmp_path / "never_executed.ipynb"])
    assert found == [f"bad.ipynb, cell {nb.cells[0].get('id')!r}: ParseSyntaxException: Unknown symbol: \\mathcal"]
