"""Sphinx extension: serve MathJax 3 from the book's own ``_static`` folder, so that math renders offline.

Sphinx loads MathJax from a CDN by default; an offline reader would see raw LaTeX. The registry package
``django-static-mathjax`` (no Django needed) ships MathJax 3.2.2; this extension copies the parts a page
needs into ``_build/html/_static/mathjax`` and points ``mathjax_path`` there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

# The combined TeX/MathML -> CommonHTML component, its web fonts, the TeX extensions that \require can load,
# and the accessibility/menu components that the page loads on demand.
PARTS = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions", "a11y", "ui", "sre")
TARGET = "mathjax"


def mathjax_source() -> Path:
    try:
        import mathjax  # provided by django-static-mathjax
    except ImportError as err:  # pragma: no cover - exercised only in a broken environment
        raise RuntimeError(
            "offline MathJax: the package 'django-static-mathjax' is not installed; "
            "run 'make book' (it installs requirements.txt) or 'pip install django-static-mathjax'"
        ) from err
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (es5 / PARTS[0]).is_file():  # pragma: no cover
        raise RuntimeError(f"offline MathJax: {es5 / PARTS[0]} is missing; reinstall django-static-mathjax")
    return es5


def _use_local_mathjax(app, config) -> None:
    config.mathjax_path = f"{TARGET}/{PARTS[0]}"


def _copy_mathjax(app) -> None:
    if app.builder.format != "html":
        return
    source, target = mathjax_source(), Path(app.outdir) / "_static" / TARGET
    for part in PARTS:
        src, dst = source / part, target / part
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def setup(app):
    app.connect("config-inited", _use_local_mathjax, priority=900)
    app.connect("builder-inited", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
