"""Every reading the repository cites is defined in the book, and nothing cites a file the repository does not ship.

The papers' gaps and typos are cited by id (``DCSGD-n``, ``DPDR-n``, ``PSASC-n``) in the code, the notebooks, the book,
the README, the tests and ``data/paper/``; the Readings chapter (``book/readings.md``) defines each id in a table row of
its paper's page (``book/readings_dcsgd.md``, ``book/readings_dpdr.md``, ``book/readings_psasc.md``). The privacy
hygiene rules are cited as "privacy hygiene rule N" and defined on ``book/hygiene.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The Readings chapter's page of each paper: its rows define that paper's ids, and no other's.
READING_PAGES = {prefix: ROOT / "book" / f"readings_{prefix.lower()}.md" for prefix in ("DCSGD", "DPDR", "PSASC")}
HYGIENE = ROOT / "book" / "hygiene.md"

ID = re.compile(r"\b(?:DCSGD|DPDR|PSASC)-\d+\b")
# The old names below are written in pieces, so that a search of the repository for them finds nothing here.
#: A flag id of the old, unshipped notes (F, a hyphen and a number); the lookbehind keeps "UTF-8" out.
OLD_FLAG = re.compile(r"(?<![A-Za-z])F" r"-\d+\b")
#: Files the repository does not ship: the design notes, the papers' notes, the shared folder beside the repository.
UNSHIPPED = re.compile(r"DESIGN\.md|" r"seed" r"-[a-z]+\.md|/work" r"/shared|\.\./shared")
#: "privacy hygiene rule 4", "hygiene.md``, rules 2 and 3", "rule 4 of the book's privacy hygiene".
RULES_CITED = re.compile(r"hygiene(?:\.md`*)?,? rules? (\d+(?:(?:, | and )\d+)*)"
                         r"|rules? (\d+) of the book's privacy hygiene", re.IGNORECASE)
RULE_HEADING = re.compile(r"^### Rule (\d+): ", re.MULTILINE)


def shipped_files() -> list[Path]:
    """The files that cite readings: the package, the notebooks, the book, the README, the tests, the papers' tables."""
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    files += sorted((ROOT / "dpbook").rglob("*.py"))
    files += sorted((ROOT / "notebooks").glob("*.ipynb"))
    files += sorted((ROOT / "book").glob("*.md"))
    files += sorted((ROOT / "data" / "paper").glob("*.json"))
    files += sorted(p for p in (ROOT / "tests").rglob("*.py") if "_executed" not in p.parts)
    return [p for p in files if p.resolve() != Path(__file__).resolve()]


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every body row of the Markdown pipe tables in ``markdown`` (header and rule rows left out)."""
    rows, previous = [], ""
    for line in markdown.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            header = not previous.startswith("|")  # the first line of a table is its header
            if not header:
                rows.append(cells)
        previous = line
    return rows


def defined_readings(markdown: str) -> dict[str, list[str]]:
    """{id: row} of the readings tables; a row must have four non-empty cells and an id no other row has."""
    defined: dict[str, list[str]] = {}
    for cells in table_rows(markdown):
        assert len(cells) == 4 and all(cells), f"a readings row needs 4 non-empty cells: {cells}"
        reading = cells[0]
        assert ID.fullmatch(reading), f"not a reading id: {reading!r}"
        assert reading not in defined, f"{reading} is defined twice"
        defined[reading] = cells
    return defined


def undefined_citations(text: str, defined) -> list[str]:
    """The reading ids that ``text`` cites and ``defined`` lacks, in order of first appearance."""
    return list(dict.fromkeys(m for m in ID.findall(text) if m not in defined))


def test_the_checker_catches_an_undefined_id_and_the_old_flags():
    defined = defined_readings("| id | says | reading | code |\n|---|---|---|---|\n| DCSGD-7 | a | b | c |\n")
    assert set(defined) == {"DCSGD-7"}
    assert undefined_citations("bin index [DCSGD-7]; ranges [DCSGD-13, DPDR-99]; PSASC-1x", defined) == [
        "DCSGD-13", "DPDR-99"]
    flag = "F" + "-"
    assert OLD_FLAG.findall(f"[{flag}7] ({flag}26) {flag}19") == [flag + "7", flag + "26", flag + "19"]
    assert not OLD_FLAG.search("UTF-8") and UNSHIPPED.search("see " + "DESIGN" + ".md")
    with pytest.raises(AssertionError, match="4 non-empty cells"):
        defined_readings("| id | says | reading | code |\n|---|---|---|---|\n| DPDR-1 | a |  | c |\n")
    with pytest.raises(AssertionError, match="defined twice"):
        defined_readings("| id | a | b | c |\n|---|---|---|---|\n| DPDR-1 | a | b | c |\n| DPDR-1 | a | b | c |\n")


def readings_text() -> str:
    """The tables of every paper's Readings page, one after the other."""
    return "\n\n".join(page.read_text() for page in READING_PAGES.values())


def test_readings_chapter_defines_each_id_once_in_full_rows():
    defined_readings(readings_text())  # each id once over the three pages, in rows of four non-empty cells
    for prefix, page in READING_PAGES.items():
        on_page = defined_readings(page.read_text())
        assert on_page and all(r.startswith(prefix + "-") for r in on_page), f"{page.name} holds only {prefix} rows"


def test_every_cited_reading_is_defined():
    defined = defined_readings(readings_text())
    missing = {str(p.relative_to(ROOT)): undefined for p in shipped_files()
               if (undefined := undefined_citations(p.read_text(encoding="utf-8"), defined))}
    assert not missing, f"cited but not defined in the Readings (book/readings_*.md): {missing}"


def test_no_flag_of_the_old_notes_remains():
    left = {str(p.relative_to(ROOT)): OLD_FLAG.findall(p.read_text(encoding="utf-8")) for p in shipped_files()}
    left = {name: flags for name, flags in left.items() if flags}
    assert not left, f"cite the reading id of the Readings instead: {left}"


def test_no_file_cites_what_the_repository_does_not_ship():
    cited = {str(p.relative_to(ROOT)): UNSHIPPED.findall(p.read_text(encoding="utf-8")) for p in shipped_files()}
    cited = {name: found for name, found in cited.items() if found}
    assert not cited, f"these files cite notes that are not in the repository: {cited}"


def test_every_cited_hygiene_rule_is_on_the_hygiene_page():
    rules = {int(n) for n in RULE_HEADING.findall(HYGIENE.read_text())}
    assert rules == set(range(1, 10))
    cited = {}
    for path in shipped_files():
        for many, one in RULES_CITED.findall(path.read_text(encoding="utf-8")):
            numbers = {int(n) for n in re.findall(r"\d+", many or one)}
            cited.setdefault(str(path.relative_to(ROOT)), set()).update(numbers)
    assert cited, "no file cites a privacy hygiene rule: is the pattern still right?"
    unknown = {name: sorted(numbers - rules) for name, numbers in cited.items() if numbers - rules}
    assert not unknown, f"rules cited but not on book/hygiene.md: {unknown}"


def test_the_hygiene_page_names_tests_that_exist():
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    defined = set(re.findall(r"^def (test_\w+)", sources, flags=re.MULTILINE))
    named = set(re.findall(r"\b(test_\w+)`", HYGIENE.read_text()))
    assert named and not named - defined, f"book/hygiene.md names tests that do not exist: {named - defined}"
