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

from dpbook.repro.plotting import SMALLEST_TEXT_KEY

from .bookcheck import LONG_PAGES, PHONE, ROOT, BookBrowser, book_pages, colab_link

matplotlib.use("Agg")

PAGE = next(p for p in book_pages() if p.docname == "notebooks/dpsgd_from_scratch")


@pytest.fixture(scope="module")
def book_copy(html_root, tmp_path_factory):
    copy = tmp_path_factory.mktemp("book") / "html"
    shutil.copytree(html_root, copy)
    return copy


@pytest.fixture(scope="module")
def intact(browser, book_copy) -> set[str]:
    """The defect kinds the check reports on the intact page of the copy (once: each test breaks another page)."""
    return _check(browser, PAGE.html(book_copy))


def _wide_png() -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(24, 3), dpi=100)
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _figure_png(smallest_text_px: float | None, width_in: float = 6) -> str:
    """A cell's figure as a data URL: a PNG with the smallest-text record ``book_figures`` writes (None: without)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width_in, 3), dpi=100)
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    metadata = {} if smallest_text_px is None else {SMALLEST_TEXT_KEY: f"{smallest_text_px:.2f}"}
    fig.savefig(buf, format="png", metadata=metadata)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _cell_output(html: str) -> str:
    return f'<div class="cell_output docutils container"><div class="output">{html}</div></div>'


def _figure(caption: str) -> str:
    return (f'<figure><img alt="a figure" src="{_figure_png(12)}" style="width: 400px">'
            f'<figcaption><p>{caption}</p></figcaption></figure>')


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
    # a 1100 px figure with 12 px text shown 600 px wide: its text reads 6.5 px high
    "figure-text-small": _cell_output(f'<img alt="a figure" src="{_figure_png(12, 11)}" style="width: 600px">'),
    "figure-text-unknown": _cell_output(f'<img alt="a figure" src="{_figure_png(None)}">'),
    "output-overflow": _cell_output('<pre>' + "  ".join(f"column{i}" for i in range(40)) + "</pre>"),
    "table-overflow": ('<div style="overflow-x: auto"><table><tr>'
                       + "".join(f"<td>column{i}</td>" for i in range(40)) + "</tr></table></div>"),
    "printed-table": _cell_output("<pre>epsilon  sigma\n1.0      2.1\n2.0      1.2\n4.0      0.8</pre>"),
    "scaffolding": '<div class="cell_input"><div class="highlight"><pre># NBVAL_CHECK_OUTPUT\nx = 1</pre></div></div>',
    "bare-assert": '<div class="cell_input"><div class="highlight"><pre>x = 1\nassert x == 1</pre></div></div>',
    "caption-without-figure": ('<figure><p><em>Fig. 5, not run yet: MNIST/CNN.</em></p>'
                               '<figcaption><p>Fig. 1.9 Accuracy against p.</p></figcaption></figure>'),
    "search-boxes": '<button class="btn search-button-field">Search</button>',
    "reading-not-linked": "<p>The paper's threshold is read as DCSGD-7 says.</p>",
    "error-output": _cell_output('<div class="output traceback highlight-ipythontb notranslate"><div class="highlight">'
                                 '<pre>ParseSyntaxException: Unknown symbol: \\mathcal</pre></div></div>'),
    "duplicate-caption": _figure("Fig. 1.8 Accuracy against epochs.") + _figure("Fig. 1.9 Accuracy against epochs."),
}
# TeX in prose, every form: a lone dollar, a command, an inline or display delimiter, a $$ pair, a $...$ pair
RAW_TEX = [r"costs $5 with", r"where \sigma is", r"the ratio \(a/b\) is", r"\[ x \]", "$$x^2$$", "$x$ alone"]


@pytest.mark.parametrize("kind", sorted(INSERTED))
def test_a_broken_page_is_caught(kind, browser, book_copy, intact):
    page = PAGE.html(book_copy)
    intact = page.read_text()
    assert intact.count("</article>") == 1
    end = intact.rindex("</section>", 0, intact.index("</article>"))
    broken = page.with_name(f"broken_{kind.replace('-', '_')}.html")
    broken.write_text(intact[:end] + INSERTED[kind] + intact[end:])
    assert kind not in intact, f"the intact page already has a {kind} defect"
    assert kind in _check(browser, broken), f"a page with a {kind} defect passed the check"


# scaffolding a reader cannot use, each form: in the text, and in a cell's printed output
SCAFFOLDS = ["<p>This chapter executed in 412 s.</p>", "<p>Under the issue's protocol the grid is small.</p>",
             "<p>As <code>tests/test_tuning.py::test_claim</code> checks.</p>",
             _cell_output("<pre>every run spent the same epsilon: True</pre>"),
             _cell_output("<pre>written by commits: {'16f6b65ea8': 3921}</pre>"),
             _cell_output("<pre>mode 'render'; results under data/results/dcsgd; smoke False</pre>"),
             _cell_output("<pre>&lt;torch._C.Generator at 0x7ff2c432f0b0&gt;</pre>")]


@pytest.mark.parametrize("html", SCAFFOLDS)
def test_scaffolding_on_a_page_is_caught(html, browser, book_copy, intact):
    page = PAGE.html(book_copy)
    intact_html = page.read_text()
    end = intact_html.rindex("</section>", 0, intact_html.index("</article>"))
    broken = page.with_name("broken_scaffolding.html")
    broken.write_text(intact_html[:end] + html + intact_html[end:])
    assert "scaffolding" not in intact and "scaffolding" in _check(browser, broken), html


# defect kind -> HTML that a laptop's screen shows well and a phone's does not
ON_A_PHONE = {
    "page-overflow": '<div style="width: 600px">a block as wide as a laptop column</div>',
    "text-small": '<p style="font-size: 11px">A paragraph set small enough for a laptop and too small for a phone.</p>',
    "figure-downscaled": _cell_output(f'<img alt="a figure" src="{_figure_png(12)}" style="width: 200px">'),
}


@pytest.mark.parametrize("kind", sorted(ON_A_PHONE))
def test_a_page_that_only_a_phone_cannot_read_is_caught(kind, browser, book_copy):
    page = PAGE.html(book_copy)
    intact_html = page.read_text()
    end = intact_html.rindex("</section>", 0, intact_html.index("</article>"))
    broken = page.with_name(f"broken_phone_{kind.replace('-', '_')}.html")
    broken.write_text(intact_html[:end] + ON_A_PHONE[kind] + intact_html[end:])
    assert kind not in _check(browser, page, viewport=PHONE), f"the intact page already has a {kind} defect on a phone"
    assert kind in _check(browser, broken, viewport=PHONE), f"a page with a {kind} defect on a phone passed"


@pytest.mark.parametrize("text", RAW_TEX)
def test_tex_left_in_prose_is_caught(text, browser, book_copy):
    page = PAGE.html(book_copy)
    intact = page.read_text()
    end = intact.rindex("</section>", 0, intact.index("</article>"))
    broken = page.with_name("broken_tex.html")
    broken.write_text(intact[:end] + f"<p>Prose: {text} here.</p>" + intact[end:])
    assert "raw-math" in _check(browser, broken), f"TeX {text!r} left in prose passed the check"


def test_a_display_equation_wider_than_the_column_is_caught(browser, book_copy):
    """A display formula MathJax typesets wider than the column (the audit chapter's lost its end)."""
    page = PAGE.html(book_copy)
    intact = page.read_text()
    end = intact.rindex("</section>", 0, intact.index("</article>"))
    wide = "+".join(f"x_{{{i}}}" for i in range(120))
    broken = page.with_name("broken_equation.html")
    broken.write_text(intact[:end] + f'<div class="math notranslate nohighlight">\\[{wide}\\]</div>'
                      + intact[end:])
    assert "output-overflow" in _check(browser, broken)


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
    end = html.index("<section", start)  # the opening paragraphs, and the cells before the first section
    page.write_text(html[:start] + html[end:])
    assert "no-opening-paragraph" in _check(browser, page)


def test_a_page_written_without_its_outputs_is_caught(browser, book_copy, tmp_path, intact):
    # a notebook that stopped at the build's cell timeout is written without outputs, and the page still builds
    broken = shutil.copytree(book_copy, tmp_path / "html")
    page = PAGE.html(broken)
    page.write_text(page.read_text().replace('class="cell_output', 'class="no_output'))
    assert "missing-output" in _check(browser, page) and "missing-output" not in intact


def test_a_show_code_bar_with_nothing_under_it_is_caught(browser, book_copy, tmp_path, intact):
    # a hidden cell that prints nothing (imports, a check of the text's claims) under myst-nb's default label
    broken = shutil.copytree(book_copy, tmp_path / "html")
    page = PAGE.html(broken)
    html = page.read_text()
    end = html.rindex("</section>", 0, html.index("</article>"))
    bare = ('<div class="cell tag_hide-input docutils container"><details class="admonition hide above-input">'
            '<summary><p class="collapsed admonition-title">Show code cell source</p></summary>'
            '<div class="cell_input docutils container"><div class="highlight"><pre>import math</pre></div></div>'
            '</details></div>')
    page.write_text(html[:end] + bare + html[end:])
    assert "bare-toggle" in _check(browser, page) and "bare-toggle" not in intact


def test_a_page_that_grew_too_long_is_caught(browser, book_copy, tmp_path):
    def kinds(html):  # under the page's own name: its length is measured against its listing
        return {d.kind for d in browser.check_page(html, name=PAGE.docname)}

    broken = shutil.copytree(book_copy, tmp_path / "html")
    page = PAGE.html(broken)
    html = page.read_text()
    end = html.rindex("</section>", 0, html.index("</article>"))
    page.write_text(html[:end] + '<p style="height: 30000px">A very long page.</p>' + html[end:])
    assert "page-too-long" in kinds(page) and "page-too-long" not in kinds(PAGE.html(book_copy))


@pytest.mark.parametrize("name, screens, caught", [
    ("notebooks/a_new_chapter", 9.5, True),  # not listed: at most MAX_SCREENS
    ("notebooks/a_new_chapter", 7.0, False),
    ("notebooks/mnist5k_benchmark", LONG_PAGES["notebooks/mnist5k_benchmark"] + 0.5, True),  # grew past its listing
    ("notebooks/mnist5k_benchmark", 6.0, True),  # short now: it must leave the list
    ("book/api/repro", 120.0, False),  # the reference is not measured
])
def test_page_length_rule(name, screens, caught):
    found = []
    BookBrowser._check_length(name, screens, lambda kind, detail: found.append(kind))
    assert (found == ["page-too-long"]) is caught


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
