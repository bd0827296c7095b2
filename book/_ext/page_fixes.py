"""Sphinx extension: what every page of the book needs beyond the theme's defaults.

- sphinx-thebe registers its inline configuration script (``const THEBE_JS_URL = ...``) once per build of the
  environment; in Jupyter Book's build it lands twice on every page and the browser reports "Identifier
  'THEBE_JS_URL' has already been declared" (sphinx-togglebutton's selector is doubled the same way). Each
  distinct script is kept once, in its first position.
- The search page's excerpts (``_static/search_excerpts.js``) leave out the print-only table of contents and show
  their formulas typeset: the page loads the book's MathJax, which Sphinx gives only to pages with formulas.
- A chapter (a notebook page) opens, under its title, with a link that runs it on Colab: the theme's launch button
  hides the same link in a menu. The link is the theme's, built from ``_config.yml``'s repository and
  ``launch_buttons.colab_url``.
- A reading's id (``DCSGD-17``, ``DPDR-20``, ``PSASC-13``) links, wherever the text cites it, to its row of the
  Readings chapter, and each row of that chapter's tables is the anchor of its id.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from docutils import nodes

#: The text of a chapter's Colab link.
COLAB_TEXT = "Open this page in Colab"


def _script_key(script) -> tuple:
    # An inline script is registered with filename None by one extension and '' by another: the same script.
    return (getattr(script, "filename", script) or None, tuple(sorted(getattr(script, "attributes", {}).items())))


def _unique_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, unique = set(), []
    for script in scripts:
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    # In place: the list is the builder's own, to which later handlers (sphinx.ext.mathjax) still add.
    scripts[:] = unique


def _search_page_scripts(app, pagename, templatename, context, doctree) -> None:
    if pagename == "search" and app.builder.format == "html":
        app.builder.add_js_file(app.config.mathjax_path, defer="defer")
        app.builder.add_js_file("search_excerpts.js", defer="defer")


def colab_url(theme_options: dict, docname: str) -> str | None:
    """The Colab URL of the notebook ``docname`` as the theme's launch button builds it (None: no Colab button)."""
    colab = theme_options.get("launch_buttons", {}).get("colab_url", "").strip("/")
    repository = theme_options.get("repository_url", "").strip("/")
    if not (colab and repository):
        return None
    owner_repo = urlsplit(repository).path.strip("/")
    path = "/".join(p for p in (theme_options.get("path_to_docs", "").strip("/"), f"{docname}.ipynb") if p)
    return f"{colab}/github/{owner_repo}/blob/{theme_options.get('repository_branch', 'main')}/{path}"


def _colab_link(app, doctree, docname) -> None:
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    url = colab_url(app.config.html_theme_options, docname)
    section = next(iter(doctree.findall(nodes.section)), None)
    if url is None or section is None or not isinstance(section[0], nodes.title):
        return
    link = nodes.paragraph(classes=["colab-link"])
    link += nodes.reference("", COLAB_TEXT, refuri=url, internal=False)
    section.insert(1, link)


#: The Readings chapter's page of each paper, whose table rows define that paper's ids; a reading's id as cited.
READING_PAGES = {"DCSGD": "book/readings_dcsgd", "DPDR": "book/readings_dpdr", "PSASC": "book/readings_psasc"}
READING_ID = re.compile(r"\b(?:DCSGD|DPDR|PSASC)-\d+\b")
#: Text inside these is not prose: code, a formula, a link already, a title.
_NOT_PROSE = (nodes.literal, nodes.literal_block, nodes.reference, nodes.math, nodes.math_block, nodes.raw,
              nodes.title, nodes.target)


def reading_anchor(reading: str) -> str:
    """The anchor of a reading's row in the Readings chapter.

    >>> reading_anchor("DCSGD-17")
    'dcsgd-17'
    """
    return reading.lower()


def _in(node, kinds) -> bool:
    while node is not None:
        if isinstance(node, kinds):
            return True
        node = node.parent
    return False


def _readings_links(app, doctree, docname) -> None:
    if app.builder.format != "html":
        return
    own = docname in READING_PAGES.values()
    if own:  # each row whose first cell is an id is that id's anchor
        for row in doctree.findall(nodes.row):
            first = row.children[0].astext().strip() if row.children else ""
            if READING_ID.fullmatch(first):
                row["ids"].append(reading_anchor(first))
    pages = {prefix: "" if docname == page else app.builder.get_relative_uri(docname, page)
             for prefix, page in READING_PAGES.items()}
    for text in list(doctree.findall(nodes.Text)):
        if text.parent is None or _in(text.parent, _NOT_PROSE) or not READING_ID.search(text):
            continue
        if own and _in(text.parent, nodes.entry) and READING_ID.fullmatch(text.astext().strip()):
            continue  # the id cell of its own row
        pieces, at = [], 0
        for match in READING_ID.finditer(text):
            pieces.append(nodes.Text(text[at:match.start()]))
            pieces.append(nodes.reference(match.group(), match.group(), internal=True, classes=["reading-link"],
                                          refuri=f"{pages[match.group().split('-')[0]]}#{reading_anchor(match.group())}"))
            at = match.end()
        pieces.append(nodes.Text(text[at:]))
        text.parent.replace(text, [p for p in pieces if not isinstance(p, nodes.Text) or p.astext()])


def setup(app):
    app.connect("doctree-resolved", _colab_link)
    app.connect("doctree-resolved", _readings_links)
    app.connect("html-page-context", _unique_scripts, priority=100)  # first: a handler may end the event
    app.connect("html-page-context", _search_page_scripts)
    # env_version: a change of what this extension does to the pages rebuilds every page (bump it with the change)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 4}
