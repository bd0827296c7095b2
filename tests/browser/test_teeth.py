"""The browser check has teeth: each deliberately broken copy of a real book page is caught, for the right reason.

A copy of the built book (``_build/html``) goes to a temporary directory; one notebook page of the copy is broken
in one way per test, and the check must report that kind of defect on the broken page where the intact page of the
same copy has none of that kind.
"""

from __future__ import annotations

import base64
import io
import shutil

import matplotlib
import pytest

from .bookcheck import ROOT, book_pages, colab_link

matplotlib.use("Agg")

PAGE = next(p for p in book_pages() if p.docname == "notebooks/dpsgd_from_scratch")


@pytest.fixture(scope="module")
def book_copy(html_root, tmp_path_factory):
    copy = tmp_path_factory.mktemp("book") / "html"
    shutil.copytree(html_root, copy)
    return copy


def _wide_png() -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(24, 3), dpi=100)
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _check(browser, html, **extra):
    return {d.kind for d in browser.check_page(html, name="broken", notebook=PAGE.source, colab=colab_link(PAGE),
                                               **extra)}


# defect kind -> HTML inserted at the end of the page's last section (inside MyST-NB's mathjax_ignore section, where a
# chapter's own text is, so that stray $$ is not typeset by accident)
INSERTED = {
    "math-error": r'<p>A broken formula: <span class="math notranslate nohighlight">\(\sqrt{x}}\)</span>.</p>',
    "escape-casualty": ('<p>Lost backslash: <span class="math notranslate nohighlight">'
                        '\\(C/\\lVert g \rVert\\)</span>.</p>'),
    "raw-math": "<p>Some text with raw TeX $$x^2$$ left in it.</p>",
    "pipe-table": "<p>| method | accuracy |\n|---|---|\n| dpsgd | 90 |</p>",
    "image-not-loaded": '<img alt="a figure that was never written" src="../_images/no-such-figure.png">',
    "image-no-alt": '<img src="../_static/images/logo_colab.png">',
    "dead-link": '<p><a href="no_such_chapter.html">a chapter that does not exist</a></p>',
    "dead-anchor": '<p><a href="#no-such-section">a section that does not exist</a></p>',
    "console-error": "<script>console.error('a script failed');</script>",
    "network-request": '<img alt="a remote image" src="https://example.org/figure.png">',
    "code-overflow": ('<div class="cell_input"><div class="highlight"><pre>x = 1  # ' + "y" * 300
                      + "</pre></div></div>"),
    "code-too-long": ('<div class="cell_input"><div class="highlight"><pre>'
                      + "\n".join(f"x{i} = {i}" for i in range(60)) + "</pre></div></div>"),
    "page-overflow": '<div style="width: 4000px">a block wider than any window</div>',
    "machine-path": f"<pre>results under {ROOT / 'data' / 'results'}</pre>",
    "figure-downscaled": f'<img alt="a 24-inch wide figure" src="data:image/png;base64,{_wide_png()}">',
}


@pytest.mark.parametrize("kind", sorted(INSERTED))
def test_a_broken_page_is_caught(kind, browser, book_copy):
    page = PAGE.html(book_copy)
    intact = page.read_text()
    assert intact.count("</article>") == 1
    end = intact.rindex("</section>", 0, intact.index("</article>"))
    broken = page.with_name(f"broken_{kind.replace('-', '_')}.html")
    broken.write_text(intact[:end] + INSERTED[kind] + intact[end:])
    assert kind not in _check(browser, page), f"the intact page already has a {kind} defect"
    assert kind in _check(browser, broken), f"a page with a {kind} defect passed the check"


def test_missing_mathjax_is_caught(browser, book_copy, tmp_path):
    """A book whose MathJax is not on disk (it would be fetched from a CDN, or not at all) fails offline."""
    broken = shutil.copytree(book_copy, tmp_path / "html")
    shutil.rmtree(broken / "_static" / "mathjax")
    kinds = _check(browser, PAGE.html(broken))
    assert {"math-error", "request-failed"} <= kinds


def test_missing_colab_link_and_broken_download_are_caught(browser, book_copy, tmp_path):
    broken = shutil.copytree(book_copy, tmp_path / "html")
    page = PAGE.html(broken)
    page.write_text(page.read_text().replace(colab_link(PAGE), "https://colab.research.google.com/"))
    (broken / "_sources" / f"{PAGE.docname}.ipynb").write_text("not a notebook")
    kinds = _check(browser, page)
    assert {"colab-missing", "download-broken"} <= kinds


def test_missing_opening_paragraph_is_caught(browser, book_copy, tmp_path):
    broken = shutil.copytree(book_copy, tmp_path / "html")
    page = PAGE.html(broken)
    html = page.read_text()
    start = html.index("</h1>") + len("</h1>")
    end = html.index("</p>", start) + len("</p>")
    page.write_text(html[:start] + html[end:])
    assert "no-opening-paragraph" in _check(browser, page)


def test_code_behind_a_closed_toggle_is_not_flagged(browser, book_copy):
    """Long bookkeeping code behind 'Show code' (cell tag hide-input: a closed <details>) is what the rules ask
    for, so neither its width nor its length is a defect; Chromium still lays out a closed <details>' content."""
    page = PAGE.html(book_copy)
    intact = page.read_text()
    end = intact.rindex("</section>", 0, intact.index("</article>"))
    code = "x = 1  # " + "y" * 300 + "\n" + "\n".join(f"x{i} = {i}" for i in range(60))
    toggle = ('<details class="admonition hide above-input"><summary>Show code cell source</summary>'
              f'<div class="cell_input"><div class="highlight"><pre>{code}</pre></div></div></details>')
    hidden = page.with_name("hidden_code.html")
    hidden.write_text(intact[:end] + toggle + intact[end:])
    assert not {"code-overflow", "code-too-long"} & _check(browser, hidden)
