"""The book's configuration: offline MathJax, the table of contents, and the notebook conventions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_offline_mathjax_extension_serves_mathjax_from_static(tmp_path):
    """A one-page Sphinx build with the book's extension references and ships MathJax under _static/."""
    sphinx = pytest.importorskip("sphinx.application")
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['sphinx.ext.mathjax', 'offline_mathjax']\n")
    (src / "index.rst").write_text("Title\n=====\n\n.. math:: \\sigma_T = (\\sigma^{-2} - \\sigma_H^{-2})^{-1/2}\n")
    out = tmp_path / "html"
    app = sphinx.Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html",
                        status=None, warning=sys.stderr, freshenv=True)
    app.build()
    html = (out / "index.html").read_text()
    assert 'src="_static/mathjax/tex-mml-chtml.js' in html
    assert "cdn.jsdelivr.net" not in html and "mathjax@" not in html
    assert (out / "_static" / "mathjax" / "tex-mml-chtml.js").stat().st_size > 500_000
    assert any((out / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))


def test_book_config_uses_the_extension_and_the_execution_cache():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"] == {"offline_mathjax": "book/_ext"}
    assert config["execute"]["execute_notebooks"] == "cache"
    assert config["repository"]["url"].startswith("https://github.com/")
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_every_toc_entry_exists():
    for entry in toc_files():
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), entry


def test_every_notebook_is_in_the_book():
    listed = set(toc_files())
    missing = [p.name for p in sorted((ROOT / "notebooks").glob("*.ipynb")) if f"notebooks/{p.stem}" not in listed]
    assert not missing, f"add these notebooks to _toc.yml: {missing}"


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebooks_are_committed_without_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    with_outputs = [i for i, c in enumerate(cells) if c.get("outputs")]
    assert not with_outputs, f"{path.name}: clear the outputs of cells {with_outputs} (the book executes it)"
