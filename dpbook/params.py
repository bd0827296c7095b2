"""Notebook parameters as papermill and the sweep CLI give them, parsed the same way by every reproduction chapter.

``papermill -p datasets "['mnist']"`` passes a string, ``python -m dpbook.sweep notebook ... --grid
datasets=mnist,svhn`` one value per execution, and a notebook's own default is a list; a per-dataset parameter may
be one value for all or a ``{dataset: value}`` dict (also as a string). These helpers turn all of them into plain
Python values, and refuse unknown names with a message that lists the valid ones.

>>> listing("mnist,svhn"), listing("['mnist']"), listing(3.0), listing([1, 2], cast=float)
(['mnist', 'svhn'], ['mnist'], [3.0], [1.0, 2.0])
>>> per_dataset("{'mnist': 128}", "mnist", 256), per_dataset(None, "mnist", 256)
(128, 256)
"""

from __future__ import annotations

import ast
from typing import Any, Callable, Collection, Iterable


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
            items = list(ast.literal_eval(text))
        else:
            items = [part.strip() for part in text.split(",") if part.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    if cast is None:
        return items
    return [cast(v.strip() if isinstance(v, str) else v) for v in items]


def optional_listing(value: Any, cast: Callable[[Any], Any] | None = None) -> list | None:
    """:func:`listing`, except that None (a parameter's "everything" default) stays None.

    >>> optional_listing(None) is None, optional_listing("1,2", cast=float)
    (True, [1.0, 2.0])
    """
    return None if value is None else listing(value, cast)


def mapping(value: Any) -> Any:
    """A parameter that may be one value for every dataset or a ``{dataset: value}`` dict, also given as its text.

    >>> mapping("{'mnist': 64}"), mapping(64), mapping("sgd")
    ({'mnist': 64}, 64, 'sgd')
    """
    if isinstance(value, str) and value.strip().startswith("{"):
        return ast.literal_eval(value)
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
    """
    wrong = list(dict.fromkeys(n for n in names if n not in valid))
    if wrong:
        raise ValueError(f"unknown {kind} {wrong}; valid: {list(valid)}")


def clean_float(x: Any) -> float:
    """A grid value as a clean float (6 significant digits): a result file's key hashes the value, so ``0.1 * 3``
    and ``0.3`` must be the same run.

    >>> clean_float(0.1 * 3), clean_float("2e-3"), clean_float(1)
    (0.3, 0.002, 1.0)
    """
    return float(f"{float(x):.6g}")
