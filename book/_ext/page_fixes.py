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
"""

from __future__ import annotations

from urllib.parse import urlsplit

from docutils import nodes

#: The text of a chapter's Colab link.
COLAB_TEXT = "Open this chapter in Colab"


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


def setup(app):
    app.connect("doctree-resolved", _colab_link)
    app.connect("html-page-context", _unique_scripts, priority=100)  # first: a handler may end the event
    app.connect("html-page-context", _search_page_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
