"""Sphinx extension: what every page of the book needs beyond the theme's defaults.

- sphinx-thebe registers its inline configuration script (``const THEBE_JS_URL = ...``) once per build of the
  environment; in Jupyter Book's build it lands twice on every page and the browser reports "Identifier
  'THEBE_JS_URL' has already been declared" (sphinx-togglebutton's selector is doubled the same way). Each
  distinct script is kept once, in its first position.
- The search page's excerpts (``_static/search_excerpts.js``) leave out the print-only table of contents and show
  their formulas typeset: the page loads the book's MathJax, which Sphinx gives only to pages with formulas.
"""

from __future__ import annotations


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


def setup(app):
    app.connect("html-page-context", _unique_scripts, priority=100)  # first: a handler may end the event
    app.connect("html-page-context", _search_page_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
