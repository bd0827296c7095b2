"""Open the built book's pages in a real headless Chromium, as a reader would, and list what is wrong with each.

``check_page`` returns a list of :class:`Defect` (kind, page, detail); an empty list is a page with no defect.
The kinds are stable names, so that a test can assert that a deliberately broken page is caught for the right
reason (``tests/browser/test_teeth.py``). The browser runs with the network off: any request that leaves the file
system is a defect, so the page must carry its own MathJax and fonts.
"""

from __future__ import annotations

import base64
import http.server
import io
import json
import os
import re
import shutil
import threading
import urllib.parse
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import yaml
from PIL import Image

from dpbook.repro.plotting import SMALLEST_TEXT_KEY

ROOT = Path(__file__).resolve().parents[2]
VIEWPORT = {"width": 1440, "height": 900}  # a laptop screen: the page must fit it without horizontal scrolling
PHONE = {"width": 390, "height": 844}  # a phone held upright (a reader on the go): the page must fit it too
MIN_FIGURE_SCALE = 0.7  # a static image shown below 70 % of its size has text too small to read
MIN_TEXT_PX = 9  # a figure's smallest text, as shown (its height in the PNG times the display scale)
MAX_VISIBLE_CODE_LINES = 30  # longer code is bookkeeping or plotting: hide it (cell tag hide-input); parameters exempt
MIN_PHONE_TEXT_PX = 14  # prose on a phone: below this a reader has to zoom to read a paragraph
MIN_OPENING_CHARS = 120  # the paragraph under the title that says what the reader learns

# Python escapes that eat the backslash of a LaTeX command in a normal (non-raw) string: "\rVert" becomes a carriage
# return and "Vert", "\frac" a form feed and "rac". In TeX, what is left after whitespace or a control character:
_ESCAPE_CASUALTY = re.compile(
    r"(?:^|[\s\x07\x08\x0b\x0c{(])(lpha|pprox|eta|ar|ig|oldsymbol|rac|abla|eq|orm|ho|ight|angle|au|heta|ext|imes"
    r"|ilde|Vert|ert|arepsilon|ec|ewline)(?![A-Za-z])"
)
_CONTROL = re.compile(r"[\x07\x08\x0b\x0c]")
_TEX_IN_PROSE = re.compile(r"\$|\\[A-Za-z]+|\\[()\[\]]")  # a dollar, \command, \( \) \[ \]
_ASSERT = re.compile(r"\s*assert\b")
_FIG_NUMBER = re.compile(r"^Fig\.\s*[\d.]+\s*")
# Scaffolding: what the build, the tests or the issue tracker left on a page, which a reader cannot use. Anywhere on a
# page: a live timer, the tracker's "issue", a pytest node id; in a cell's printed output: a smoke flag or the
# notebook's mode, a commit hash, a check printed as "...: True" (say it: dpbook.repro.confirm), an object's repr
# with its memory address (a set-up cell's last expression, such as torch.manual_seed(0)).
SCAFFOLDING = {
    "a live timer": re.compile(r"\b(?:chapter|page|notebook|section|cell)s? (?:executed|rendered|ran|took) in\b", re.I),
    "the tracker's issue": re.compile(r"\bthe issue(?:'s|’s)?\b|\bissue \d+\b", re.I),
    "a pytest node id": re.compile(r"\.py::\w+"),
}
SCAFFOLDING_IN_OUTPUT = {
    "a smoke flag": re.compile(r"\bsmoke\b", re.I),
    "the notebook's mode": re.compile(r"\b(?:render|run) mode\b|\bmode '(?:render|run)'", re.I),
    "a commit hash": re.compile(r"(?<![\w.])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w.])"),
    "a check printed as True or False": re.compile(r":\s*(?:True|False)\s*$", re.M),
    "an object's memory address": re.compile(r"<[\w.]+(?: object)? at 0x[0-9a-f]+>"),
}
#: The pages whose subject is the repository's tests and checks (they name test ids on purpose).
ABOUT_THE_TESTS = ("book/contributing", "book/hygiene")

#: A page read from top to bottom is at most this many screens long (VIEWPORT; d2l's pages run 3 to 6): a longer
#: chapter goes on over further pages (its sections in _toc.yml, as most chapters of the book do).
MAX_SCREENS = 8
#: The reference pages, looked up rather than read through (the notation, the costs, how to run and contribute, a
#: paper's readings), and the chapter pages still longer than MAX_SCREENS, each with the screens it may take: its
#: length when listed, rounded up to the next half screen. A listed page may not grow past it, a page not listed may
#: not run past MAX_SCREENS, and a page that has come down to MAX_SCREENS must leave the list, which only shrinks.
#: The API reference is not measured.
REFERENCE_PAGES = {
    "book/notation": 16.5, "book/costs": 13, "book/contributing": 10.5, "book/running": 9, "book/readings_dcsgd": 9,
}
LONG_PAGES = {
    **REFERENCE_PAGES,
    "notebooks/convergence_bounds": 8.5, "notebooks/dcsgd_privacy_calibration": 8.5,
    "notebooks/dcsgd_synthetic_norms": 8.5, "notebooks/dpdr_accounting_gdr": 8.5,
    "notebooks/dpdr_in_training_compared": 8.5, "notebooks/dpdr_why_decompose_step": 8.5,
    "notebooks/mnist5k_benchmark": 8.5, "notebooks/psasc_privacy_measured": 8.5,
}
_PIPE_TABLE = re.compile(r"\|\s*:?-{3,}:?\s*\||^\s*\|.*\|.*\|\s*$", re.M)


@dataclass(frozen=True)
class Defect:
    kind: str
    page: str
    detail: str

    def __str__(self) -> str:
        return f"{self.page}: {self.kind}: {self.detail}"


@dataclass(frozen=True)
class Page:
    """One page of the book: its document name in ``_toc.yml`` and its source file."""

    docname: str
    source: Path

    @property
    def is_notebook(self) -> bool:
        return self.source.suffix == ".ipynb"

    def html(self, html_root: Path) -> Path:
        return html_root / f"{self.docname}.html"


def find_chromium() -> str:
    """The system Chromium (Debian's ``chromium`` package), or the one named by ``DPBOOK_CHROMIUM``."""
    for candidate in (os.environ.get("DPBOOK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (path := shutil.which(candidate)):
            return path
    raise FileNotFoundError(
        "the browser tests need Chromium and found none on PATH: install it with 'apt-get install chromium' "
        "(Debian/Ubuntu; '.ci/run' does it), or point DPBOOK_CHROMIUM at a Chromium or Chrome executable"
    )


def book_pages(root: Path = ROOT) -> list[Page]:
    """Every page ``_toc.yml`` lists, in reading order: chapters and their sections (the API reference's pages)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())

    def files(entries: list[dict]) -> list[str]:
        return [name for e in entries for name in [e["file"], *files(e.get("sections", []))]]

    names = [toc["root"]] + files([ch for part in toc.get("parts", []) for ch in part["chapters"]])
    pages = []
    for name in names:
        sources = [root / f"{name}{ext}" for ext in (".ipynb", ".md")]
        pages.append(Page(name, next(s for s in sources if s.exists())))
    return pages


def colab_link(page: Page, root: Path = ROOT) -> str:
    """The Colab launch URL the book must show, derived from ``_config.yml`` exactly as Jupyter Book does."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    repo, launch = config["repository"], config["launch_buttons"]
    owner_repo = urlsplit(repo["url"]).path.strip("/")
    path = "/".join(p for p in (repo.get("path_to_book", "").strip("/"), f"{page.docname}.ipynb") if p)
    return f"{launch['colab_url'].rstrip('/')}/github/{owner_repo}/blob/{repo.get('branch', 'main')}/{path}"


def _image_info(url: str) -> dict:
    """The text chunks of a PNG (``file:`` or ``data:`` URL); {} for anything that is not a readable PNG."""
    try:
        if url.startswith("data:"):
            data = base64.b64decode(url.split(",", 1)[1])
        else:
            target = _local_target(url)
            data = target[0].read_bytes() if target else b""
        with Image.open(io.BytesIO(data)) as image:
            return dict(getattr(image, "text", {}))
    except (OSError, ValueError):
        return {}


@lru_cache(maxsize=None)
def _ids(html_file: Path) -> frozenset[str]:
    text = html_file.read_text(errors="replace")
    return frozenset(re.findall(r'\s(?:id|name)="([^"]+)"', text))


def _local_target(href: str) -> tuple[Path, str] | None:
    parts = urlsplit(href)
    if parts.scheme != "file":
        return None
    return Path(unquote(parts.path)), unquote(parts.fragment)


_PAGE_FACTS = r"""
() => {
  const main = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  // Chromium keeps layout boxes inside a closed <details> (its content is only content-visibility: hidden), so
  // a box is not enough: the element must also lie outside every closed <details> ('Show code' toggles).
  const visible = el => !!(el.offsetParent || el.getClientRects().length)
                        && !(el.parentElement && el.parentElement.closest('details:not([open])'));
  // one walk over the page's text, sorted three ways: prose outside code and formulas (TeX left in it); what a
  // reader reads, prose and printed outputs, not code, formulas or what a closed toggle hides (scaffolding); a
  // reading's id cited in the text and not linked to its row of the Readings chapter (book/_ext/page_fixes.py)
  const skip = 'pre, code, script, style, textarea, mjx-container, .math, .highlight, mjx-assistive-mml';
  const hidden = '.cell_input, script, style, mjx-container, mjx-assistive-mml, details:not([open])';
  const readingId = /\b(?:DCSGD|DPDR|PSASC)-\d+\b/;
  const texts = [], readerTexts = [], unlinkedReadings = [];
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement, text = n.textContent;
    if (!text.trim()) continue;
    if (!p.closest(skip)) texts.push(text);
    if (!p.closest(hidden)) readerTexts.push({text, output: !!p.closest('.cell_output pre')});
    const cell = p.closest('td');
    const ownId = cell && !cell.previousElementSibling && readingId.test(cell.textContent)
                  && cell.textContent.trim() === cell.textContent.trim().match(readingId)[0];
    if (readingId.test(text) && !ownId && !p.closest('a, code, pre, script, style, mjx-container, h1, h2, h3, h4'))
      unlinkedReadings.push(text.trim().slice(0, 80));
  }
  const mathItems = (window.MathJax && MathJax.startup && MathJax.startup.document)
      ? Array.from(MathJax.startup.document.math).map(m => m.math) : [];
  const imgs = Array.from(main.querySelectorAll('img')).map(img => {
    const fig = img.closest('figure');
    return {src: img.getAttribute('src') || '', url: img.src, alt: img.getAttribute('alt') || '',
            complete: img.complete, natural: img.naturalWidth, shown: img.getBoundingClientRect().width,
            visible: visible(img), output: !!img.closest('.cell_output'),
            caption: fig && fig.querySelector('figcaption') ? fig.querySelector('figcaption').textContent.trim() : ''};
  });
  const code = Array.from(main.querySelectorAll('div.cell_input pre, div.highlight pre'))
      .filter(pre => !pre.closest('.cell_output') && visible(pre))
      .map(pre => ({lines: pre.textContent.replace(/\n$/, '').split('\n').length,
                    first: pre.textContent.split('\n')[0].slice(0, 80), text: pre.textContent,
                    parameters: !!pre.closest('.tag_parameters'),
                    overflow: pre.scrollWidth - pre.clientWidth}));
  const box = main.getBoundingClientRect();
  const tables = Array.from(main.querySelectorAll('table')).map(t => {
    let scroller = false;
    for (let el = t.parentElement; el && el !== main; el = el.parentElement) {
      const ox = getComputedStyle(el).overflowX;
      if ((ox === 'auto' || ox === 'scroll') && el.getBoundingClientRect().right <= box.right + 1) scroller = true;
    }
    return {right: t.getBoundingClientRect().right, scroller, head: t.textContent.trim().slice(0, 60)};
  });
  // what runs past the column: a printed output cut off inside its box (it scrolls), or any output, table or
  // display equation whose right edge lies past the column's
  const overflowing = [];
  for (const pre of main.querySelectorAll('.cell_output pre')) {
    if (visible(pre) && pre.scrollWidth > pre.clientWidth + 1)
      overflowing.push(`printed output ${pre.scrollWidth} px wide in a ${pre.clientWidth} px box: `
                       + JSON.stringify(pre.textContent.split('\n')[0].slice(0, 60)));
  }
  // (tables: see 'tables'; a figure of a cell tagged full-width is meant to reach into the margin)
  for (const el of main.querySelectorAll('.cell_output img, mjx-container[display="true"]')) {
    const right = el.getBoundingClientRect().right, parent = el.parentElement;
    if (!visible(el) || el.closest('.tag_full-width')) continue;
    if (right > box.right + 1 || parent.scrollWidth > parent.clientWidth + 1 || el.scrollWidth > el.clientWidth + 1)
      overflowing.push(`${el.tagName.toLowerCase()} reaching ${right.toFixed(0)} px (the column ends at `
                       + `${box.right.toFixed(0)} px): ` + JSON.stringify((el.getAttribute('alt') || el.textContent
                       || '').trim().slice(0, 60)));
  }
  // a table printed as text: three or more lines of a printed output with columns (two spaces or more between words)
  const printedTables = Array.from(main.querySelectorAll('.cell_output pre')).filter(visible)
      .filter(pre => pre.textContent.split('\n').filter(l => /\S {2,}\S/.test(l)).length >= 3)
      .map(pre => pre.textContent.trim().split('\n')[0].slice(0, 80));
  const captions = Array.from(main.querySelectorAll('figcaption')).map(c => c.textContent.trim());
  // a code cell that prints, displays or shows a figure at its top level, with no output under it: the page of a
  // notebook that did not finish executing (show_panels draws nothing until a run has results, so it is not one)
  const silentCells = Array.from(main.querySelectorAll('div.cell'))
      .filter(c => !c.querySelector('.cell_output'))
      .map(c => c.querySelector('.cell_input pre'))
      .filter(pre => pre && /^(print|display|plt\.show)\(/m.test(pre.textContent))
      .map(pre => pre.textContent.split('\n')[0].slice(0, 80));
  // a 'Show code cell source' bar with nothing under it: the reader opens it to find out what it is for
  const bareToggles = Array.from(main.querySelectorAll('div.cell'))
      .filter(c => !c.querySelector('.cell_output'))
      .filter(c => (c.querySelector('details.hide > summary .collapsed') || {}).textContent === 'Show code cell source')
      .map(c => (c.querySelector('.cell_input pre') || {textContent: ''}).textContent.split('\n')[0].slice(0, 80));
  // a cell that shows an error: it raised (the build would have failed) or a display failed after it ran
  const errorOutputs = Array.from(main.querySelectorAll('.cell_output .output.traceback, .cell_output .output.error'))
      .map(el => el.textContent.trim().split('\n').filter(l => l.trim()).slice(-1)[0] || '');
  // a caption around no picture: a captioned cell that showed text or a table instead of its figure
  const captionsWithoutFigure = Array.from(main.querySelectorAll('figure'))
      .filter(f => f.querySelector('figcaption') && !f.querySelector('img, svg, canvas, object'))
      .map(f => f.querySelector('figcaption').textContent.trim().slice(0, 80));
  const h1 = main.querySelector('h1');
  let opening = '';
  if (h1) {
    let el = h1.nextElementSibling;
    // the chapter's Colab link (book/_ext/page_fixes.py) sits between the title and the opening paragraph
    while (el && (el.tagName === 'SPAN' || el.classList.contains('colab-link')))
      el = el.nextElementSibling;
    if (el && el.tagName === 'DIV' && el.classList.contains('cell') && el.classList.contains('tag_remove-cell'))
      el = el.nextElementSibling;
    opening = el ? (el.tagName === 'P' ? el.textContent.trim()
                                       : `<${el.tagName.toLowerCase()} class="${el.className}">`) : '';
  }
  return {
    texts, mathItems, readerTexts, unlinkedReadings,
    unTypeset: Array.from(main.querySelectorAll('.math'))
        .filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80)),
    mathErrors: Array.from(document.querySelectorAll('mjx-merror'))
        .map(e => e.getAttribute('data-mjx-error') || e.textContent),
    paragraphs: Array.from(main.querySelectorAll('p')).map(p => p.textContent),
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
    imgs, code, tables, mainRight: box.right, opening, overflowing, captions, captionsWithoutFigure, printedTables,
    silentCells, bareToggles, errorOutputs,
    searchBoxes: Array.from(document.querySelectorAll('.search-button-field')).filter(visible).length,
    searchButtons: Array.from(document.querySelectorAll('button.search-button')).filter(visible).length,
    proseFontPx: Math.min(...Array.from(main.querySelectorAll('p, li')).filter(visible)
                                .map(el => parseFloat(getComputedStyle(el).fontSize))),
    viewportMeta: Array.from(document.querySelectorAll('meta[name="viewport"]')).map(m => m.content),
    columnWidth: Math.max(0, ...Array.from(main.querySelectorAll('p')).filter(visible).map(p => p.clientWidth)),
    pageWidth: document.documentElement.scrollWidth, viewWidth: window.innerWidth, pageText: main.innerText,
    pageHeight: document.documentElement.scrollHeight,
  };
}
"""

_WAIT_MATHJAX = r"""
async () => {
  if (!document.querySelector('script[src*="mathjax"]')) return 'none';
  for (let i = 0; i < 400 && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++)
    await new Promise(r => setTimeout(r, 25));
  if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return 'not loaded';
  await MathJax.startup.promise;
  return 'done';
}
"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the test's output, not a request log
        pass


#: Playwright's limit on each wait, in ms. Its default, 30 s, was exceeded by the full-page screenshots of the two
#: longest API pages on a 2-core machine with other work beside it; a page's checks take a few seconds on a quiet
#: one, so three minutes leaves room for a machine loaded several times over, and still stops a page that hangs.
TIMEOUT_MS = 180_000


class BookBrowser:
    """A headless Chromium with the network off, opening one page at a time."""

    def __init__(self, playwright, executable: str | None = None):
        self.browser = playwright.chromium.launch(executable_path=executable or find_chromium(),
                                                  args=["--no-sandbox", "--disable-gpu"])

    def close(self) -> None:
        self.browser.close()

    def _context(self, **options):
        """A new browser context whose every wait (a page load, a selector, a full-page screenshot) may take
        :data:`TIMEOUT_MS`."""
        context = self.browser.new_context(**options)
        context.set_default_timeout(TIMEOUT_MS)
        return context

    def sidebar_links(self, html_file: Path) -> set[Path]:
        """The files the book's navigation sidebar links to, on the page ``html_file`` leads to (redirects followed)."""
        context = self._context(viewport=VIEWPORT)
        try:
            page = context.new_page()
            page.goto(html_file.resolve().as_uri(), wait_until="load")
            page.wait_for_selector("nav.bd-docs-nav", state="attached")
            hrefs = page.eval_on_selector_all("nav.bd-docs-nav a[href]", "links => links.map(a => a.href)")
            here = _local_target(page.url)
        finally:
            context.close()
        targets = {t[0].resolve() for t in map(_local_target, hrefs) if t}
        return targets | ({here[0].resolve()} if here else set())

    def search(self, html_root: Path, query: str) -> list[dict]:
        """The results of the book's search page for ``query``, as a reader of the published book gets them: the
        book served over HTTP (from localhost; nothing else is reachable), since a page's excerpt is fetched from the
        page itself, which a browser refuses for ``file:`` pages. Each result: its title, link and excerpt."""
        handler = partial(_QuietHandler, directory=str(html_root))
        with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
            threading.Thread(target=server.serve_forever, daemon=True).start()
            context = self._context(viewport=VIEWPORT)
            try:
                origin = f"http://127.0.0.1:{server.server_address[1]}/"
                context.route("**/*", lambda r: r.continue_() if r.request.url.startswith(origin) else r.abort())
                page = context.new_page()
                page.goto(f"{origin}search.html?q={urllib.parse.quote(query)}", wait_until="load")
                page.wait_for_function("() => /Search finished|did not match/.test("
                                       "document.querySelector('#search-results p.search-summary')?.textContent || '')")
                page.wait_for_load_state("networkidle")
                return page.eval_on_selector_all(
                    "#search-results li", "items => items.map(li => ({title: li.querySelector('a').textContent, "
                    "href: li.querySelector('a').getAttribute('href'), "
                    "excerpt: (li.querySelector('p.context') || {}).textContent || ''}))")
            finally:
                context.close()
                server.shutdown()

    def check_page(self, html_file: Path, *, name: str, notebook: Path | None = None, colab: str | None = None,
                   screenshot: Path | None = None, viewport: dict = VIEWPORT) -> list[Defect]:
        """Open ``html_file`` and return its defects; for a notebook page also check the Colab launch link
        (``colab``) and the download buttons (the ``.ipynb`` download must be the notebook ``notebook``)."""
        defects: list[Defect] = []

        def add(kind: str, detail: str) -> None:
            defects.append(Defect(kind, name, detail))

        context = self._context(viewport=viewport, accept_downloads=True)
        try:
            def route(r):
                url = r.request.url
                if url.split(":", 1)[0] in ("file", "data", "blob", "about"):
                    r.continue_()
                else:
                    add("network-request", f"the page requested {url} (the book must work offline)")
                    r.abort()

            context.set_offline(True)
            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: m.type == "error" and add("console-error", m.text))
            page.on("pageerror", lambda e: add("console-error", str(e)))
            page.on("requestfailed",
                    lambda r: r.url.startswith("file:") and add("request-failed", f"{r.url}: {r.failure}"))
            page.goto(html_file.resolve().as_uri(), wait_until="load")
            state = page.evaluate(_WAIT_MATHJAX)
            if state == "not loaded":
                add("math-error", "MathJax did not load")
            elif state == "none" and page.locator(".math").count():
                add("math-error", "the page has formulas but no MathJax script")
            page.wait_for_timeout(100)
            facts = page.evaluate(_PAGE_FACTS)
            self._check_math(facts, add)
            self._check_text(facts, add)
            if name not in ABOUT_THE_TESTS:
                self._check_scaffolding(facts, add)
            self._check_captions(facts, add)
            self._check_links(facts, html_file, add)
            if viewport["width"] < VIEWPORT["width"] / 2:  # a phone
                self._check_phone(facts, add)
                if colab is not None and not page.locator(f'main p.colab-link a[href="{colab}"]').first.is_visible():
                    add("colab-missing", f"no visible link to {colab} under the chapter's title")
            else:
                self._check_images(facts, add)
                self._check_layout(facts, add)
                self._check_length(name, facts["pageHeight"] / viewport["height"], add)
                if notebook is not None:
                    self._check_buttons(page, notebook, colab, add)
            if screenshot is not None:
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            context.close()
        return defects

    @staticmethod
    def _check_math(facts, add) -> None:
        for message in facts["mathErrors"]:
            add("math-error", f"MathJax could not typeset a formula: {message}")
        for source in facts["unTypeset"]:
            add("raw-math", f"a formula was not typeset: {source!r}")
        for tex in facts["mathItems"]:
            if _CONTROL.search(tex) or _ESCAPE_CASUALTY.search(tex):
                add("escape-casualty", f"a LaTeX command lost its backslash to a Python escape (use a raw string "
                                       f"r'...'): {tex[:120]!r}")

    @staticmethod
    def _check_text(facts, add) -> None:
        for text in facts["texts"]:  # prose, outside code and typeset maths
            if found := _TEX_IN_PROSE.search(text):
                add("raw-math", f"TeX left in the text ({found.group()!r}): {text.strip()[:100]!r}")
        for text in facts["unlinkedReadings"]:
            add("reading-not-linked", f"a reading's id is not a link to its row of the Readings chapter "
                                      f"(book/_ext/page_fixes.py): {text!r}")
        for marker in (str(ROOT), "site-packages"):
            if marker in facts["pageText"]:
                at = facts["pageText"].index(marker)
                add("machine-path", f"the building machine's path {marker!r} is on the page (print paths with "
                                    f"results.shown_path): {facts['pageText'][max(0, at - 60):at + 60]!r}")
        for text in facts["paragraphs"]:
            if _PIPE_TABLE.search(text):
                add("pipe-table", f"a Markdown table shown as a paragraph of pipes: {text.strip()[:100]!r}")

    @staticmethod
    def _check_scaffolding(facts, add) -> None:
        for item in facts["readerTexts"]:
            rules = {**SCAFFOLDING, **(SCAFFOLDING_IN_OUTPUT if item["output"] else {})}
            for what, pattern in rules.items():
                if found := pattern.search(item["text"]):
                    where = "printed" if item["output"] else "in the text"
                    around = item["text"][max(0, found.start() - 50):found.end() + 30].strip()
                    add("scaffolding", f"{what} {where}: {around!r}")

    @staticmethod
    def _check_images(facts, add) -> None:
        for img in facts["imgs"]:
            src = img["src"]
            if not img["complete"] or img["natural"] == 0:
                add("image-not-loaded", f"image {src} did not load")
                continue
            alt = img["alt"].strip()
            if not img["caption"] and (not alt or alt == src or alt.endswith(Path(src).name)):
                add("image-no-alt", f"image {src} has neither alt text nor a caption")
            if img["output"] and img["visible"]:  # a figure a cell drew: its PNG says how small its text is
                smallest = _image_info(img["url"]).get(SMALLEST_TEXT_KEY)
                if smallest is None:
                    add("figure-text-unknown", f"figure {src} does not record its smallest text (its notebook's "
                                               f"set-up cell calls dpbook.repro.plotting.book_figures())")
                elif smallest != "none" and (shown := float(smallest) * img["shown"] / img["natural"]) < MIN_TEXT_PX:
                    add("figure-text-small", f"figure {src}: its smallest text is {shown:.1f} px high as shown "
                                             f"({smallest} px in a {img['natural']} px image shown at "
                                             f"{img['shown']:.0f} px); {MIN_TEXT_PX} px or more reads: larger "
                                             f"fonts, fewer panels per row, or a narrower figure")
            elif img["visible"] and img["shown"] < MIN_FIGURE_SCALE * img["natural"]:
                add("figure-downscaled", f"image {src} is {img['natural']} px wide but shown at {img['shown']:.0f} px "
                                         f"({img['shown'] / img['natural']:.0%}): its text is too small to read; make "
                                         f"the figure narrower (stack the panels) or the cell full-width")

    @staticmethod
    def _check_length(name: str, screens: float, add) -> None:
        if name.startswith("book/api/"):
            return
        allowed = LONG_PAGES.get(name, MAX_SCREENS)
        if screens > allowed:
            add("page-too-long", f"the page is {screens:.1f} screens long ({allowed} allowed): split the chapter over "
                                 f"further pages (sections in _toc.yml)" if name not in LONG_PAGES else
                                 f"the page is {screens:.1f} screens long, longer than the {allowed} it was listed "
                                 f"with in LONG_PAGES: "
                                 + ("shorten it" if name in REFERENCE_PAGES else "split it rather than let it grow"))
        elif name in LONG_PAGES and screens <= MAX_SCREENS:
            add("page-too-long", f"the page is {screens:.1f} screens long now: remove it from LONG_PAGES")

    @staticmethod
    def _check_captions(facts, add) -> None:
        seen = set()
        for caption in facts["captions"]:
            text = _FIG_NUMBER.sub("", caption)
            if text in seen:
                add("duplicate-caption", f"two figures of the page have the caption {text[:100]!r}")
            seen.add(text)
        for caption in facts["captionsWithoutFigure"]:
            add("caption-without-figure", f"a figure caption with no picture above it (a captioned cell showed "
                                          f"something else: show it in a cell of its own): {caption!r}")
        for last in facts["errorOutputs"]:
            add("error-output", f"a cell shows an error instead of its output (a figure or display that failed; "
                                f"tools/book_cache.py --execute names the cell): {last[:120]!r}")
        for first in facts["bareToggles"]:
            add("bare-toggle", f"a 'Show code cell source' bar with nothing under it: say what it hides (the cell's "
                               f"metadata mystnb.code_prompt_show, e.g. 'Show the imports') or remove its input: "
                               f"{first!r}")
        for first in facts["silentCells"]:
            add("missing-output", f"a cell that prints or draws shows no output (did the notebook fail to execute? "
                                  f"make book reports why): {first!r}")

    @staticmethod
    def _check_links(facts, html_file: Path, add) -> None:
        here = html_file.resolve()
        for href in facts["links"]:
            target = _local_target(href)
            if target is None:
                continue
            path, fragment = target
            if path.is_dir():
                path = path / "index.html"
            if not path.exists():
                add("dead-link", f"link to {href} (no such file)")
            elif fragment and path.suffix == ".html" and fragment not in _ids(path):
                where = "this page" if path == here else path.name
                add("dead-anchor", f"link to #{fragment}: no such anchor in {where}")

    @staticmethod
    def _check_layout(facts, add) -> None:
        if facts["pageWidth"] > facts["viewWidth"] + 1:
            add("page-overflow", f"the page is {facts['pageWidth']} px wide in a {facts['viewWidth']} px window")
        for table in facts["tables"]:
            if table["right"] > facts["mainRight"] + 1:
                add("table-overflow", f"a table runs past the text column{' (behind a scroll bar)' * table['scroller']}"
                                      f": make it narrower or split its columns: {table['head']!r}")
        for first in facts["printedTables"]:
            add("printed-table", f"a table printed as text (show it with IPython.display.Markdown and "
                                 f"results.markdown_table): {first!r}")
        for what in facts["overflowing"]:
            add("output-overflow", f"cut off at the column's right edge: {what}")
        for block in facts["code"]:
            if block["overflow"] > 1:
                add("code-overflow", f"visible code runs off the right edge: {block['first']!r}")
            if "NBVAL_" in block["text"]:
                add("scaffolding", f"an nbval marker in visible code (use nbval's cell tags): {block['first']!r}")
            if (line := next((x for x in block["text"].splitlines() if _ASSERT.match(x)), None)) is not None:
                add("bare-assert", f"an assert in visible code (move it to the library or a hidden cell, tag "
                                   f"hide-input): {line.strip()[:80]!r}")
            if block["lines"] > MAX_VISIBLE_CODE_LINES and not block["parameters"]:
                add("code-too-long", f"{block['lines']} lines of visible code (more than {MAX_VISIBLE_CODE_LINES}; "
                                     f"hide bookkeeping and plotting with the cell tag hide-input): {block['first']!r}")
        if facts["searchBoxes"] != 1:
            add("search-boxes", f"{facts['searchBoxes']} search boxes on the page (one, the sidebar's: "
                                f"html_theme_options.navbar_persistent in _config.yml)")
        if len(facts["opening"]) < MIN_OPENING_CHARS or facts["opening"].startswith("<"):
            add("no-opening-paragraph", f"the page does not open with a paragraph saying what the reader learns: "
                                        f"after the title comes {facts['opening'][:80]!r}")

    @staticmethod
    def _check_phone(facts, add) -> None:
        """A page on a phone: nothing but a code block, a printed output, a table or a formula may be wider than the
        screen (each of those scrolls sideways in its own box), the text is large enough to read, a figure is as wide
        as the column lets it be and the reader can zoom into it, and the search is one tap away."""
        if facts["pageWidth"] > facts["viewWidth"] + 1:
            add("page-overflow", f"the page is {facts['pageWidth']} px wide on a {facts['viewWidth']} px phone screen")
        if facts["proseFontPx"] < MIN_PHONE_TEXT_PX:
            add("text-small", f"text set at {facts['proseFontPx']} px on a phone ({MIN_PHONE_TEXT_PX} px or more "
                              f"reads)")
        if any(re.search(r"user-scalable\s*=\s*(?:no|0)|maximum-scale\s*=\s*1(?:\.0*)?\b", m)
               for m in facts["viewportMeta"]):
            add("no-zoom", f"the page forbids zooming ({facts['viewportMeta']}): a figure's text cannot be enlarged")
        for img in facts["imgs"]:
            # (a figure's frame takes a few pixels of the column)
            if img["visible"] and img["natural"] and img["shown"] < 0.9 * min(img["natural"], facts["columnWidth"]):
                add("figure-downscaled", f"image {img['src']} is shown {img['shown']:.0f} px wide where the column "
                                         f"has {facts['columnWidth']:.0f} px (and the image {img['natural']} px)")
        if facts["searchButtons"] + facts["searchBoxes"] < 1:
            add("search-boxes", "no search button on a phone screen")

    @staticmethod
    def _check_buttons(page, notebook: Path, colab: str | None, add) -> None:
        launch = page.locator(".dropdown-launch-buttons button.dropdown-toggle")
        if colab is not None and not page.locator(f'main p.colab-link a[href="{colab}"]').first.is_visible():
            add("colab-missing", f"no visible link to {colab} under the chapter's title (book/_ext/page_fixes.py)")
        if colab is not None:
            link = page.locator(f'a[href="{colab}"]')
            if launch.count() == 0 or link.count() == 0:
                add("colab-missing", f"no Colab launch button to {colab}")
            else:
                launch.first.click()
                if not link.first.is_visible():
                    add("colab-missing", "the Colab launch button does not show when the launch menu is opened")
                page.keyboard.press("Escape")
        menu = page.locator(".dropdown-download-buttons button.dropdown-toggle")
        source = page.locator("a.btn-download-source-button")
        if menu.count() == 0 or source.count() == 0:
            add("download-broken", "no download button for the notebook")
            return
        menu.first.click()
        with page.context.expect_page() as popup:
            source.first.click()
        downloaded = popup.value
        downloaded.wait_for_load_state()
        target = _local_target(downloaded.url)
        try:
            got = nbformat.reads(target[0].read_text(), as_version=4) if target and target[0].exists() else None
        except (json.JSONDecodeError, nbformat.reader.NotJSONError):
            got = None
        if got is None or got.cells != nbformat.read(notebook, as_version=4).cells:
            add("download-broken", f"the .ipynb download ({downloaded.url}) is not the notebook {notebook.name}")
        downloaded.close()
        page.evaluate("() => { window.__printed = false; window.print = () => { window.__printed = true; }; }")
        menu.first.click()
        page.locator("button.btn-download-pdf-button").first.click()
        if not page.evaluate("() => window.__printed"):
            add("download-broken", "the .pdf button does not open the print dialog")
