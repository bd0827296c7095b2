"""Every quotation the book credits to one of its three papers is verbatim: the check, and the index it reads.

The book quotes the DC-SGD, DPDR and DP-PSASC papers in its chapters, its docstrings and comments, and the Readings. A
quotation is text between quotation marks ("..." or “...”) that the sentence around it credits to a paper: the sentence
names a place in it (Sec., App., Table, Fig., Alg., Eq., Theorem, the abstract, ...), a reading id such as [DCSGD-29],
or a citation of one of the three papers; in the Readings every quotation of the column "the paper says" is one. Such a
quotation must be found in the paper's text, up to case, whitespace, punctuation and typography; inline maths ($...$,
:math:), an ellipsis (… or ...) and an editorial insertion in brackets ("sanitize[d]") split it into parts, each found
in the same paper. Text a chapter rewords is written without quotation marks; the few quotations that the extracted text
of a paper cannot show verbatim (a table's header split over two lines) are listed in ``NOT_IN_THE_TEXT`` with the
reason.

The papers' texts are not in the repository. ``data/paper/quotations/index.json`` holds, per paper, the hashes of every
pair of consecutive words of its text (and of the DC-SGD paper's one-page summary card; NFKC, lower case, words of
letters and digits): a part of a quotation is found when every pair of consecutive words in it is found (a reworded
quotation nearly always has a new pair). A part of one word cannot be checked this way, and a quotation of such parts
only is not checked.

    python tools/quotations.py index dcsgd=PAPER.txt dcsgd_card=CARD.txt dpdr=PAPER.txt psasc=PAPER.txt   # rebuild
    python tools/quotations.py check                 # the quotations not found, one per line (exit 1 if any)

``tests/test_quotations.py`` runs the check and shows that it catches a quotation that is not verbatim.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import re
import sys
import tokenize
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "data" / "paper" / "quotations" / "index.json"
K = 2  # words per hashed run

#: Quotations that the paper's extracted text cannot show verbatim, with the reason (reviewed one by one).
NOT_IN_THE_TEXT = {
    "Stable Parameter": "DP-PSASC's Table II: a column header over two lines, which the extracted text interleaves "
                        "with the next column's header",
    "Sensivity Bound": "DP-PSASC's Table II: a column header over two lines (the paper's spelling), interleaved in "
                       "the extracted text with the previous column's header",
    "Stable Sensivity Parameter $r$ Bound $C$": "DP-PSASC's Table II: its two-line header as the PDF prints it, "
                                                "interleaved in the extracted text with the (ε, δ) column",
    "while True": "DC-SGD's Alg. 4 l.4: the extracted text glues the line number to it (\"4while True do\")",
}

QUOTE = re.compile(r"“([^”]+?)”|\"([^\"\n]+?)\"")
#: What credits a quotation to a paper: a place in it, a reading id, a citation of one of the three, its own words.
CREDIT = re.compile(
    r"\b(?:Sec\.|Section [IVX\d]|App\.|Appendix|Tables? [IVX\d]|Figs?\. ?\d|Figure \d|Alg\. ?\d|Algorithm \d|"
    r"Eqs?\. ?\(|Theorem \d|Lemma \d|Remark \d|Definition \d|abstract|introduction|the authors|its text|"
    r"the paper (?:says|writes|calls|states))|\[(?:DCSGD|DPDR|PSASC)-\d+\]|"
    r"\[cite:[^\]]*(?:wei2025dcsgd|liu2024dpdr|huang2024psasc)")
#: What splits a quotation into parts: inline maths, an ellipsis, a bracketed insertion or reference.
SPLIT = re.compile(r"\$[^$]*\$|:math:`[^`]*`|…|\.\.\.|\[[^\]]{0,3}\]|\[\d+(?:,\s*\d+)*\]")
#: A sentence ends at . ! or ? (not after an abbreviation such as "Sec." or "App."), a blank line or a list item.
SENTENCE = re.compile(r"(?<=[.!?])(?<!\bSec\.)(?<!\bApp\.)(?<!\bFig\.)(?<!\bFigs\.)(?<!\bAlg\.)(?<!\bEq\.)"
                      r"(?<!\bEqs\.)(?<!\bal\.)(?<!\bvs\.)(?<!\be\.g\.)(?<!\bi\.e\.)\s+(?=[A-Z*\-(\"“])|\n\s*\n|\n(?=\s*[-*#])")


def words(text: str) -> list[str]:
    """The text's words as the index hashes them: NFKC, lower case, runs of letters and digits."""
    return re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).lower())


def digest(run: list[str]) -> str:
    return hashlib.sha1(" ".join(run).encode()).hexdigest()[:8]


def runs(ws: list[str]) -> list[str]:
    """The digests of every run of K consecutive words."""
    return [digest(ws[i:i + K]) for i in range(len(ws) - K + 1)]


def build(papers: dict[str, Path]) -> dict:
    return {"k": K, "papers": {name: "".join(sorted(set(runs(words(path.read_text())))))
                               for name, path in sorted(papers.items())}}


def load(path: Path = INDEX) -> dict[str, set[str]]:
    index = json.loads(path.read_text())
    if index["k"] != K:
        raise ValueError(f"{path}: built with runs of {index['k']} words, the check uses {K}; rebuild it")
    return {name: {text[i:i + 8] for i in range(0, len(text), 8)} for name, text in index["papers"].items()}


def parts(quotation: str) -> list[list[str]]:
    """The quotation's parts that can be checked: its words between maths, ellipses and insertions, K or more."""
    return [ws for ws in (words(p) for p in SPLIT.split(quotation)) if len(ws) >= K]


def verbatim(quotation: str, index: dict[str, set[str]]) -> bool | None:
    """Whether every part of the quotation is in one paper's text (None: nothing long enough to check)."""
    checked = parts(quotation)
    if not checked:
        return None
    return any(all(set(runs(ws)) <= grams for ws in checked) for grams in index.values())


@dataclass(frozen=True)
class Quotation:
    where: str
    text: str
    sentence: str


def _docstring_prose(doc: str) -> str:
    """A docstring without its doctest examples (the lines from ``>>>`` to the next blank line)."""
    kept, example = [], False
    for line in doc.splitlines():
        stripped = line.strip()
        example = stripped.startswith(">>>") or (example and bool(stripped))
        if not example:
            kept.append(line)
    return "\n".join(kept)


def _python_prose(source: str) -> Iterator[str]:
    """A module's or a code cell's prose: its docstrings, its comments, and its strings with curly quotes."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield _docstring_prose(doc)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "“" in node.value:
            yield node.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.string


def _without_code(markdown: str) -> str:
    """The text without code blocks; an inline code span (a ``:math:`` role's included) splits a quotation, and a
    citation role becomes ``[cite:keys]``."""
    markdown = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    markdown = re.sub(r"\{cite:\w+\}`([^`]*)`", r"[cite:\1]", markdown)
    return re.sub(r"(?::math:)?``[^`]*``|(?::math:)?`[^`]*`", " … ", markdown)


def _sources(root: Path) -> Iterator[tuple[str, str]]:
    """(where, prose) for every chapter cell, book page and library module."""
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            text, where = "".join(cell["source"]), f"{path.name} cell {cell.get('id')}"
            if cell["cell_type"] == "markdown":
                yield where, text
            elif not text.lstrip().startswith(("%", "!")):
                yield from ((where, prose) for prose in _python_prose(text))
    for path in sorted((root / "book").rglob("*.md")):
        yield str(path.relative_to(root)), path.read_text()
    for path in sorted((root / "dpbook").rglob("*.py")):
        yield from ((str(path.relative_to(root)), prose) for prose in _python_prose(path.read_text()))


def _units(text: str) -> Iterator[tuple[str, bool]]:
    """The text's sentences, and whether each is in the column "the paper says" of a Readings table (its third)."""
    for line in text.splitlines() if "| the paper says |" in text else [text]:
        columns = line.split("|") if line.startswith("|") else [line]
        for k, column in enumerate(columns):
            for sentence in SENTENCE.split(column):
                yield sentence, len(columns) > 3 and k == 2


def quotations(text: str, where: str = "") -> Iterator[Quotation]:
    """The quotations the text credits to a paper."""
    for sentence, says in _units(_without_code(text)):
        if says or CREDIT.search(sentence):
            for match in QUOTE.finditer(sentence):
                yield Quotation(where, match.group(1) or match.group(2), " ".join(sentence.split()))


def not_found(index: dict[str, set[str]], root: Path = ROOT) -> list[Quotation]:
    """The quotations of the book that no paper's text holds (those of ``NOT_IN_THE_TEXT`` aside)."""
    return [q for where, prose in _sources(root) for q in quotations(prose, where)
            if q.text not in NOT_IN_THE_TEXT and verbatim(q.text, index) is False]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("index", help="rebuild data/paper/quotations/index.json from the papers' texts")
    make.add_argument("papers", nargs="+", metavar="NAME=PATH", help="e.g. dcsgd=../shared/seeds/000_....txt")
    sub.add_parser("check", help="print the quotations not found in the papers' texts")
    args = parser.parse_args(argv)
    if args.command == "index":
        papers = dict(p.split("=", 1) for p in args.papers)
        INDEX.write_text(json.dumps(build({n: Path(p) for n, p in papers.items()}), indent=1) + "\n")
        print(f"wrote {INDEX.relative_to(ROOT)}: {', '.join(sorted(papers))}")
        return 0
    missing = not_found(load())
    for q in missing:
        print(f"{q.where}: “{q.text}” in: {q.sentence[:160]}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
