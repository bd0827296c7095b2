"""Notebook parameters as papermill and the sweep CLI give them, checked and converted the same way by every chapter.

``papermill -p seeds "[0, 1]"`` passes a string, ``-p methods dpsgd`` a single value, ``-y``/``-f params.yaml`` real
lists and dicts, and ``python -m dpbook.repro.sweep notebook ... --grid datasets=mnist,svhn`` one value per execution.
:func:`notebook_parameters`, called by every notebook in the cell right after its ``parameters`` cell
(:data:`CHECK_CELL`), turns each of them into the type of the parameter's default (or of its annotation, e.g.
``datasets: list[str] | None = None``), refuses a value of the wrong type with the parameter's name, and stops a
misspelt parameter name (papermill itself only warns). A per-dataset parameter may be one value for all or a
``{dataset: value}`` dict; the helpers below read such values and refuse unknown names listing the valid ones.

>>> listing("mnist,svhn"), listing("['mnist']"), listing(3.0), listing([1, 2], cast=float)
(['mnist', 'svhn'], ['mnist'], [3.0], [1.0, 2.0])
>>> per_dataset("{'mnist': 128}", "mnist", 256), per_dataset(None, "mnist", 256)
(128, 256)
"""

from __future__ import annotations

__all__ = [
    "CHECK_CELL", "python_literal", "parts", "text_value", "assignments", "listing", "mapping", "per_dataset",
    "check_known", "clean_float", "field_names", "from_notebook", "assignment",
    "record_cells", "notebook_parameters", "checked", "unknown_parameters", "parameters_cell", "infer_type", "convert"
]

import ast
import builtins
import dataclasses
import types
import typing
from typing import Any, Callable, Collection, Iterable

from pydantic import ConfigDict, TypeAdapter, ValidationError

from dpbook import checks
from dpbook.checks import Domain, did_you_mean, domain_of, first_repeated, plain

#: The cell every notebook runs right after its ``parameters`` cell (and papermill's injected one); it stays out of
#: the rendered book (tag ``remove-cell``). ``tools/stamp_cells.py`` writes it, ``tests/test_colab.py`` checks it.
#:
#: :meta hide-value:
CHECK_CELL = (
    "# The parameters, checked: papermill's -p text becomes each default's type (or the annotation's),\n"
    "# and a misspelt name stops the run here.\n"
    "from dpbook.repro.params import notebook_parameters\n"
    "\n"
    "notebook_parameters(globals());"
)


def python_literal(name: str, text: str, example: str = "[0, 1]") -> Any:
    """``text``, given for the parameter ``name``, as the Python literal it writes (a list, a tuple, a dict, ...); a
    ValueError names the parameter and shows how to write it like ``example``. Every text value in brackets is read
    here: by :func:`listing`, :func:`mapping`, :func:`convert` and the sweep's :func:`assignments`.

    >>> python_literal("cells", " [['mnist', 'dpsgd']]")
    [['mnist', 'dpsgd']]
    >>> python_literal("seeds", "[0, 1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: parameter 'seeds' = '[0, 1' is not a Python literal (SyntaxError: ...); write it like [0, 1]
    """
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError) as err:
        raise ValueError(f"parameter {name!r} = {text!r} is not a Python literal "
                         f"({type(err).__name__}: {err}); write it like {example}") from None


def parts(text: str) -> list[str]:
    """``text`` split on the commas outside brackets and quotes, each part stripped, empty ones dropped: the
    quoting rule of a sweep's ``--grid`` and ``--set``. A value with a comma is written in quotes (a text) or in
    brackets (a list).

    >>> parts("[1, 2],[3]"), parts(" mnist, svhn ,, "), parts("'runs/q,1',b")
    (['[1, 2]', '[3]'], ['mnist', 'svhn'], ["'runs/q,1'", 'b'])
    """
    found, depth, quote, current = [], 0, "", ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        else:
            depth += char in "[{("
            depth -= char in "]})"
        if char == "," and depth == 0 and not quote:
            found.append(current)
            current = ""
        else:
            current += char
    return [part.strip() for part in [*found, current] if part.strip()]


def text_value(name: str, text: str) -> Any:
    """The value a command line's ``text`` writes for the parameter ``name``, before the parameter's type is known:
    a Python literal in brackets or quotes (:func:`python_literal`: a quoted text is that text, without its
    quotes), true/false, none/null, a number, else the text itself.

    >>> [text_value("x", t) for t in ("4", "0.5", "True", "null", "['a', 'b']", "(1, 2)", "dpsgd", "'2'")]
    [4, 0.5, True, None, ['a', 'b'], (1, 2), 'dpsgd', '2']
    """
    stripped = text.strip()
    if stripped[:1] in ("[", "{", "(", "'", '"'):
        return python_literal(name, stripped)
    lowered = stripped.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(stripped)
        except ValueError:
            pass
    return stripped


def assignments(items: Iterable[str], *, lists: bool) -> dict[str, Any]:
    """The sweep's ``--grid name=v1,v2`` (``lists``: the values, split on the commas outside brackets) and
    ``--set name=value`` arguments, each value read by :func:`text_value`.

    >>> assignments(["epsilon=2,4.5", "methods=['dpsgd'],['a', 'b']"], lists=True)
    {'epsilon': [2, 4.5], 'methods': [['dpsgd'], ['a', 'b']]}
    >>> assignments(["smoke=true", "delta=none"], lists=False)
    {'smoke': True, 'delta': None}
    >>> assignments(["results_dir='/a,b'", "mode='render'"], lists=True)
    {'results_dir': ['/a,b'], 'mode': ['render']}
    >>> assignments(["epsilon"], lists=True)
    Traceback (most recent call last):
    ...
    ValueError: expected name=value, got 'epsilon'
    >>> assignments(["seed=1,2,1"], lists=True)
    Traceback (most recent call last):
    ...
    ValueError: --grid seed=1,2,1 repeats 1: give each value once
    """
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"expected name=value, got {item!r}")
        name, value = (part.strip() for part in item.split("=", 1))
        if not value:
            raise ValueError(f"{'--grid' if lists else '--set'} {item!r} gives {name} no value: write "
                             f"{name}={'v1,v2' if lists else 'value'} (quote a text with a comma: {name}='a,b')")
        if not lists:
            out[name] = text_value(name, value)
            continue
        out[name] = [text_value(name, v) for v in parts(value)]
        repeated = first_repeated(out[name])
        if repeated:
            raise ValueError(f"--grid {item} repeats {repeated[0]!r}: give each value once")
    return out


def assignment(fix: str = "e.g. epochs=2") -> Domain:
    """``NAME=VALUE`` (a ``--set`` or ``--grid`` argument); the text is kept, the name checked where it is used.

    >>> assignment()("epochs=2"), assignment().bad
    ('epochs=2', ('epochs', '=2'))
    """
    return Domain("NAME=VALUE", str, inside=lambda v: "=" in v and v.split("=", 1)[0].strip() != "", fix=fix,
                  bad=("epochs", "=2"))


def listing(value: Any, cast: Callable[[Any], Any] | None = None) -> list:
    """A list parameter: a list or tuple, its text (``"['a', 'b']"``, ``"(1, 2)"``), ``"a,b"``, or one value.

    Comma-separated parts are stripped and empty ones dropped; ``cast`` (e.g. ``float``, :func:`clean_float`) is
    applied to every element (string elements stripped first).

    >>> listing(" a, b ,, c")
    ['a', 'b', 'c']
    >>> listing("(1, 2)"), listing(("x",)), listing(None)
    ([1, 2], ['x'], [None])
    >>> listing("0.1, 0.30000000000000004", cast=clean_float)
    [0.1, 0.3]
    >>> listing([4, "8"], cast=str)
    ['4', '8']
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(("[", "(")):
            items = list(python_literal("value", text))
        else:
            items = parts(text)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    if cast is None:
        return items
    return [cast(v.strip() if isinstance(v, str) else v) for v in items]


def mapping(value: Any) -> Any:
    """A parameter that may be one value for every dataset or a ``{dataset: value}`` dict, also given as its text.

    >>> mapping("{'mnist': 64}"), mapping(64), mapping("sgd")
    ({'mnist': 64}, 64, 'sgd')
    """
    if isinstance(value, str) and value.strip().startswith("{"):
        return python_literal("value", value, "{'mnist': 64}")
    return value


def per_dataset(value: Any, dataset: str, default: Any) -> Any:
    """The value of a per-dataset parameter for ``dataset``: from a ``{dataset: value}`` dict (a dataset it does not
    name gets ``default``), one value for all, or None (``default``).

    >>> per_dataset({"mnist": 64}, "svhn", 256), per_dataset(32, "svhn", 256), per_dataset("{'svhn': 8}", "svhn", 1)
    (256, 32, 8)
    """
    value = mapping(value)
    if isinstance(value, dict):
        value = value.get(dataset)
    return default if value is None else value


def check_known(kind: str, names: Iterable, valid: Collection) -> None:
    """Raise a ValueError naming the ``names`` that are not in ``valid`` (each once), and the valid ones.

    >>> check_known("dataset(s)", ["mnist"], {"mnist": 1, "svhn": 2})
    >>> check_known("dataset(s)", ["mnist", "imagenet", "imagenet"], {"mnist": 1, "svhn": 2})
    Traceback (most recent call last):
    ...
    ValueError: unknown dataset(s) ['imagenet']; valid: ['mnist', 'svhn']
    >>> check_known("dataset(s)", ["mnist"], ["MNIST", "SVHN"])
    Traceback (most recent call last):
    ...
    ValueError: unknown dataset(s) ['mnist'] (did you mean 'MNIST'?); valid: ['MNIST', 'SVHN']
    """
    wrong = list(dict.fromkeys(n for n in names if n not in valid))
    if wrong:
        hint = next((h for h in (did_you_mean(n, valid) for n in wrong) if h), "")
        raise ValueError(f"unknown {kind} {wrong}{hint}; valid: {list(valid)}")


def clean_float(x: Any) -> float:
    """A grid value as a clean float (6 significant digits): a result file's key hashes the value, so ``0.1 * 3``
    and ``0.3`` must be the same run.

    >>> clean_float(0.1 * 3), clean_float("2e-3"), clean_float(1)
    (0.3, 0.002, 1.0)
    """
    return float(f"{float(x):.6g}")


def field_names(cls: type) -> list[str]:
    """The parameters of the dataclass ``cls`` (a chapter's ``Reproduction``): its fields set by ``__init__``.

    >>> import dataclasses
    >>> field_names(dataclasses.make_dataclass("Point", ["x", ("y", int, dataclasses.field(init=False))]))
    ['x']
    """
    return [f.name for f in dataclasses.fields(cls) if f.init]


def from_notebook(cls: type, namespace: dict):
    """An instance of the dataclass ``cls`` from the notebook's variables named as its fields (a chapter's
    ``Reproduction`` from its checked parameters).

    >>> import dataclasses
    >>> Point = dataclasses.make_dataclass("Point", ["x", "y"])
    >>> from_notebook(Point, {"x": 1, "y": 2, "mode": "render"})
    Point(x=1, y=2)
    """
    return cls(**{name: namespace[name] for name in field_names(cls)})


# ---------------------------------------------------------------------------------------------------------------
# The parameters of a notebook run


_CELLS: list[str] = []  # the sources of the cells this kernel ran since record_cells(), in order


def record_cells() -> None:
    """Record the source of every cell the notebook runs from now on (IPython's ``pre_run_cell`` event), so that
    :func:`notebook_parameters` can read the parameters cell. IPython's own history ``In`` is not enough: nbval
    runs cells without history. Every notebook's set-up cell (:data:`dpbook.repro.colab.SETUP_CELL`) calls it; outside
    IPython it does nothing.
    """
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None and _record not in shell.events.callbacks["pre_run_cell"]:
        shell.events.register("pre_run_cell", _record)


def _record(info) -> None:
    _CELLS.append(info.raw_cell)


def notebook_parameters(namespace: dict, cells: list[str] | None = None) -> dict:
    """Check and convert the parameters of the running notebook in place; return the ones given from outside.

    Call it (:data:`CHECK_CELL`) in the cell right after the ``parameters`` cell. From the sources of the cells run
    so far, ``cells`` (default: those :func:`record_cells` recorded, else IPython's history ``In``; the last one is
    the calling cell), it reads the ``parameters`` cell (assignments only, optionally annotated) and papermill's
    injected cell (``# Parameters``) when there is one, then:

    - stops when the injected cell names a parameter the notebook does not have, suggesting the closest names;
    - converts every parameter to its declared type (the annotation, else the type of its default), so that a
      list may be given as ``"[0, 1]"``, ``"0, 1"``, ``"(0, 1)"`` or one value, a dict as ``"{'mnist': 64}"``, a
      number as text; a value that cannot be converted is refused with the parameter's name.

    >>> cells = ["", "seeds = [0]\\nlr = 0.1", "# Parameters\\nseeds = '3, 4'\\n", "this cell"]
    >>> ns = {"In": cells, "seeds": "3, 4", "lr": 0.1}  # what the kernel holds after papermill's -p seeds "3, 4"
    >>> notebook_parameters(ns), ns["seeds"], ns["lr"]
    parameters given to this run, as it reads them: seeds = [3, 4]
    ({'seeds': [3, 4]}, [3, 4], 0.1)
    >>> ns = {"In": ["", "epochs = 2", "# Parameters\\nepoch = 1\\n", "this cell"], "epochs": 2, "epoch": 1}
    >>> notebook_parameters(ns)
    Traceback (most recent call last):
    ...
    ValueError: unknown parameter 'epoch' (did you mean 'epochs'?); this notebook's parameters: ['epochs']
    """
    history = cells if cells is not None else _CELLS or namespace.get("In")
    if not isinstance(history, list) or len(history) < 2:
        raise RuntimeError("notebook_parameters reads the cells the notebook ran (dpbook.repro.params.record_cells, "
                           "called by the notebook's first cell): run the notebook's cells in order")
    earlier = [cell for cell in history[:-1] if cell.strip()]
    injected = earlier.pop() if earlier and earlier[-1].lstrip().startswith("# Parameters") else None
    if not earlier:
        raise RuntimeError("no parameters cell ran before this one: run the notebook's cells in order")
    declared, annotations = parameters_cell(earlier[-1])
    given = list(parameters_cell(injected)[0]) if injected is not None else []
    unknown = unknown_parameters(given, declared)
    if unknown:
        raise ValueError(f"{unknown}; this notebook's parameters: {list(declared)}")
    for name, default in declared.items():
        namespace[name] = checked(name, namespace.get(name, default), default, annotations.get(name))
    if given:
        print("parameters given to this run, as it reads them: "
              + ", ".join(f"{name} = {namespace[name]!r}" for name in given))
    return {name: namespace[name] for name in given}


def checked(name: str, value: Any, default: Any, annotation: Any = None) -> Any:
    """``value`` given to the parameter ``name`` as the parameters cell declares it: converted to the annotation's
    type (else its default's, :func:`infer_type`), and checked against the range the annotation carries (``epochs:
    Count = 8``, ``seeds: list[Seed] = [0, 1]``: :mod:`dpbook.checks`'s ranges), each element of a list or a dict; a
    ValueError names the parameter.

    >>> from dpbook.checks import Count, Seed
    >>> checked("epochs", "3", 8, Count), checked("seeds", "0, 1", [0], list[Seed]), checked("lr", 1, 0.1)
    (3, [0, 1], 1.0)
    >>> checked("epochs", -3, 8, Count)
    Traceback (most recent call last):
    ...
    ValueError: epochs must be an integer >= 1, got -3
    """
    value = convert(name, value, infer_type(default) if annotation is None else annotation)
    domain = domain_of(annotation)
    return value if domain is None else domain.check(name, value)


def unknown_parameters(given, declared) -> str:
    """``"unknown parameter 'epoch' (did you mean 'epochs'?)"`` for the names of ``given`` not ``declared``, or ``""``.

    >>> unknown_parameters(["sedes", "xyz", "seeds"], ["seeds", "epochs"])
    "unknown parameters 'sedes' (did you mean 'seeds'?), 'xyz'"
    """
    unknown = [name for name in dict.fromkeys(given) if name not in declared]
    if not unknown:
        return ""
    return ("unknown parameter" + ("s " if len(unknown) > 1 else " ")
            + ", ".join(f"{name!r}{did_you_mean(name, declared)}" for name in unknown))


def parameters_cell(source: str) -> tuple[dict, dict]:
    """The parameters a cell of assignments defines, with their values, and the annotations it gives them (a type,
    or a range of :mod:`dpbook.checks`: :func:`checked`). The cell may import its ranges from there or leave the
    import to an earlier cell, so that a reader's first cell holds only the parameters. A union is written with
    ``typing``'s ``Optional`` and ``Union``, which papermill's own reader of a parameters cell understands (it warns
    "Passed unknown parameter" for an annotation written with ``|``).

    >>> cell = ("from dpbook.checks import Count\\n\\na = 1  # the first\\nb: list[str] | None = None\\n"
    ...         "c, d = 2.0, [a]\\ne: Count = 3")
    >>> values, annotations = parameters_cell(cell)
    >>> values, annotations["b"], annotations["e"].__metadata__[0].what
    ({'a': 1, 'b': None, 'c': 2.0, 'd': [1], 'e': 3}, list[str] | None, 'an integer >= 1')
    >>> parameters_cell("epochs: Count = 8")[1]["epochs"].__metadata__[0].what  # imported by an earlier cell
    'an integer >= 1'
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise RuntimeError(f"the cell before the parameter check is not the parameters cell ({err})") from None
    names = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign):
            names += [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  or isinstance(node, ast.ImportFrom) and node.module in ("dpbook.checks", "typing")):
            raise RuntimeError("the cell before the parameter check must be the parameters cell (assignments, and "
                               "the ranges and types it imports from dpbook.checks and typing), not one with "
                               f"{ast.unparse(node)[:60]!r}: run the notebook's cells in order")
    values: dict = {}
    code = compile(tree, "<parameters>", "exec", dont_inherit=True)  # annotations evaluated, as in the notebook
    exec(code, {"__builtins__": builtins, **_TYPE_NAMES}, values)  # noqa: S102 (own cell)
    return {name: values[name] for name in dict.fromkeys(names)}, dict(values.get("__annotations__", {}))


#: What a parameters cell's annotations may name without importing it: typing's and dpbook.checks' names.
_TYPE_NAMES = {"Any": Any, "Optional": typing.Optional, "Union": typing.Union, "Literal": typing.Literal,
               **{name: getattr(checks, name) for name in checks.__all__}}


def infer_type(default: Any) -> Any:
    """The type a parameter's value must have, read off its default (None: anything).

    >>> infer_type(3), infer_type([0.5, 1]), infer_type({"mnist": [1, 2]}), infer_type([["a", 1]]), infer_type(None)
    (<class 'int'>, list[float], dict[str, list[int]], list[list[typing.Any]], typing.Any)
    >>> infer_type([{"K0": 2, "gamma0": 0.5}])  # a record's values keep their own types
    list[dict[str, typing.Any]]
    """
    if default is None:
        return Any
    if isinstance(default, tuple):
        return tuple[_common(infer_type(x) for x in default), ...]
    if isinstance(default, (list, set)):
        return type(default)[_common(infer_type(x) for x in default)]
    if isinstance(default, dict):  # a record like {"K0": 2, "gamma0": 0.5} keeps each value's own type
        return dict[_common(infer_type(k) for k in default),
                    _common((infer_type(v) for v in default.values()), numbers=False)]
    return type(default)


def _common(kinds: Iterable, numbers: bool = True) -> Any:
    """One type for the elements of a default: theirs if they share it, float for a grid of ints and floats."""
    kinds = set(kinds)
    if numbers and kinds == {int, float}:
        return float
    return kinds.pop() if len(kinds) == 1 else Any


def convert(name: str, value: Any, target: Any) -> Any:
    """``value`` as a ``target`` (a type or annotation), from text or a single value where needed; a ValueError
    names the parameter.

    >>> convert("seeds", "0, 1", list[int]), convert("methods", "dpsgd", list[str]), convert("figures", 4, list[str])
    ([0, 1], ['dpsgd'], ['4'])
    >>> convert("batch_size", "{'mnist': 32}", dict[str, int] | int | None), convert("lr", 1, float)
    ({'mnist': 32}, 1.0)
    >>> convert("seeds", "[0, 1.5]", list[int])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: parameter 'seeds' = '[0, 1.5]' must be list[int]: item 1: Input should be a valid integer, ...
    """
    if target is Any and not isinstance(value, str):
        return value
    try:
        return _adapter(target).validate_python(_from_text(name, value, target))
    except ValidationError as err:
        problems = "; ".join((f"item {'.'.join(map(str, e['loc']))}: " if e["loc"] else "") + e["msg"]
                             for e in err.errors()[:3])
        raise ValueError(f"parameter {name!r} = {value!r} must be {_type_name(target)}: {problems}") from None


def _from_text(name: str, value: Any, target: Any) -> Any:
    """Text or a single value turned into the container ``target`` asks for (Python literal, or comma-separated)."""
    containers = {typing.get_origin(t) or t for t in _alternatives(target)} & {list, tuple, set, dict}
    wants_any = any(t is Any for t in _alternatives(target))
    if isinstance(value, str) and (containers or wants_any):
        text = value.strip()
        if text[:1] in "[({":
            return python_literal(name, value, _example(target))
        if containers & {list, tuple, set} and not any(t is str for t in _alternatives(target)):
            return parts(text)
    if containers & {list, tuple, set} and not isinstance(value, (list, tuple, set, dict)) and value is not None:
        if not any(isinstance(value, t) for t in _alternatives(target) if _is_class(t)):
            return [value]  # one value for a list parameter
    return value


def _alternatives(target: Any) -> tuple:
    if typing.get_origin(target) in (typing.Union, types.UnionType):
        return typing.get_args(target)
    return (target,)


_ADAPTERS: dict = {}


def _adapter(target: Any) -> TypeAdapter:
    key = repr(target)
    if key not in _ADAPTERS:
        _ADAPTERS[key] = TypeAdapter(target, config=ConfigDict(coerce_numbers_to_str=True))
    return _ADAPTERS[key]


def _is_class(target: Any) -> bool:
    """A plain class such as ``int``, not an annotation such as ``list[int]`` (which Python 3.10 calls a type)."""
    return isinstance(target, type) and typing.get_origin(target) is None


def _type_name(target: Any) -> str:
    target = plain(target)
    return target.__name__ if _is_class(target) else repr(target).replace("typing.", "")


def _example(target: Any) -> str:
    origins = {typing.get_origin(t) for t in _alternatives(target)}
    return "{'mnist': 64}" if dict in origins else "[0, 1]" if origins & {list, set} else "(0, 1)"
