"""Every page of the built book, opened in headless Chromium with the network off, as a reader sees it.

One test per page of ``_toc.yml``: MathJax typeset every formula without error; no TeX, no pipe table left as
text; every image loaded, has alt text or a caption, and is shown large enough to read; no console error; every
internal link and anchor resolves; nothing is fetched from the network; visible code fits the text column; the
page opens with a paragraph; a notebook page has its Colab launch link (derived from ``_config.yml``) and working
download buttons. Each page is checked twice: on a laptop's screen (1440 px wide) and on a phone's (390 px, where code,
outputs, tables and formulas scroll sideways in their own boxes but the page itself must not). A full-page screenshot
of each page at each width goes to ``_build/screenshots/<width>/`` for a person to look through.
"""

from __future__ import annotations

import re

import pytest

from .bookcheck import PHONE, VIEWPORT, book_pages, colab_link
from .conftest import SCREENSHOTS

PAGES = book_pages()
SCREENS = {str(v["width"]): v for v in (VIEWPORT, PHONE)}


@pytest.mark.parametrize("width", SCREENS)
@pytest.mark.parametrize("page", PAGES, ids=[p.docname for p in PAGES])
def test_page_reads_as_it_should(page, width, browser, html_root):
    defects = browser.check_page(
        page.html(html_root), name=page.docname, viewport=SCREENS[width],
        notebook=page.source if page.is_notebook else None,
        colab=colab_link(page) if page.is_notebook else None,
        screenshot=SCREENSHOTS / width / f"{page.docname.replace('/', '__')}.png")
    assert not defects, f"{len(defects)} defect(s):\n" + "\n".join(map(str, defects))


def test_table_of_contents_reaches_every_chapter(browser, html_root):
    """From the landing page (``index.html`` redirects to the root chapter), the sidebar links every page."""
    linked = browser.sidebar_links(html_root / "index.html")
    missing = [p.docname for p in PAGES if p.html(html_root).resolve() not in linked]
    assert not missing, f"the table of contents does not reach: {missing}"


def test_search_finds_the_chapters_and_shows_excerpts(browser, html_root):
    """The search page (the sidebar's search box) lists the chapters that use a word, each with an excerpt around
    it: a reader of the published book, served over HTTP, gets both."""
    results = browser.search(html_root, "clipping")
    chapters = [r for r in results if r["href"].startswith("notebooks/")]
    assert len(chapters) >= 10, f"the search for 'clipping' found {len(chapters)} chapters: {results[:5]}"
    without = [r["title"] for r in chapters if "clip" not in r["excerpt"].lower()]
    assert not without, f"search results without an excerpt around the word: {without}"
    tex = [r["excerpt"] for r in results if re.search(r"\\[()\[\]]", r["excerpt"])]
    assert not tex, f"excerpts that show a formula's TeX source instead of the formula: {tex[:3]}"
