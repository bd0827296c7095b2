"""One validation layer for every command line: each option's domain declared once, checked at the door.

A :class:`Domain` is what one option (or one notebook parameter) accepts: how its text is read, what values are
allowed, and how to fix a wrong one. As argparse's ``type=`` it refuses a value before any work starts, and argparse
exits 2 with ``argument --seeds: must be an integer >= 1, got '0' (the seeds per cell)``; :meth:`Domain.check`
applies the same rule to a value that is already typed (a chapter's papermill parameter, a TOML file's option).
Each domain also lists texts that fall outside it (:attr:`Domain.bad`): ``tests/test_cli.py`` drives every option of
every command line with them.

>>> seeds = integer(1, "the seeds per cell")
>>> seeds("3")
3
>>> seeds("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must be an integer >= 1, got '0' (the seeds per cell)
>>> seeds.bad
('0', '2.5', 'x')
>>> number(above=0).check("epsilon", [2.0, -1.0])
Traceback (most recent call last):
...
ValueError: epsilon must be a finite number > 0, got -1.0
>>> listing(choice(["dpsgd", "autos"], "method"))("dpsgd,autoz")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: unknown method 'autoz' (did you mean 'autos'?); valid: dpsgd, autos
"""

from __future__ import annotations

__all__ = ["Domain", "integer", "number", "choice", "listing", "either", "text", "assignment", "writable", "folder",
           "output_file", "input_file", "device", "Count", "Seed", "Points", "Positive", "NonNegative", "Probability",
           "Fraction", "PositiveFraction", "domain_of", "plain"]

import argparse
import errno
import functools
import math
import operator
import tempfile
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable

from dpbook.checks import did_you_mean


@dataclass(frozen=True, repr=False)
class Domain:
    """What one option accepts.

    ``read`` turns the command line's text into a value (a ValueError or TypeError: the text is not one; its message,
    when it has one, says why); ``allows`` says whether a value is in the domain; ``what`` names the domain
    (``"an integer >= 1"``) and ``fix`` says what the option means or how to write it. ``bad`` are texts outside the
    domain, for the tests.
    """

    what: str
    read: Callable[[str], Any]
    allows: Callable[[Any], bool] = lambda value: True
    fix: str = ""
    bad: tuple[str, ...] = ()

    @property
    def __name__(self) -> str:  # argparse names a type by it in some messages
        return self.what

    def __repr__(self) -> str:
        return f"Domain({self.what!r})"

    def problem(self, value: Any) -> str:
        """Why ``value`` is outside the domain: ``"must be ..., got ... (fix)"``."""
        return f"must be {self.what}, got {value!r}" + (f" ({self.fix})" if self.fix else "")

    def __call__(self, text: str) -> Any:
        """argparse's ``type=``: the value of ``text``, or an ArgumentTypeError saying what is wrong and the fix."""
        try:
            value = self.read(text)
        except (ValueError, TypeError, OSError) as err:
            reason = str(err) if isinstance(err, _Refused) else ""
            raise argparse.ArgumentTypeError(reason or self.problem(text)) from None
        if not self.allows(value):
            raise argparse.ArgumentTypeError(self.problem(text))
        return value

    def check(self, name: str, value: Any) -> Any:
        """``value`` given to the parameter ``name`` already typed: a ValueError naming it when the value, or an
        element of a list or a ``{dataset: value}`` dict, is outside the domain (None means "the default").

        >>> integer(1).check("epochs", {"mnist": 2, "svhn": 0})
        Traceback (most recent call last):
        ...
        ValueError: epochs must be an integer >= 1, got 0
        """
        for item in _items(value):
            if isinstance(item, str):  # one value, or a list as text ("0.1, 0.3", "[1, 2]")
                for part in [p.strip() for p in item.strip().strip("[]()").split(",") if p.strip()] or [item]:
                    try:
                        self(part)
                    except argparse.ArgumentTypeError as err:
                        raise ValueError(f"{name} {err}") from None
            elif not self.allows(item):
                raise ValueError(f"{name} {self.problem(item)}")
        return value


class _Refused(ValueError):
    """A text ``read`` refuses with its own message (which names the problem and the fix)."""


def _items(value: Any) -> Iterable:
    if value is None:
        return []
    if isinstance(value, dict):
        return [item for v in value.values() for item in _items(v)]
    if isinstance(value, (list, tuple, set)):
        return [item for v in value for item in _items(v)]
    return [value]


def _whole(text: str) -> int:
    """An integer written as one (``"3"``, ``"-1"``): not ``"2.5"``, ``"3.0"`` or ``"true"``."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise TypeError(text)
    return int(text)


def integer(minimum: int = 1, fix: str = "", maximum: int | None = None) -> Domain:
    """An integer from ``minimum`` (to ``maximum``).

    >>> integer(0, maximum=3)("3"), integer(0, maximum=3).bad
    (3, ('-1', '2.5', 'x', '4'))
    """
    what = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    def allows(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and minimum <= v and (maximum is None or v <= maximum)

    bad = (str(minimum - 1), "2.5", "x") + (() if maximum is None else (str(maximum + 1),))
    return Domain(what, _whole, allows, fix, bad)


def number(*, above: float | None = None, at_least: float | None = None, below: float | None = None,
           at_most: float | None = None, fix: str = "") -> Domain:
    """A finite real number in the stated range (open at ``above``/``below``, closed at ``at_least``/``at_most``).

    >>> delta = number(above=0, below=1, fix="delta")
    >>> delta.what, delta.bad
    ('a finite number > 0 and < 1', ('0', '1', 'nan', 'x'))
    """
    bounds = [(above, ">", lambda v, b: v > b), (at_least, ">=", lambda v, b: v >= b),
              (below, "<", lambda v, b: v < b), (at_most, "<=", lambda v, b: v <= b)]
    used = [(b, sign, test) for b, sign, test in bounds if b is not None]
    what = "a finite number" + " and".join(f" {sign} {b:g}" for b, sign, _ in used)

    def allows(v) -> bool:
        return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and all(test(v, b) for b, _, test in used))

    outside = [f"{b:g}" if sign in (">", "<") else f"{b - 1:g}" if sign == ">=" else f"{b + 1:g}"
               for b, sign, _ in used]
    return Domain(what, float, allows, fix, (*outside, "nan", "x"))


def choice(valid: Iterable[str], kind: str, fix: str = "") -> Domain:
    """One of the names ``valid``; a wrong one is named with the closest valid name and all of them."""
    valid = list(valid)

    def read(text: str) -> str:
        if text not in valid:
            raise _Refused(f"unknown {kind} {text!r}{did_you_mean(text, valid)}; valid: {', '.join(valid)}"
                           + (f" ({fix})" if fix else ""))
        return text

    return Domain(f"one of {', '.join(valid)}", read, lambda v: v in valid, fix, ("nonesuch",))


def listing(each: Domain, fix: str = "") -> Domain:
    """A comma-separated list of at least one value of the domain ``each``, each read and checked by it (empty parts
    dropped).

    >>> listing(number(above=0))("2,4.5,"), listing(integer(1)).bad
    ([2.0, 4.5], (',', '0', '2.5', 'x'))
    """
    def read(text: str) -> list:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts:
            raise _Refused(f"must be a comma-separated list, each {each.what}, got {text!r}"
                           + (f" ({fix or each.fix})" if fix or each.fix else ""))
        out = []
        for part in parts:
            try:
                out.append(each(part))
            except argparse.ArgumentTypeError as err:
                raise _Refused(str(err)) from None
        return out

    return Domain(f"a comma-separated list, each {each.what}", read, lambda v: all(map(each.allows, v)),
                  fix or each.fix, (",", *each.bad))


def either(domain: Domain, *words: str) -> Domain:
    """A value of ``domain``, or one of the ``words`` (a setting read from a table, e.g. ``"table2"``).

    >>> ratio = either(number(above=0), "table2")
    >>> ratio("table2"), ratio("2.5"), ratio.bad
    ('table2', 2.5, ('0', 'nan', 'x'))
    """
    def read(given: str):
        return given if given in words else domain.read(given)

    return Domain(f"{domain.what} or one of {', '.join(map(repr, words))}", read,
                  lambda v: v in words or domain.allows(v), domain.fix, domain.bad)


def text(what: str = "a non-empty text", fix: str = "") -> Domain:
    """Any non-empty text (a SLURM partition, an account)."""
    return Domain(what, str, lambda v: isinstance(v, str) and v.strip() != "", fix, ("",))


def assignment(fix: str = "e.g. epochs=2") -> Domain:
    """``NAME=VALUE`` (a ``--set`` or ``--grid`` argument); the text is kept, the name checked where it is used.

    >>> assignment()("epochs=2"), assignment().bad
    ('epochs=2', ('epochs', '=2'))
    """
    return Domain("NAME=VALUE", str, lambda v: "=" in v and v.split("=", 1)[0].strip() != "", fix, ("epochs", "=2"))


def writable(path: str | Path, fix: str = "the folder results are written to") -> Path:
    """``path`` as a folder this process can write in, or can create: the folder, else its nearest existing parent,
    is tried with a temporary file (nothing is left behind, nothing is created), so that a read-only or misspelt
    location stops a command before its first run; a ValueError says which and why.

    >>> writable("/dev/null/results")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: cannot write in '/dev/null/results' (NotADirectoryError: Not a directory): choose a folder you can ...
    """
    if not str(path).strip():
        raise ValueError(f"is empty ({fix})")
    there = Path(path).absolute()
    while not there.exists() and there != there.parent:
        there = there.parent
    try:
        if not there.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
        with tempfile.TemporaryFile(dir=there):
            pass
    except OSError as err:
        raise ValueError(f"cannot write in {str(path)!r} ({type(err).__name__}: {err.strerror or err}): choose a "
                         f"folder you can write to ({fix})") from None
    return Path(path)


def folder(fix: str = "the folder results are written to") -> Domain:
    """A folder this process can write in (:func:`writable`)."""
    def read(given: str) -> Path:
        try:
            return writable(given, fix)
        except ValueError as err:
            raise _Refused(str(err)) from None

    return Domain("a folder you can write in", read, fix=fix, bad=("/dev/null/folder",))


def output_file(fix: str = "the JSON file the results are written to") -> Domain:
    """A file to write: not a folder, in a folder this process can write in."""
    def read(given: str) -> Path:
        path = Path(given)
        if path.is_dir() or not given.strip() or given.endswith("/"):
            raise _Refused(f"{given!r} is a folder, not a file: give a file name such as {Path(given, 'out.json')} "
                           f"({fix})")
        folder(fix)(str(path.parent))
        return path

    return Domain("a file you can write", read, fix=fix, bad=(".", "/dev/null/out.json"))


def input_file(kind: str, load: Callable[[Path], Any] | None = None, fix: str = "", *,
               folders: bool = False) -> Domain:
    """An existing file of ``kind`` (or a folder, where ``folders`` and ``load`` reads one); ``load(path)``, when
    given, must read it (its error says why it cannot), so that a damaged or wrong file stops the command at the
    door. The value is the path."""
    def read(given: str) -> Path:
        path = Path(given)
        if not (path.is_file() or (folders and path.is_dir())):
            state = "is a folder" if path.is_dir() else "does not exist"
            raise _Refused(f"{given!r} {state}: give the path of {kind}" + (f" ({fix})" if fix else ""))
        if load is not None:
            try:
                load(path)
            except (ValueError, KeyError, TypeError, OSError) as err:
                detail = str(err)
                why = detail if detail.startswith(given) else f"{given} is not {kind} ({type(err).__name__}: {detail})"
                raise _Refused(why + (f": {fix}" if fix else "")) from None
        return path

    return Domain(kind, read, fix=fix, bad=("no/such/file.json",) + (() if folders else (".",)))


def device(fix: str = "cuda, cuda:0 or cpu") -> Domain:
    """A torch device this machine has: ``cpu``, or ``cuda``/``cuda:N`` where CUDA is available."""
    def read(given: str):
        import torch

        try:
            found = torch.device(given)
        except RuntimeError as err:
            raise _Refused(f"{given!r} is not a torch device ({str(err).splitlines()[0]}): use {fix}") from None
        if found.type == "cuda" and not torch.cuda.is_available():
            raise _Refused(f"{given}: CUDA is asked for, and torch.cuda.is_available() is False here (torch "
                           f"{torch.__version__}, CUDA build {torch.version.cuda}): run it on a machine with an "
                           "NVIDIA GPU and a CUDA build of torch (cpu runs the same path on the CPU, for tests)")
        return given

    return Domain("a torch device", read, fix=fix, bad=("gpu0",))


# The ranges a notebook's parameters cell gives its parameters as types (``epochs: Count = 8``, ``seeds: list[Seed]
# = [0, 1]``), each an ``Annotated`` type that carries its Domain; dpbook.repro.params.notebook_parameters checks
# them (every element of a list or a dict) before anything runs.

#: A notebook parameter of this type is an integer >= 1 (epochs, a batch size, a number of repetitions).
Count = Annotated[int, integer(1)]
#: A notebook parameter of this type is an integer >= 0 (a seed).
Seed = Annotated[int, integer(0)]
#: A notebook parameter of this type is an integer >= 2 (the points of a curve).
Points = Annotated[int, integer(2, "points of a curve")]
#: A notebook parameter of this type is a finite number > 0 (a budget, a learning rate, a threshold).
Positive = Annotated[float, number(above=0)]
#: A notebook parameter of this type is a finite number >= 0 (a noise multiplier that may be 0).
NonNegative = Annotated[float, number(at_least=0)]
#: A notebook parameter of this type is a number in (0, 1) (delta).
Probability = Annotated[float, number(above=0, below=1)]
#: A notebook parameter of this type is a number in [0, 1] (a target quantile, a fraction).
Fraction = Annotated[float, number(at_least=0, at_most=1)]
#: A notebook parameter of this type is a number in (0, 1] (a scaling coefficient s, a momentum weight).
PositiveFraction = Annotated[float, number(above=0, at_most=1)]


def domain_of(annotation: Any) -> Domain | None:
    """The :class:`Domain` an annotation carries (``Count``, ``list[Positive]``, ``dict[str, list[Positive]]``,
    ``Count | None``), or None.

    >>> domain_of(list[Count]).what, domain_of(int)
    ('an integer >= 1', None)
    """
    if typing.get_origin(annotation) is Annotated:
        return next((m for m in typing.get_args(annotation)[1:] if isinstance(m, Domain)), None)
    return next((d for d in map(domain_of, typing.get_args(annotation)) if d is not None), None)


def plain(annotation: Any) -> Any:
    """The annotation without its domains, as messages show it.

    >>> plain(list[Count]), plain(Positive | None)
    (list[int], float | None)
    """
    if typing.get_origin(annotation) is Annotated:
        return plain(typing.get_args(annotation)[0])
    args = typing.get_args(annotation)
    if not args:
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, map(plain, args))
    return typing.get_origin(annotation)[tuple(map(plain, args)) if len(args) > 1 else plain(args[0])]
