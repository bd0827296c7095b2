"""The bibliography is complete: every entry has its authors, title and year and is cited; every citation has an
entry; and every paper, dataset and library that a page's prose names is cited on that page (``NAMED``).

A page is a chapter (its Markdown cells) or a page of ``book/``; code, code spans and maths are not prose. The last
tests break a copy of a page and of the bibliography to show that each check catches its defect.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_fidelity import markdown  # a chapter's Markdown cells

ROOT = Path(__file__).resolve().parents[1]
BIB = ROOT / "book" / "references.bib"
REQUIRED = ("author", "title", "year")

#: What the prose may name, and the entry a page naming it must cite: papers by their authors, datasets, libraries.
NAMED = {
    r"Abadi et al": "abadi2016deep",
    r"Andrew et al": "andrew2021adaptive",
    r"Du et al": "du2021dynamic",
    r"Murata": "murata2023diff2",
    r"Mohapatra": "mohapatra2022role",
    r"Kairouz": "kairouz2015composition",
    r"Clopper": "clopper1934use",
    r"Dong, Roth|Dong et al|Dong–Roth": "dong2022gaussian",
    r"Bu, Mao|Bu–Mao": "bu2022scalable",
    r"Papernot–Steinke|Papernot and Steinke": "papernot2022hyperparameter",
    r"Papernot et al": "papernot2021tempered",
    r"Liu–Talwar|Liu and Talwar|Liu & Talwar": "liu2019private",
    r"Steinke, Nasr|Steinke et al|Nasr & Jagielski": "steinke2023auditing",
    r"Balle": "balle2020hypothesis",
    r"Goodfellow": "goodfellow2015efficient",
    r"Mironov": "mironov2017renyi",
    r"Gopi": "gopi2021numerical",
    r"Dwork": "dwork2014algorithmic",
    r"Tram[eè]r": "tramer2021differentially",
    r"MNIST(?!-5k)": "lecun1998gradient",
    r"Fashion-?MNIST": "xiao2017fashion",
    r"CIFAR-?10": "krizhevsky2009learning",
    r"SVHN": "netzer2011reading",
    r"CelebA": "liu2015deep",
    r"Imagenette": "howard2019imagenette",
    r"QNLI|GLUE": "wang2019glue",
    r"ResNet(?!9)": "he2016deep",
    r"ResNet9": "page2018how",
    r"BERT": "devlin2019bert",
    r"scikit-learn": "pedregosa2011scikit",
    r"mlxtend": "raschka2018mlxtend",
    r"PyTorch": "paszke2019pytorch",
    r"Opacus": "yousefpour2021opacus",
    r"dp-accounting": "google_dp_accounting",
}


def entries(text: str) -> dict[str, dict[str, str]]:
    """key -> {field: value} of every entry of a BibTeX text."""
    found = {}
    for key, body in re.findall(r"@\w+\{([^,\s]+),(.*?)\n\}", text, re.S):
        found[key] = {name.lower(): value for name, value in re.findall(r"^\s*(\w+)\s*=\s*(.+?),?\s*$", body, re.M)}
    return found


def prose(markdown: str) -> str:
    """A page's prose: without code blocks, code spans, maths, link targets and MyST directives' options."""
    markdown = re.sub(r"```.*?```|\$\$.*?\$\$", " ", markdown, flags=re.S)
    markdown = re.sub(r"\{cite:\w+\}`[^`]*`", " ", markdown)
    return re.sub(r"`[^`]*`|\$[^$]*\$|\]\([^)]*\)", " ", markdown)


def cited(markdown: str) -> set[str]:
    return {key.strip() for keys in re.findall(r"\{cite:\w+\}`([^`]*)`", markdown) for key in keys.split(",")}


def pages(root: Path = ROOT) -> dict[str, str]:
    """name -> Markdown of every chapter and book page (the bibliography page itself aside)."""
    found = {path.name: markdown(path.stem) for path in sorted((root / "notebooks").glob("*.ipynb"))}
    for path in sorted((root / "book").rglob("*.md")):
        if path.name != "bibliography.md":
            found[str(path.relative_to(root / "book"))] = path.read_text()
    return found


def uncited_names(markdown: str) -> list[str]:
    """The names ``NAMED`` lists that the page's prose names without citing their entry on the page."""
    text, keys = prose(markdown), cited(markdown)
    return sorted({f"{re.search(pattern, text).group()} ({key})" for pattern, key in NAMED.items()
                   if key not in keys and re.search(rf"\b(?:{pattern})", text)})


def incomplete(bib: dict[str, dict[str, str]]) -> list[str]:
    return [f"{key}: no {field}" for key, fields in bib.items() for field in REQUIRED if field not in fields]


BIBLIOGRAPHY = entries(BIB.read_text())
PAGES = pages()


def test_every_entry_has_authors_title_and_year():
    assert not incomplete(BIBLIOGRAPHY), incomplete(BIBLIOGRAPHY)


def test_every_citation_has_an_entry_and_every_entry_is_cited():
    used = set().union(*(cited(text) for text in PAGES.values()))
    assert used - set(BIBLIOGRAPHY) == set(), f"citations without an entry: {sorted(used - set(BIBLIOGRAPHY))}"
    assert set(BIBLIOGRAPHY) - used == set(), f"entries no page cites: {sorted(set(BIBLIOGRAPHY) - used)}"


def test_every_name_the_registry_lists_has_an_entry():
    assert set(NAMED.values()) <= set(BIBLIOGRAPHY), sorted(set(NAMED.values()) - set(BIBLIOGRAPHY))


@pytest.mark.parametrize("name", sorted(PAGES))
def test_a_page_cites_what_its_prose_names(name):
    missing = uncited_names(PAGES[name])
    assert not missing, f"{name} names but does not cite: {missing}; add {{cite:t}}`key` where it first names them"


def test_the_checks_catch_an_uncited_name_and_an_entry_without_a_year():
    page = "We train on SVHN, as {cite:t}`liu2024dpdr` do, and compare with Opacus. The code `CelebA` is no prose."
    assert uncited_names(page) == ["Opacus (yousefpour2021opacus)", "SVHN (netzer2011reading)"]
    assert uncited_names(page + " See {cite:p}`netzer2011reading,yousefpour2021opacus`.") == []
    broken = entries(BIB.read_text().replace("  year      = {2016},\n", "", 1))
    assert [line for line in incomplete(broken) if line.endswith("no year")] == ["abadi2016deep: no year"]
