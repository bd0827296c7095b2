"""Paper fidelity: every default has its source, every table and figure of a paper is accounted for, and the papers'
claims are one register that reads the papers' own numbers.

- Each reproduction's parameters are its :data:`~dpbook.repro.papers.chapter.OPERATIONAL` ones, its ``SELECTION``
  (which cells and figures run) and its ``SOURCES`` (where each default comes from); each benchmark's settings have
  ``SOURCES`` too. A source is a place in the paper, or a reading id the Readings chapter defines.
- Each reproduction's ``COVERAGE`` lists every numbered table and figure of its paper, and its chapter shows it.
- The claims register (:data:`dpbook.repro.claims.CLAIMS`) tests every claim in the direction its paper's table
  shows, never one claim in two directions, and both benchmark chapters judge it.
- A chapter that credits a setting to a section or an appendix of a paper cites the reading id of that setting.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from dpbook.repro import digits_benchmark, mnist5k_benchmark
from dpbook.repro.claims import CLAIMS, Claim, paper_sign
from dpbook.repro.coverage import missing_items
from dpbook.repro.papers import dcsgd, dpdr, psasc
from dpbook.repro.papers.chapter import OPERATIONAL
from dpbook.repro.sources import READING_ID, Source, unsourced
from tests.test_readings import defined_readings, readings_text

ROOT = Path(__file__).resolve().parents[1]
#: paper module -> (its tables, its figures, the numerals of its tables), counted in the paper.
PAPERS = {dcsgd: (8, 11, "roman"), dpdr: (2, 6, "arabic"), psasc: (3, 9, "roman")}
REPRODUCTIONS = {module: module.Reproduction for module in PAPERS}
BENCHMARKS = (digits_benchmark, mnist5k_benchmark)
CHAPTERS = {dcsgd: "reproduce_dcsgd", dpdr: "reproduce_dpdr", psasc: "reproduce_psasc"}
CLAIM_CHAPTERS = ("digits_benchmark", "mnist5k_benchmark")


def markdown(notebook: str) -> str:
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def code(notebook: str) -> str:
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def chapter_code(chapter: str) -> str:
    """The code of a chapter over all its pages: its first page and its sections in ``_toc.yml``."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    (pages,) = [[ch["file"], *(s["file"] for s in ch.get("sections", []))] for part in toc["parts"]
                for ch in part["chapters"] if ch["file"] == f"notebooks/{chapter}"]
    return "\n\n".join(code(Path(page).name) for page in pages)


# -- settings --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("module", list(REPRODUCTIONS), ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_default_of_a_reproduction_has_a_source(module):
    cls = REPRODUCTIONS[module]
    declared = [*OPERATIONAL, *cls.SELECTION, *cls.SOURCES]
    assert len(declared) == len(set(declared)), "a parameter is declared twice (operational, selection, sources)"
    settings = [f.name for f in dataclasses.fields(cls) if f.name not in (*OPERATIONAL, *cls.SELECTION)]
    missing = unsourced(settings, cls.SOURCES)
    assert not missing, f"{cls.__module__}.Reproduction: {missing}: add a source to SOURCES (or the name to SELECTION)"


@pytest.mark.parametrize("benchmark", BENCHMARKS, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_setting_of_a_benchmark_has_a_source(benchmark):
    assert unsourced(benchmark.BENCHMARK.defaults(), benchmark.BENCHMARK.sources) == []


def test_every_reading_a_source_cites_is_defined():
    defined = defined_readings(readings_text())
    sources = [s for cls in REPRODUCTIONS.values() for s in cls.SOURCES.values()]
    sources += [s for b in BENCHMARKS for s in b.BENCHMARK.sources.values()]
    cited = {s.reading for s in sources if s.reading} | {r for s in sources for r in READING_ID.findall(s.note)}
    assert cited and not cited - set(defined), f"undefined readings: {sorted(cited - set(defined))}"


def test_a_setting_without_a_source_is_refused():
    with pytest.raises(ValueError, match="the paper.s place or a reading id"):
        Source()
    with pytest.raises(ValueError, match="not a place"):
        Source("the appendix")
    assert unsourced(["epochs", "lr"], {"epochs": Source("App. A.1")}) == ["lr"]


#: A paper's section or appendix credited in parentheses: where the book says where a setting comes from.
SECTION_CREDIT = re.compile(r"\((?:[^()]*?\b)?(?:App\.|Sec\.) [A-Z0-9][A-Za-z0-9.\-]*[^()]*\)")


def credits_without_id(text: str) -> list[str]:
    """The parenthesised credits of a section or an appendix in ``text`` that cite no reading id.

    >>> credits_without_id("20 epochs (App. A.1); s = 50 (Sec. 7.3, [DPDR-28]); see (Table 2)")
    ['(App. A.1)']
    """
    return [m.group(0) for m in SECTION_CREDIT.finditer(text) if not READING_ID.search(m.group(0))]


@pytest.mark.parametrize("module", list(PAPERS) + list(BENCHMARKS), ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_a_chapter_credits_no_setting_to_a_section_without_its_reading(module):
    notebook = CHAPTERS.get(module) or module.__name__.rsplit(".", 1)[1]
    texts = {"chapter": markdown(notebook), "module docstring": ast.get_docstring(
        ast.parse(Path(module.__file__).read_text()))}
    found = {where: bad for where, text in texts.items() if (bad := credits_without_id(text))}
    assert not found, f"{notebook}: settings credited to a section without the reading that chooses them: {found}"


# -- coverage --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("module", list(PAPERS), ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_every_table_and_figure_of_a_paper_is_in_its_coverage(module):
    tables, figures, numerals = PAPERS[module]
    assert missing_items(module.Reproduction.COVERAGE, tables=tables, figures=figures, numerals=numerals) == []


@pytest.mark.parametrize("module", list(PAPERS), ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_each_reproduction_chapter_shows_its_coverage_and_sources(module):
    source = chapter_code(CHAPTERS[module])
    assert "Reproduction.coverage_table()" in source and "Reproduction.sources_table()" in source


def test_the_coverage_cites_defined_readings_and_existing_chapters():
    defined = defined_readings(readings_text())
    for module in PAPERS:
        for name, item in module.Reproduction.COVERAGE.items():
            assert not set(READING_ID.findall(item.how)) - set(defined), (module.__name__, name)
            for chapter in re.findall(r"\]\(([a-z0-9_]+)\.ipynb\)", item.how):
                assert (ROOT / "notebooks" / f"{chapter}.ipynb").exists(), (module.__name__, name, chapter)


# -- claims ----------------------------------------------------------------------------------------------------------

def test_every_claim_is_what_its_papers_table_shows():
    disagree = [(c.where, c.text) for c in CLAIMS if not c.table_agrees()]
    assert not disagree, f"claims the paper's own table does not show: {disagree}"
    assert all(c.paper_values() for c in CLAIMS), "a claim with no paper values at its budgets"


def test_no_claim_is_tested_in_two_directions():
    seen = {}
    for c in CLAIMS:
        pair = (frozenset((c.a, c.b)), c.protocol, c.table)
        direction = {"higher": 1, "not lower": 1, "lower": -1}[c.expect] * (1 if c.a < c.b else -1)
        assert seen.setdefault(pair, direction) == direction, f"{c.where}: {c.text} is tested both ways"


def test_the_register_catches_a_claim_its_table_contradicts():
    wrong = Claim("DC-SGD Table III", "RDP: E above DP-SGD", "dcsgd-e", "dpsgd", "higher", "rdp", "dcsgd_table3")
    assert not wrong.table_agrees()
    assert paper_sign({"value": 95.62, "std": 0.15}, {"value": 95.63, "std": 0.24}) == 0


@pytest.mark.parametrize("notebook", CLAIM_CHAPTERS)
def test_both_benchmark_chapters_judge_the_one_register(notebook):
    source = chapter_code(notebook)
    assert "report.judge(cells, epsilons" in source and "Claim(" not in source
    assert "BENCHMARK.sources_table()" in source  # db.BENCHMARK or mb.BENCHMARK
