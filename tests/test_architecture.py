"""The package's layers, read from its source: dpbook's import graph has no cycle, and every import goes down the
layers declared in :data:`LAYERS`, never up:

1. the private-step core (engine, per-sample gradients, methods, accounting, tuning, theory), which imports no data
   loader, no model and no task: a model or a data set comes in as an argument;
2. the zoo (datasets, models, the task registry, the audits);
3. the book's machinery, dpbook.repro (experiments, sweeps, results, benchmarks, the papers' chapters, notebook
   helpers).

Every import counts, at module level or inside a function: a deferred import is still a dependency.
"""

import ast
import graphlib
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dpbook"
REPRO = "dpbook.repro"

#: Layer -> its modules and packages (a package stands for every module in it), bottom first. A module may import
#: its own layer and the layers below it. Every module of dpbook must be in one.
LAYERS = {
    "core": ("dpbook", "dpbook.checks", "dpbook.io", "dpbook.noise", "dpbook.accounting",
             "dpbook.sampling", "dpbook.per_sample", "dpbook.histogram", "dpbook.weights", "dpbook.bounds",
             "dpbook.protocols", "dpbook.tuning", "dpbook.methods", "dpbook.optim", "dpbook.opacus_bridge",
             "dpbook.train", "dpbook.synthetic"),
    "zoo": ("dpbook.data", "dpbook.models", "dpbook.tasks", "dpbook.audit"),
    "book": (REPRO,),
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.AST, known: set[str]) -> set[str]:
    """The modules of `known` that a parsed file imports: `from a.b import c` is a.b.c when that is a module."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                     for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in known)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    files = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    return {name: imported_modules(ast.parse(path.read_text()), set(files)) - {name} for name, path in files.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        return err.args[1]
    return None


def is_repro(name: str) -> bool:
    return name == REPRO or name.startswith(REPRO + ".")


GRAPH = import_graph()


def test_the_graph_is_read_from_the_package():
    assert {"dpbook.optim", "dpbook.methods.dcsgd", "dpbook.repro.sweep", "dpbook.audit.white_box"} <= set(GRAPH)
    assert "dpbook.repro.dispatch" in GRAPH["dpbook.repro.sweep"]  # `from dpbook.repro import ... dispatch`
    assert "dpbook.methods.base" in GRAPH["dpbook.optim"]          # `from dpbook.methods.base import ...`


def test_the_import_graph_has_no_cycle():
    assert cycle(GRAPH) is None, f"import cycle: {' -> '.join(cycle(GRAPH))}"


def layer_of(name: str, layers: dict = LAYERS) -> int:
    """The index of the layer that declares ``name`` (its longest declared prefix), or a KeyError saying so."""
    found = [(len(unit), i) for i, units in enumerate(layers.values()) for unit in units
             if name == unit or name.startswith(unit + ".")]
    if not found:
        raise KeyError(f"{name} is in no layer: declare it in tests/test_architecture.py's LAYERS")
    return max(found)[1]


def upward_imports(graph: dict[str, set[str]], layers: dict = LAYERS) -> dict[str, list[str]]:
    """Every module's imports of a higher layer than its own."""
    found = {name: sorted(d for d in deps if layer_of(d, layers) > layer_of(name, layers))
             for name, deps in graph.items()}
    return {name: deps for name, deps in found.items() if deps}


def test_every_module_is_in_a_declared_layer():
    for name in GRAPH:
        layer_of(name)  # a KeyError names a module no layer declares


def test_every_import_goes_down_the_layers():
    assert upward_imports(GRAPH) == {}


def test_the_core_imports_no_loader_model_or_task():
    core = {name: deps for name, deps in GRAPH.items() if layer_of(name) == 0}
    assert {name: sorted(d for d in deps if d.startswith(("dpbook.data", "dpbook.models", "dpbook.tasks")))
            for name, deps in core.items()} == {name: [] for name in core}


def test_the_core_never_imports_the_reproduction_layer():
    leaks = {name: sorted(filter(is_repro, deps)) for name, deps in GRAPH.items() if not is_repro(name)}
    assert {name: deps for name, deps in leaks.items() if deps} == {}


#: What only the book knows about a method: names in code (not prose) that no core module may use. The book's cast
#: (dpbook.repro.cast) holds each method's colour, its place in the book's lists and its benchmark grids.
BOOK_FACTS = {"colour", "color", "position", "grids", "in_book_order", "DIGITS", "MNIST5K", "C_GRIDS", "CAST"}
#: ... and the string constants that name a benchmark or a colour.
BOOK_STRINGS = r"^(digits-benchmark|mnist5k|#[0-9a-fA-F]{6})$"


def book_facts(source: str) -> list[str]:
    """The book facts a module's code names: identifiers of :data:`BOOK_FACTS` (variables, attributes, arguments,
    keywords) and strings matching :data:`BOOK_STRINGS`; docstrings and comments may speak of them.

    >>> book_facts('x = Declaration(label="A", colour="#123456")\\nplt.plot(c=m.colour)')
    ["keyword 'colour'", "string '#123456'", "name 'colour'"]
    >>> book_facts("positions = [0]  # a colour at each position of a chapter")
    []
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        names = {ast.Name: lambda n: [("name", n.id)], ast.Attribute: lambda n: [("name", n.attr)],
                 ast.keyword: lambda n: [("keyword", n.arg)], ast.arg: lambda n: [("argument", n.arg)],
                 ast.alias: lambda n: [("import", n.asname or n.name.split(".")[-1])]}
        for kind, name in names.get(type(node), lambda n: [])(node):
            if name in BOOK_FACTS:
                found.append(f"{kind} {name!r}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.match(BOOK_STRINGS, node.value):
            found.append(f"string {node.value!r}")
    return found


def test_no_core_module_names_a_benchmark_a_colour_or_a_book_position():
    files = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
    found = {name: book_facts(path.read_text()) for name, path in files.items() if layer_of(name) == 0}
    assert {name: facts for name, facts in found.items() if facts} == {}


def test_the_layer_check_finds_an_upward_import():
    graph = {"dpbook.optim": {"dpbook.models.vision"}, "dpbook.models.vision": {"dpbook.checks"},
             "dpbook.checks": set()}
    assert upward_imports(graph) == {"dpbook.optim": ["dpbook.models.vision"]}
    assert layer_of("dpbook.methods.dcsgd") == 0 and layer_of("dpbook.repro.papers.dpdr") == 2


def test_the_checker_finds_a_cycle_and_a_deferred_import(tmp_path):
    package = tmp_path / "dpbook"
    (package / "repro").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "repro" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from dpbook.repro import b\n")
    (package / "repro" / "b.py").write_text("import dpbook.a\n")
    graph = import_graph(package)
    assert graph["dpbook.a"] == {"dpbook.repro.b"} and graph["dpbook.repro.b"] == {"dpbook.a"}
    assert set(cycle(graph)) == {"dpbook.a", "dpbook.repro.b"}
    assert any(is_repro(dep) for dep in graph["dpbook.a"])  # the core module a leaks into the repro layer


# --- nothing writes into the library's state from outside ----------------------------------------------------------

def dpbook_names(tree: ast.AST) -> set[str]:
    """The local names a file binds to dpbook modules and objects (``import dpbook.x as m``, ``from dpbook.x import
    A``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("dpbook"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dpbook") and node.level == 0:
            names.update(a.asname or a.name for a in node.names)
    return names


def writes_into(tree: ast.AST, names: set[str]) -> list[str]:
    """Assignments whose target is an attribute or item of one of ``names`` (``module.TABLE[k] = v``, ``A.x = v``)."""
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            root = target
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if root is not target and isinstance(root, ast.Name) and root.id in names:
                found.append(ast.unparse(target))
    return found


def notebook_code(path: Path) -> str:
    import json

    cells = json.loads(path.read_text())["cells"]
    lines = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return "\n".join("\n".join(line for line in cell.splitlines() if not line.lstrip().startswith(("%", "!")))
                     for cell in lines)


def test_no_notebook_or_module_assigns_into_library_state():
    """A registry is read, never patched: no notebook and no dpbook module assigns into an imported dpbook module or
    object (the DC-SGD chapter once wrote NAMES's size into ``reproduce.TRAIN_SIZES``)."""
    sources = {p.name: notebook_code(p) for p in sorted((PACKAGE.parent / "notebooks").glob("*.ipynb"))}
    sources |= {module_name(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}
    offences = {}
    for name, source in sources.items():
        tree = ast.parse(source)
        if found := writes_into(tree, dpbook_names(tree)):
            offences[name] = found
    assert not offences


def test_the_state_check_finds_a_planted_write():
    tree = ast.parse("from dpbook.repro import reproduce\nreproduce.TRAIN_SIZES['names'] = 1\nx = {}\nx['a'] = 2\n")
    assert writes_into(tree, dpbook_names(tree)) == ["reproduce.TRAIN_SIZES['names']"]


def protocol_dispatch(source: str) -> list[str]:
    """Comparisons of a protocol's name with a string (``protocol == "none"``, ``plan.charged_protocol != "lt"``,
    ``protocol in ("rdp", "ps")``): what a protocol class decides belongs in the class."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = [s for s in sides if (getattr(s, "id", None) or getattr(s, "attr", None) or "").endswith("protocol")]
        strings = [s for s in ast.walk(node) if isinstance(s, ast.Constant) and isinstance(s.value, str)]
        if named and strings:
            found.append(ast.unparse(node))
    return found


def test_no_protocol_is_dispatched_on_its_name_outside_the_protocol_classes():
    files = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if module_name(p) != "dpbook.protocols"}
    found = {name: protocol_dispatch(path.read_text()) for name, path in files.items()}
    assert {name: sites for name, sites in found.items() if sites} == {}


def test_the_dispatch_check_finds_a_planted_comparison():
    planted = "if base.protocol == 'none' or plan.charged_protocol in ('rdp', 'ps'):\n    pass\nif x == 'none': pass\n"
    assert protocol_dispatch(planted) == ["base.protocol == 'none'", "plan.charged_protocol in ('rdp', 'ps')"]
