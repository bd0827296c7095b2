"""The book's configuration: offline MathJax, the table of contents, and the notebook conventions."""

from __future__ import annotations

import io
import json
import re
import sys
import tokenize
from pathlib import Path

import nbformat
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
    assert config["sphinx"]["local_extensions"] == {"offline_mathjax": "book/_ext", "page_fixes": "book/_ext"}
    assert config["sphinx"]["config"]["nb_render_markdown_format"] == "myst"  # Markdown tables become HTML tables
    assert config["execute"]["execute_notebooks"] == "cache"
    assert config["repository"]["url"].startswith("https://github.com/")
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def toc_files() -> list[str]:
    """The root, every chapter and every chapter's sections (its further pages)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [f for part in toc["parts"] for c in part["chapters"]
                            for f in [c["file"], *(s["file"] for s in c.get("sections", []))]]


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


# LaTeX written in a normal Python string loses its backslashes to escapes: "\rVert" becomes a carriage return and
# "Vert", "\theta" a tab and "heta", "\frac" a form feed and "rac". The book then shows "C/‖gVert" and the build
# passes. Two checks: code cells write LaTeX in raw strings only, and no text holds the remains of such an escape.
ESCAPE_REMAINS = re.compile(r"\n(Vert|ight|ho|heta|au|imes|ext|rac|eta|ar|ec|arepsilon|lpha|abla|eq|ewline|ilde)\b")


def non_raw_latex(source: str) -> list[str]:
    """The string literals of ``source`` that hold a backslash escape other than \\n and are not raw strings."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING:
            prefix = re.match(r"[A-Za-z]*", token.string).group(0).lower()
            if "r" not in prefix and re.search(r"(?<!\\)(\\\\)*\\[a-mo-zA-Z]", token.string):  # an odd run of \
                found.append(token.string[:60])
    return found


def test_the_latex_checks_catch_the_escapes():
    assert non_raw_latex('label = "$\\\\lVert g\\\\rVert$"\n') == []        # escaped by hand: allowed
    assert non_raw_latex('label = r"$\\lVert g\\rVert$"\n') == []
    assert non_raw_latex('label = f"$\\lVert g\\rVert$ = {x}"\n') != []
    assert ESCAPE_REMAINS.search("that is $C/\\lVert g\nVert$")


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_latex_survives_python_strings(path):
    cells = json.loads(path.read_text())["cells"]
    problems = []
    for i, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code":
            code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
            problems += [f"cell {i}: write {s}... as a raw string r\"...\"" for s in non_raw_latex(code)]
        problems += [f"cell {i}: an escape ate a backslash before {m.group(1)!r}"
                     for m in ESCAPE_REMAINS.finditer(source)]
    assert not problems, f"{path.name}: {problems}"


#: What the book shows of a notebook's code: a visible code cell fits the text column of a 1440 px window (13 px code,
#: ``book/_static/dpbook.css``; the browser tests in ``tests/browser`` measure it) and does not fill the page.
MAX_CODE_WIDTH, MAX_CODE_LINES = 95, 30
HIDDEN = {"hide-input", "remove-input", "remove-cell", "hide-cell"}


def visible_code_problems(nb) -> list[str]:
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or HIDDEN & set(cell.metadata.get("tags", [])):
            continue
        lines = cell.source.splitlines()
        wide = [n for n, line in enumerate(lines, 1) if len(line) > MAX_CODE_WIDTH]
        if wide:
            problems.append(f"cell {index} ({lines[0][:40]!r}): lines {wide} are longer than "
                            f"{MAX_CODE_WIDTH} characters")
        if len(lines) > MAX_CODE_LINES and "parameters" not in cell.metadata.get("tags", []):
            problems.append(f"cell {index} ({lines[0][:40]!r}): {len(lines)} lines (more than {MAX_CODE_LINES})")
    return problems


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_visible_code_fits_the_page(path):
    """The code a reader sees is the code that teaches: short lines, short cells (the parameters cell, which
    documents every knob of a reproduction, may be longer). Bookkeeping and plotting code is behind a toggle (cell
    tag ``hide-input``), the Colab set-up cell is not in the book (``remove-cell``)."""
    problems = visible_code_problems(nbformat.read(path, as_version=4))
    assert not problems, (f"{path.name}: wrap the lines, split the cell, or hide bookkeeping and plotting code with "
                          f"the cell tag hide-input:\n  " + "\n  ".join(problems))
