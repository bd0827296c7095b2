"""What every numbered chapter of the book has: links to the chapters it builds on, a summary at its end, three or
more exercises each with its solution behind a toggle, and no assert in the code a reader sees. A long chapter goes on
over further pages (its ``sections`` in ``_toc.yml``): each links the chapter's first page and ends with a summary
(and its own exercises, which count towards the chapter's).

A chapter is a page of a numbered part of ``_toc.yml`` (the Reference part is not numbered). Its exercises are the
items of the numbered list under its ``## Exercises`` heading; a solution is either a ``{dropdown} Solution`` in the
Markdown, or a code cell tagged ``solution`` and ``hide-cell`` (code and output behind one toggle), which the
notebook tests run like every other cell.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MIN_EXERCISES = 3
HIDDEN = {"hide-input", "hide-cell", "remove-input", "remove-cell"}


def _path(name: str) -> Path:
    return next(p for p in (ROOT / f"{name}.ipynb", ROOT / f"{name}.md") if p.exists())


def chapters() -> list[Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [_path(ch["file"]) for part in toc["parts"] if part.get("numbered") for ch in part["chapters"]]


def further_pages() -> dict[Path, Path]:
    """A long chapter's further pages (its ``sections`` in ``_toc.yml``), each with the chapter's first page."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return {_path(s["file"]): _path(ch["file"]) for part in toc["parts"] if part.get("numbered")
            for ch in part["chapters"] for s in ch.get("sections", [])}


CHAPTERS = chapters()
FURTHER = further_pages()


def cells(path: Path) -> list[tuple[str, str, list[str]]]:
    """(kind, source, tags) of every cell; a Markdown chapter is one Markdown cell."""
    if path.suffix == ".md":
        return [("markdown", path.read_text(), [])]
    nb = nbformat.read(path, as_version=4)
    return [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]


def section(path: Path, title: str) -> list[tuple[str, str, list[str]]] | None:
    """The cells from the ``## title`` heading to the next ``## `` heading (that cell's text before it), or None."""
    out, inside = [], False
    for kind, source, tags in cells(path):
        if kind == "markdown":
            parts = re.split(r"(?m)^## ", source)
            for k, part in enumerate(parts):
                if k == 0 and not source.startswith("## "):
                    if inside and part.strip():
                        out.append((kind, part, tags))
                    continue
                if inside:
                    return out
                if part.split("\n", 1)[0].strip() == title:
                    inside = True
                    out.append((kind, part.split("\n", 1)[1] if "\n" in part else "", tags))
        elif inside:
            out.append((kind, source, tags))
    return out if inside else None


def pages_of(chapter: Path) -> list[Path]:
    """A chapter's pages: its first page, then its further pages."""
    return [chapter, *(page for page, first in FURTHER.items() if first == chapter)]


def exercises_of(path: Path) -> tuple[int, int]:
    """(exercises, solutions) of one page's ``## Exercises`` section (0, 0 without one); a code cell there must be a
    solution behind a toggle."""
    exercises = section(path, "Exercises")
    if exercises is None:
        return 0, 0
    text = "\n".join(source for kind, source, _ in exercises if kind == "markdown")
    items = re.findall(r"(?m)^\d+\.\s", text)
    solutions = len(re.findall(r"(?m)^(`{3,}|:{3,})\{dropdown\} Solution", text))
    code = [tags for kind, _, tags in exercises if kind == "code"]
    for tags in code:
        assert {"solution", "hide-cell"} <= set(tags), (
            f"{path.name}: a code cell among the exercises is not a solution behind a toggle (tags {tags}; "
            "tag it solution and hide-cell)")
    return len(items), solutions + sum("solution" in tags for tags in code)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_has_three_exercises_with_solutions(path):
    """At least three over the chapter's pages, each page's exercises at its end, each with its solution."""
    counted = {page.name: exercises_of(page) for page in pages_of(path)}
    assert counted[path.name][0], f"{path.name}: no '## Exercises' section"
    total = sum(items for items, _ in counted.values())
    assert total >= MIN_EXERCISES, f"{path.name}: {total} exercise(s) over {list(counted)}, {MIN_EXERCISES} wanted"
    for name, (items, solutions) in counted.items():
        assert solutions >= items, f"{name}: {items} exercises but {solutions} solutions"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_ends_with_a_summary_before_its_exercises(path):
    summary = section(path, "Summary")
    assert summary and any(kind == "markdown" and source.strip() for kind, source, _ in summary), (
        f"{path.name}: no '## Summary' section")
    headings = [line[3:].strip() for kind, source, _ in cells(path) if kind == "markdown"
                for line in source.splitlines() if line.startswith("## ")]
    assert headings[-2:] == ["Summary", "Exercises"], f"{path.name}: its last sections are {headings[-2:]}"


def opening_links(path: Path) -> set[str]:
    """The file names its opening (the text before its first section) links."""
    opening = []
    for kind, source, _ in cells(path):
        if kind == "markdown":
            head = re.split(r"(?m)^## ", source)[0]
            opening.append(head)
            if head != source:
                break
    return {Path(target).name for target in re.findall(r"\]\(([^)#\s]+)", "\n".join(opening))}


@pytest.mark.parametrize("path", CHAPTERS[1:], ids=lambda p: p.stem)
def test_every_chapter_links_the_chapters_it_builds_on(path):
    """Every chapter but the first links another chapter in its opening (the text before its first section)."""
    others = {p.name for p in CHAPTERS} - {path.name}
    assert opening_links(path) & others, f"{path.name}: its opening links no other chapter"


@pytest.mark.parametrize("path", list(FURTHER), ids=lambda p: p.stem)
def test_a_further_page_links_its_chapter_and_ends_with_a_summary(path):
    """A long chapter split over pages: each further page opens with a link to the chapter's first page (a reader who
    lands on it from a search finds where it starts) and ends with the summary of what it showed (then its
    exercises, if it has any)."""
    assert FURTHER[path].name in opening_links(path), f"{path.name}: its opening does not link {FURTHER[path].name}"
    headings = [line[3:].strip() for kind, source, _ in cells(path) if kind == "markdown"
                for line in source.splitlines() if line.startswith("## ")]
    ending = headings[-2:] if headings[-1:] == ["Exercises"] else headings[-1:]
    assert ending[:1] == ["Summary"], f"{path.name}: it ends with {headings[-2:]}, not a Summary (then Exercises)"


@pytest.mark.parametrize("path", [p for p in [*CHAPTERS, *FURTHER] if p.suffix == ".ipynb"], ids=lambda p: p.stem)
def test_no_assert_in_the_code_a_reader_sees(path):
    """Checks that back the text live in the library or in a cell behind a toggle (hide-input), not in the code
    that teaches."""
    shown = [source.splitlines()[0][:60] for kind, source, tags in cells(path)
             if kind == "code" and not HIDDEN & set(tags) and re.search(r"(?m)^\s*assert\b", source)]
    assert not shown, f"{path.name}: visible cells with an assert: {shown}"
