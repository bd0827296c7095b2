"""The declared public surface and its rendered reference: every dpbook module states its public names in
``__all__`` at its top, and they resolve; every module has a section in the book's API reference (``book/api/``)
that names the chapters explaining it, and each of those chapters links back to it."""

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dpbook"
API = ROOT / "book" / "api"
MARK = ("**The API this chapter uses:**", "**The API this page uses:**")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__main__.py"}


def declared_all(tree: ast.Module) -> tuple[list[str], int] | None:
    """``__all__``'s names and its position among the module's statements."""
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return ast.literal_eval(node.value), i
    return None


def defined_public(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("name", list(MODULES))
def test_all_is_at_the_top_and_every_name_resolves(name):
    tree = ast.parse(MODULES[name].read_text())
    found = declared_all(tree)
    assert found is not None, f"{name} has no __all__"
    names, position = found
    imports = [i for i, node in enumerate(tree.body) if isinstance(node, (ast.Import, ast.ImportFrom))
               and getattr(node, "module", None) != "__future__"]
    assert not imports or position < imports[0], f"{name}: __all__ comes after the imports; put it at the top"
    assert len(names) == len(set(names)), f"{name}: __all__ names a name twice"
    module = importlib.import_module(name)
    assert [n for n in names if not hasattr(module, n)] == [], f"{name}: __all__ names what the module lacks"
    missing = defined_public(tree) - set(names) - {"__all__"}
    assert not missing, f"{name}: public names missing from __all__ (or name them with a leading _): {missing}"


def api_sections() -> dict[str, list[str]]:
    """module -> the repository files (stems) its section's "Explained in" line links to."""
    sections = {}
    for page in sorted(API.glob("*.md")):
        for module, body in re.findall(r"^## `([\w.]+)`\n(.*?)(?=^## |\Z)", page.read_text(), re.S | re.M):
            assert f".. automodule:: {module}\n" in body, f"{page.name}: the section of {module} renders no API"
            explained = next(line for line in body.splitlines() if line.startswith("Explained in "))
            targets = [(API / link).resolve() for link in re.findall(r"\]\(([^)]+)\)", explained)]
            assert targets and all(t.exists() for t in targets), f"{module}: a chapter link is broken: {explained}"
            sections[module] = [t.stem for t in targets]
    return sections


SECTIONS = api_sections()


def test_every_module_has_one_api_section():
    documented = sorted(set(MODULES) - {"dpbook"})  # the package's face holds only __version__
    assert sorted(SECTIONS) == documented
    automodules = re.findall(r"\.\. automodule:: ([\w.]+)", "".join(p.read_text() for p in API.glob("*.md")))
    assert sorted(automodules) == documented  # each once


def chapter_links(text: str) -> set[str]:
    line = next((line for line in text.splitlines() if line.startswith(MARK)), "")
    return set(re.findall(r"\[`([\w.]+)`\]\(", line))


def chapters() -> dict[str, str]:
    """Every chapter of the table of contents that some API section names -> its text."""
    named = {stem for stems in SECTIONS.values() for stem in stems}
    texts = {p.stem: "".join(json.loads(p.read_text())["cells"][0]["source"])
             for p in (ROOT / "notebooks").glob("*.ipynb")}
    texts.update({p.stem: p.read_text() for p in (ROOT / "book").glob("*.md")})
    return {stem: texts[stem] for stem in named}


@pytest.mark.parametrize("chapter, text", sorted(chapters().items()))
def test_each_chapter_links_to_the_api_it_explains(chapter, text):
    expected = {module for module, stems in SECTIONS.items() if chapter in stems}
    assert chapter_links(text) == expected, f"{chapter}: the line '{MARK}' must link exactly {sorted(expected)}"


def test_every_notebook_links_to_the_api():
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert notebooks <= set(chapters())
