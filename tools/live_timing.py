"""Find checks of live timings in the notebooks and the tests: a claim about a time measured while the check runs
is a claim about how busy the machine is, and fails on a loaded one.

A value is a *live timing* when it is computed from a clock (``time.perf_counter``, ``time.time``,
``time.monotonic``, ``time.process_time`` and their ``_ns`` forms, ``timeit``, ``datetime.now``) or from the bench's
live measurement (``interleaved_rounds_ms``), or from another live timing: through an assignment, a ``for`` target or
a comprehension, a container filled with one (``.append``, ``.extend``, ``.update``, an item assigned), or the call
of a function whose body computes one. The analysis follows names over a whole notebook (its cells share one
namespace) or a whole test module, so a name reused for something else is still counted: rename it.

A *check* is an ``assert`` statement, or an ``if`` whose body raises or calls ``pytest.fail``. A check whose condition
reads a live timing is reported. A time read from a recorded benchmark (``data/results/bench/...``) is not live:
compare the record's numbers instead (the fast-step chapter does). Printing a live time, or sizing a wait with a
deadline, is not a check.

    .venv/bin/python tools/live_timing.py [PATH ...]   # default: notebooks/*.ipynb and tests/**/*.py; exit 1 if found
"""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Functions whose call reads a clock or measures a time now: called by name, or as an attribute of anything.
CLOCKS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time", "process_time_ns",
          "thread_time", "thread_time_ns", "timeit", "default_timer", "interleaved_rounds_ms"}
#: Clocks called as an attribute of a module of this name only (``time.time()``, ``datetime.now()``).
MODULE_CLOCKS = {"time": {"time", "time_ns"}, "datetime": {"now", "utcnow"}}
FILLERS = {"append", "extend", "update", "add", "insert", "setdefault", "appendleft"}


@dataclass(frozen=True)
class Finding:
    path: str
    where: str  # "line 12" or "cell 20, line 3"
    source: str

    def __str__(self) -> str:
        return f"{self.path}, {self.where}: a check of a live timing: {self.source.strip()}"


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _bound(target: ast.AST) -> list[str]:
    """The names an assignment to ``target`` changes: ``a, b`` both, ``a[i]`` and ``a.x`` the container ``a``."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _bound(element)]
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return [name] if (name := _root_name(target)) else []


def _is_clock(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in CLOCKS
    if isinstance(func, ast.Attribute):
        if func.attr in CLOCKS:
            return True
        base = func.value.attr if isinstance(func.value, ast.Attribute) else getattr(func.value, "id", None)
        return func.attr in MODULE_CLOCKS.get(base, ())
    return False


def _scope(nodes):
    """The nodes of one scope: those of ``nodes`` and below, not entering a function's or a comprehension's own
    scope (the function or comprehension node itself is yielded)."""
    stack = list(nodes)[::-1]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*FUNCTIONS, *COMPREHENSIONS)):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _locals(function) -> set[str]:
    """The names a function binds (its parameters and its own assignments): Python's local names."""
    arguments = function.args
    own = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                           *filter(None, [arguments.vararg, arguments.kwarg])]}
    if isinstance(function, ast.Lambda):
        return own
    for node in _scope(function.body):
        if isinstance(node, ast.Assign):
            own.update(name for target in node.targets for name in _bound(target) if isinstance(target, ast.Name)
                       or isinstance(target, (ast.Tuple, ast.List)))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor)):
            own.update(_bound(node.target) if not isinstance(node.target, (ast.Attribute, ast.Subscript)) else [])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            own.add(node.name)
    return own


class _Scope:
    """The live timings of one scope (a notebook's cells, a module, a function's body).

    ``names``: the names that hold a live timing. ``functions`` maps a function that returns one to the positions
    of the live elements when it returns a tuple (``return log, perf_counter() - tic``: position 1, taken by
    ``log, seconds = train(...)``), or to None when the whole value is live."""

    def __init__(self, body: list[ast.AST], names=(), functions=None):
        self.body = body
        self.names: set[str] = set(names)
        self.functions: dict[str, frozenset[int] | None] = dict(functions or {})
        nodes = list(_scope(body))
        while self._spread(nodes):
            pass

    def live(self, expr: ast.AST | None, names: set[str] | None = None) -> bool:
        """Whether ``expr`` reads a live timing (a subscript's index is a key, not a value read; a lambda is a
        function, not a value; a comprehension's variables are its own)."""
        names = self.names if names is None else names
        if expr is None or isinstance(expr, ast.Lambda):
            return False
        if isinstance(expr, ast.Name):
            return expr.id in names
        if isinstance(expr, ast.Call) and (_is_clock(expr) or self._whole(expr)):
            return True
        if isinstance(expr, ast.Subscript):
            return self.live(expr.value, names)
        if isinstance(expr, COMPREHENSIONS):
            inner = set(names)
            for generator in expr.generators:
                inner -= set(_bound(generator.target))
                inner |= {n for part in self._loop_targets(generator.target, generator.iter, inner)
                          for n in _bound(part)}
            parts = [expr.key, expr.value] if isinstance(expr, ast.DictComp) else [expr.elt]
            return any(self.live(part, inner) for part in parts)
        return any(self.live(child, names) for child in ast.iter_child_nodes(expr))

    def _whole(self, call: ast.Call) -> bool:
        name = getattr(call.func, "id", None)
        return name in self.functions and self.functions[name] is None

    def _positions(self, value: ast.AST | None) -> frozenset[int] | None:
        """The live elements of a returned value: all (None), some of a tuple, or none (an empty set)."""
        if isinstance(value, ast.Tuple):
            return frozenset(i for i, element in enumerate(value.elts) if self.live(element))
        return None if self.live(value) else frozenset()

    def _assigned(self, target: ast.AST, value: ast.AST) -> list[ast.AST]:
        """The parts of ``target`` that receive a live timing from ``value``."""
        name = getattr(getattr(value, "func", None), "id", None)
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Call) and self.functions.get(name) is not None:
            return [t for i, t in enumerate(target.elts) if i in self.functions[name]]
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            return [t for t, v in zip(target.elts, value.elts) if self.live(v)]
        return [target] if self.live(value) else []

    def _loop_targets(self, target: ast.AST, iterable: ast.AST, names: set[str] | None = None) -> list[ast.AST]:
        """The parts of a loop's target that receive a live timing: the values of ``d.items()``, the elements of
        ``enumerate(x)``, and of ``zip(a, b)`` those of a live argument; otherwise the whole target."""
        if not self.live(iterable, names):
            return []
        if isinstance(target, ast.Tuple) and isinstance(iterable, ast.Call):
            func = iterable.func
            if isinstance(func, ast.Attribute) and func.attr == "items" and len(target.elts) == 2:
                return [target.elts[1]]
            if isinstance(func, ast.Name) and func.id == "enumerate" and len(target.elts) == 2:
                return [target.elts[1]]
            if isinstance(func, ast.Name) and func.id == "zip" and len(target.elts) == len(iterable.args):
                return [t for t, arg in zip(target.elts, iterable.args) if self.live(arg, names)]
        return [target]

    def _taint(self, targets) -> bool:
        new = {name for target in targets for name in _bound(target)} - self.names
        self.names |= new
        return bool(new)

    def inner(self, function) -> _Scope:
        """A function's scope: the names it reads from this scope, less its own."""
        body = function.body if isinstance(function.body, list) else [function.body]
        return _Scope(body, self.names - _locals(function), self.functions)

    def _returned(self, function) -> frozenset[int] | None:
        """What a function returns live (see ``functions``)."""
        scope = self.inner(function)
        returned = [scope._positions(node.value) for node in _scope(scope.body)
                    if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom))]
        if any(positions is None for positions in returned):
            return None
        return frozenset().union(*returned)

    def _spread(self, nodes) -> bool:
        changed = False
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                returned = self._returned(node)
                if returned != frozenset() and self.functions.get(node.name, frozenset()) != returned:
                    self.functions[node.name] = returned
                    changed = True
            elif isinstance(node, ast.Assign):
                changed |= self._taint([part for target in node.targets for part in self._assigned(target, node.value)])
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and self.live(node.value):
                changed |= self._taint([node.target])
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                changed |= self._taint(self._loop_targets(node.target, node.iter))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FILLERS
                  and any(self.live(arg) for arg in [*node.args, *(k.value for k in node.keywords)])):
                changed |= self._taint([node.func.value])
        return changed

    def checks(self):
        """(node, condition) of every check of this scope and of the functions defined in it, each with the
        scope it runs in, whose condition reads a live timing."""
        for node in _scope(self.body):
            if isinstance(node, ast.Assert) and self.live(node.test):
                yield node
            elif isinstance(node, ast.If) and _fails(node.body) and self.live(node.test):
                yield node
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from self.inner(node).checks()
            elif isinstance(node, ast.ClassDef):
                yield from _Scope(node.body, self.names, self.functions).checks()


def _fails(body: list[ast.stmt]) -> bool:
    """Whether a block raises or calls ``pytest.fail``."""
    for node in (n for statement in body for n in ast.walk(statement)):
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fail":
            return True
    return False


def find(units: list[tuple[str, str]], path: str) -> list[Finding]:
    """The live-timing checks in ``units``: (where, source) pairs that share one namespace (a notebook's code cells,
    or one module as a single unit)."""
    trees = [(where, source, ast.parse(source)) for where, source in units]
    scope = _Scope([statement for _, _, tree in trees for statement in tree.body])
    found = []
    for where, source, tree in trees:
        lines = source.splitlines()
        for node in _Scope(tree.body, scope.names, scope.functions).checks():
            found.append(Finding(path, f"{where}line {node.lineno}", lines[node.lineno - 1]))
    return found


def notebook_units(path: Path) -> list[tuple[str, str]]:
    """A notebook's code cells as units, IPython's magics and shell lines blanked (they are not Python)."""
    cells = json.loads(path.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    units = []
    for index, cell in enumerate(code):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        units.append((f"cell {index}, ", source))
    return units


def check(path: Path) -> list[Finding]:
    shown = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    if path.suffix == ".ipynb":
        return find(notebook_units(path), shown)
    return find([("", path.read_text())], shown)


def default_paths(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / "tests").rglob("*.py"))


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="tools/live_timing.py", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks and Python files (default: notebooks/, tests/)")
    args = parser.parse_args(argv)
    found = [f for path in (args.paths or default_paths()) for f in check(path.resolve())]
    for finding in found:
        print(finding)
    if found:
        print(f"live_timing: {len(found)} check(s) of a live timing: assert on a recorded benchmark "
              "(data/results/bench/...) instead, or with a margin measured at 4x load")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
