"""One notation: every symbol the book's maths uses is on the notation page (``book/notation.md``), and a symbol has
one meaning there.

A chapter's maths is the text between dollar signs in its Markdown (notebooks' Markdown cells and the book's pages;
code, inline or fenced, is not maths). A symbol is a letter (Latin or Greek, calligraphic or blackboard bold) with its
accent (tilde, hat, bar) and its subscript, a prime or a star: ``\\sigma_H``, ``\\tilde g_t``, ``C_0``, ``x^*``.
A symbol the page does not list is found under the page's conventions: a subscript that only indexes (a step ``t``,
an example ``i``, a layer ``l``, a number) falls back to the bare letter (``g_{t,i}`` is ``g``), and an accent that
only marks a noisy, released or averaged copy falls back to the unaccented symbol.

A letter that a chapter gives a second meaning is renamed there (the notation page says where the book's letter
departs from a paper's).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTATION = ROOT / "book" / "notation.md"

GREEK = ("alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi pi rho sigma "
         "tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Phi Psi Omega ell").split()
_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$", re.S)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
_TEXT_SUBSCRIPT = re.compile(r"_\{?\\(?:text|mathrm)\{([^{}]*)\}\}?")
_TEXT = re.compile(r"\\(?:text|mathrm|operatorname|textrm|mathtt|texttt|mbox|cite[a-z]*)\{[^{}]*\}")
_ACCENT = r"\\(?:tilde|hat|bar|widetilde|widehat|overline)"
_LETTER = (r"\\math(?:cal|bb)\s*\{?\s*[A-Za-z]\}?"  # a calligraphic or blackboard letter
           r"|\\Delta\s*[a-z](?![A-Za-z])"  # a change, \Delta w
           r"|\\(?:" + "|".join(GREEK) + r")(?![A-Za-z])"
           r"|(?<![\\A-Za-z])[A-Za-z](?![A-Za-z])")  # a Latin letter on its own, not part of a command
_SYMBOL = re.compile(rf"(?P<accent>{_ACCENT}\s*\{{?\s*)?(?P<base>{_LETTER})\}}?"
                     r"(?P<sub>\s*(?:_\{[^{}]*\}|_\s*\\[A-Za-z]+|_\s*[A-Za-z0-9]|\^\{?\*\}?|\^\\star|\^\\prime|'))?")
#: A subscript that only indexes: steps, examples, layers, bins, numbers and their arithmetic (``t+1``, ``k-l``).
_INDEX = re.compile(r"^_\{?(?:[0-9tijklmnsk+\-,'=.\s]|\\hat)*\}?$")


def _subscript(sub: str) -> str:
    """A subscript with its indexing parts dropped when it also names something: ``_{t,\\perp}`` is ``_\\perp``."""
    if not (sub.startswith("_{") and "," in sub):
        return sub
    kept = [part for part in sub[2:-1].split(",") if not _INDEX.match(f"_{part}")]
    if not kept:
        return ""
    return f"_{kept[0]}" if len(kept) == 1 and (len(kept[0]) == 1 or kept[0].startswith("\\")) else \
        "_{" + ",".join(kept) + "}"


def symbols(tex: str) -> list[str]:
    """The symbols of a piece of TeX, each as accent + letter + subscript (no spaces or braces around the letter).

    >>> symbols(r"\\tilde g_t=\\bar g_t+\\mathcal N(0,\\sigma_T^2C_t^2I_d)")
    ['\\\\tilde g_t', '\\\\bar g_t', '\\\\mathcal N', '\\\\sigma_T', 'C_t', 'I_d']
    """
    tex = re.sub(r"\}_\{\\text\{[^{}]*\}\}", "}", tex)  # an \underbrace's label
    tex = _TEXT.sub(" ", _TEXT_SUBSCRIPT.sub(r"_{\1}", tex))
    found = []
    for m in _SYMBOL.finditer(tex):
        accent = re.sub(r"[\s{]", "", m["accent"] or "")
        base = re.sub(r"[\s{}]", "", m["base"])
        if base.startswith("\\math"):
            base = base[:-1] + " " + base[-1]
        sub = _subscript(re.sub(r"\s", "", m["sub"] or "").replace("^\\prime", "'"))
        found.append((accent + " " if accent else "") + base + sub)
    return found


def _parts(symbol: str) -> tuple[str, str, str]:
    """(accent, letter, subscript) of a symbol as :func:`symbols` writes it."""
    m = re.match(rf"(?:({_ACCENT}) )?(\\math(?:cal|bb) [A-Za-z]|\\[A-Za-z]+|[A-Za-z])(.*)", symbol)
    return m[1] or "", m[2], m[3]


def names(symbol: str) -> list[str]:
    """The names ``symbol`` may be listed under, the most specific first (the conventions above): itself with an
    indexing subscript dropped, then without its accent.

    >>> names(r"\\tilde g_{t-1}")
    ['\\\\tilde g', 'g']
    >>> names(r"\\sigma_H"), names("C_0")
    (['\\\\sigma_H'], ['C'])
    """
    accent, base, sub = _parts(symbol)
    sub = "" if _INDEX.match(sub) or sub == "'" else sub
    found = [f"{accent} {base}{sub}" if accent else base + sub]
    if accent:
        found.append(base + sub)
    return found


def maths(text: str) -> list[str]:
    """The maths of a page's Markdown: the TeX between dollar signs, outside code."""
    return [m[1] or m[2] for m in _MATH.finditer(_CODE.sub(" ", text))]


def pages() -> dict[str, str]:
    """Every chapter's Markdown: the notebooks' Markdown cells and the book's pages (not the notation page)."""
    texts = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        texts[path.stem] = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    for path in sorted((ROOT / "book").glob("*.md")):
        if path != NOTATION:
            texts[f"book/{path.stem}"] = path.read_text()
    return texts


def listed_symbol(tex: str) -> str:
    r"""The symbol one formula of the notation page's first column lists: its first symbol, written as a function
    (``E(\cdot)``) when it is one; a formula that opens with an operator (``\lVert D\rVert``) lists itself.

    >>> print(listed_symbol(r"\mathbb R^d"), listed_symbol("E(C)"), listed_symbol(r"\lVert D\rVert"))
    \mathbb R E(\cdot) \lVertD\rVert
    """
    found = symbols(tex)
    if not found or not re.match(r"\\(?:tilde|hat|bar|math|Delta|[a-z]+(?![A-Za-z]))|[A-Za-z]", tex) or \
            tex.startswith(("\\lVert", "\\langle", "\\lfloor", "\\nabla", "\\odot")):
        return re.sub(r"\s", "", tex)
    return found[0] + ("(\\cdot)" if re.match(r"[^(\[]*[(\[]", tex) and not tex.startswith("\\mathcal O") else "")


def notation_rows(text: str) -> list[tuple[list[str], str]]:
    """The notation page's table rows: the formulas of the first column, and the row's text."""
    return [(maths(line.split("|")[1]), line) for line in text.splitlines() if line.startswith("| $")]


def unlisted(chapters: dict[str, str], notation: str) -> dict[str, set[str]]:
    """symbol -> the chapters that use it in their maths while the notation page lists it under no name (every
    symbol of the page's first column counts as listed)."""
    listed = {names(s)[0] for formulas, _ in notation_rows(notation) for tex in formulas for s in symbols(tex)}
    missing = defaultdict(set)
    for name, text in chapters.items():
        for tex in maths(text):
            for symbol in symbols(tex):
                if not any(n in listed for n in names(symbol)):
                    missing[symbol].add(name)
    return dict(missing)


def meanings(notation: str) -> dict[str, list[str]]:
    """symbol -> the notation page's rows that list it (:func:`listed_symbol`), for the symbols listed in more than
    one row: a symbol with more than one meaning."""
    rows = defaultdict(list)
    for formulas, line in notation_rows(notation):
        for symbol in dict.fromkeys(map(listed_symbol, formulas)):
            rows[symbol].append(line)
    return {s: lines for s, lines in rows.items() if len(lines) > 1}


def test_every_symbol_in_the_maths_is_on_the_notation_page():
    missing = unlisted(pages(), NOTATION.read_text())
    assert not missing, ("symbols used in a chapter's maths that book/notation.md does not list (add a row, or "
                         "write the symbol as the page does): "
                         + "; ".join(f"{s} in {sorted(where)}" for s, where in sorted(missing.items())))


def test_each_symbol_has_one_meaning():
    shared = {s: [line[:100] for line in rows] for s, rows in meanings(NOTATION.read_text()).items()}
    assert not shared, f"a symbol with two meanings on the notation page (rename one): {shared}"


def test_a_symbol_no_page_defines_is_caught():
    notation = "| symbol | meaning |\n|---|---|\n| $\\sigma$ | Noise multiplier. |\n| $g_i$ | A gradient. |\n"
    chapter = {"chapter": r"The noise is $\sigma\,\tilde g_{t,i}$ plus $\zeta_t$."}
    assert unlisted(chapter, notation) == {r"\zeta_t": {"chapter"}}


def test_a_symbol_with_two_meanings_is_caught():
    notation = "| $G$ | Grid size. |\n| $\\gamma$ | Stopping probability. |\n| $G$, $G_{t,i}$ | A gradient norm. |\n"
    assert list(meanings(notation)) == ["G"]


@pytest.mark.parametrize("tex, expected", [
    (r"C_{t+1}=C_t\cdot\frac{2k+1}{b}", ["C_{t+1}", "C_t", "k", "b"]),
    (r"\sigma_{\text{eff}}=(\sum_i\sigma_i^{-2})^{-1/2}", [r"\sigma_{eff}", "i", r"\sigma_i"]),
    (r"x^*=\sqrt{r/s}-r", ["x^*", "r", "s", "r"]),
    (r"\mathbb E\lVert n\rVert", [r"\mathbb E", "n"]),
])
def test_symbols_are_read_as_a_reader_reads_them(tex, expected):
    assert symbols(tex) == expected


def first_used_in(line: str) -> str | None:
    """The page a notation row names in its last column ("first used in"), as a key of :func:`pages`."""
    m = re.search(r"\]\((?:\.\./notebooks/(\w+)\.ipynb|(\w+)\.md)\)\s*\|\s*$", line)
    return None if m is None else (m[1] or f"book/{m[2]}")


def misplaced(chapters: dict[str, str], notation: str) -> list[str]:
    """The rows whose "first used in" page does not use any of the row's symbols in its maths."""
    used = {name: {s for tex in maths(text) for s in symbols(tex)} for name, text in chapters.items()}
    out = []
    for formulas, line in notation_rows(notation):
        where = first_used_in(line)
        listed = {s for tex in formulas for s in symbols(tex)}
        if where is not None and listed and not listed & used.get(where, set()):
            out.append(f"{where}: {line[:80]}")
    return out


def test_each_row_names_a_page_that_uses_its_symbol():
    wrong = misplaced(pages(), NOTATION.read_text())
    assert not wrong, f"notation rows whose 'first used in' page does not use the symbol: {wrong}"


def test_a_row_that_names_the_wrong_page_is_caught():
    notation = "| $\\sigma_H$ | Histogram noise. | [Privacy](../notebooks/privacy.ipynb) |\n"
    assert misplaced({"privacy": r"The gradient noise $\sigma_T$."}, notation) == [
        "privacy: " + notation.splitlines()[0][:80]]
    assert misplaced({"privacy": r"The histogram noise $\sigma_H$."}, notation) == []
