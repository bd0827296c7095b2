"""The values dpbook accepts, each kind declared once as a :class:`Domain` and checked at the door it comes in by.

A domain says what a value may be (``"an integer >= 1"``, ``"in (0, 1]"``), how to read it from text, and how to fix
a wrong one. The same domain serves the three doors:

- a public constructor or function checks its argument with one of the functions below, which returns the value
  typed or raises a ValueError that names the argument, its range and the value: ``checks.positive("lr", lr)``;
- a command line gives a domain as argparse's ``type=``, which refuses a text before any work starts (argparse exits
  2 with ``argument --seeds: must be an integer >= 1 (seeds per cell), got '0'``): ``type=integers(1, "seeds per
  cell")``;
- a notebook's parameters cell gives its parameters a range as their type (``epochs: Count = 8``), which
  :mod:`dpbook.repro.params` checks before anything runs.

>>> positive("lr", 0.0)
Traceback (most recent call last):
...
ValueError: lr must be a finite number > 0, got 0.0
>>> rate("sample_rate", 2)
Traceback (most recent call last):
...
ValueError: sample_rate must be in (0, 1] (a sampling probability), got 2
>>> seeds = integers(1, "seeds per cell")
>>> seeds("3")
3
>>> seeds("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must be an integer >= 1 (seeds per cell), got '0'
>>> listing(choice(["dpsgd", "autos"], "method"))("dpsgd,autoz")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: unknown method 'autoz' (did you mean 'autos'?); valid: dpsgd, autos

Each domain also lists texts outside it (:attr:`Domain.bad`): ``tests/test_cli.py`` drives every option of every
command line with them. The paths a command reads and writes are domains of :mod:`dpbook.io`.
"""

from __future__ import annotations

__all__ = ["Domain", "Refused", "integers", "numbers", "choice", "listing", "either", "text", "Count", "Seed",
           "Points", "Positive", "NonNegative", "Probability", "Fraction", "PositiveFraction", "domain_of", "plain",
           "real", "positive", "non_negative", "rate", "open_unit", "closed_unit", "integer", "one_of",
           "did_you_mean", "first_repeated"]

import argparse
import difflib
import functools
import math
import numbers as _numbers
import operator
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, Sequence


def _same(value: Any) -> Any:
    return value


def _anything(value: Any) -> bool:
    return True


@dataclass(frozen=True, repr=False)
class Domain:
    """What one kind of value may be.

    ``read`` turns a text (a command line's, a notebook parameter given as text) into a value: a ValueError or
    TypeError means the text is not one (a :class:`Refused` error says why in its own words). ``typed`` turns a value
    that is already typed into the domain's type (a numpy float or a 0-d tensor into a float), with a TypeError or
    ValueError when it is not one; ``inside`` says whether the typed value is in range. ``what`` names the domain
    and ``fix`` says what the value means or how to write it. ``bad`` are texts outside the domain, for the tests.
    """

    what: str
    read: Callable[[str], Any]
    typed: Callable[[Any], Any] = _same
    inside: Callable[[Any], bool] = _anything
    fix: str = ""
    bad: tuple[str, ...] = ()

    @property
    def __name__(self) -> str:  # argparse names a type by it in some messages
        return self.what

    def __repr__(self) -> str:
        return f"Domain({self.what!r})"

    def allows(self, value: Any) -> bool:
        """Whether the typed ``value`` is in the domain."""
        try:
            return bool(self.inside(self.typed(value)))
        except (TypeError, ValueError):
            return False

    def problem(self, value: Any, hint: str = "", what: str = "") -> str:
        """Why ``value`` is outside the domain: ``"must be ... (hint or fix), got ..."``; ``what`` names the
        requirement it fails when that is not the domain as a whole (``"a real number, not NaN"``)."""
        why = hint or self.fix
        return f"must be {what or self.what}" + (f" ({why})" if why else "") + f", got {value!r}"

    def value(self, name: str, value: Any, hint: str = "") -> Any:
        """``value`` given to the argument ``name``, as the domain's type, or a ValueError naming the argument, the
        range, the ``hint`` (else the domain's fix) and the value.

        >>> integers(0).value("seed", -1)
        Traceback (most recent call last):
        ...
        ValueError: seed must be an integer >= 0, got -1
        >>> numbers(above=0).value("lr", float("nan"))
        Traceback (most recent call last):
        ...
        ValueError: lr must be a real number, not NaN, got nan
        """
        try:
            typed = self.typed(value)
        except (TypeError, ValueError) as err:  # not of the domain's type: its message says which, if it has one
            raise ValueError(f"{name} {self.problem(value, hint, str(err))}") from None
        if not self.inside(typed):
            raise ValueError(f"{name} {self.problem(value, hint)}")
        return typed

    def __call__(self, text: str) -> Any:
        """argparse's ``type=``: the value of ``text``, or an ArgumentTypeError saying what is wrong and the fix."""
        try:
            value = self.read(text)
        except (ValueError, TypeError, OSError) as err:
            reason = str(err) if isinstance(err, Refused) else ""
            raise argparse.ArgumentTypeError(reason or self.problem(text)) from None
        if not self.allows(value):
            raise argparse.ArgumentTypeError(self.problem(text))
        return value

    def check(self, name: str, value: Any) -> Any:
        """``value`` given to the notebook or chapter parameter ``name``: a ValueError naming it when the value, or
        an element of a list or a ``{dataset: value}`` dict, is outside the domain (None means "the default"), or
        when a list of the domain's values is empty or repeats one (two seeds 0 would be one run counted twice); a
        text is read as one value or a list.

        >>> integers(1).check("epochs", {"mnist": 2, "svhn": 0})
        Traceback (most recent call last):
        ...
        ValueError: epochs must be an integer >= 1, got 0
        >>> integers(0).check("seeds", [0, 1, 0])
        Traceback (most recent call last):
        ...
        ValueError: seeds [0, 1, 0] repeats 0: give each value once
        """
        for values in _lists(value):
            if not values:
                raise ValueError(f"{name} is an empty list: give at least one value")
            repeated = first_repeated(values)
            if repeated:
                raise ValueError(f"{name} {list(values)!r} repeats {repeated[0]!r}: give each value once")
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


class Refused(ValueError):
    """A text a domain's ``read`` refuses with its own message (which names the problem and the fix)."""


def _items(value: Any) -> Iterable:
    if value is None:
        return []
    if isinstance(value, dict):
        return [item for v in value.values() for item in _items(v)]
    if isinstance(value, (list, tuple, set)):
        return [item for v in value for item in _items(v)]
    return [value]


def first_repeated(values: Sequence) -> list:
    """``[v]`` for the first value of ``values`` that an earlier one equals, else ``[]``.

    >>> first_repeated([0, 1, 0, 1]), first_repeated([1.0, 2.0])
    ([0], [])
    """
    return next(([v] for i, v in enumerate(values) if v in values[:i]), [])


def _lists(value: Any) -> Iterable[list | tuple]:
    """The lists and tuples in ``value`` (itself, or the values of a ``{dataset: list}`` dict)."""
    if isinstance(value, dict):
        return [found for v in value.values() for found in _lists(v)]
    return [value] if isinstance(value, (list, tuple)) else []


def _whole(text: str) -> int:
    """An integer written as one (``"3"``, ``"-1"``): not ``"2.5"``, ``"3.0"`` or ``"true"``."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise TypeError(text)
    return int(text)


def _integral(value: Any) -> int:
    """A python or numpy integer as an int; not a float or a bool (a TypeError without a message: the domain's
    name says what is wanted)."""
    if isinstance(value, bool) or not isinstance(value, _numbers.Integral):
        raise TypeError()
    return int(value)


def _real(value: Any) -> float:
    """A python, numpy or 0-d tensor number as a float; not a text, a bool or NaN (the error says which)."""
    if isinstance(value, (str, bytes, bool)):
        raise TypeError("a real number")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError("a real number") from None
    if math.isnan(v):
        raise ValueError("a real number, not NaN")
    return v


@functools.lru_cache(maxsize=None)
def integers(minimum: int = 1, fix: str = "", maximum: int | None = None) -> Domain:
    """The integers from ``minimum`` (to ``maximum``).

    >>> integers(0, maximum=3)("3"), integers(0, maximum=3).bad
    (3, ('-1', '2.5', 'x', '4'))
    """
    what = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")

    def inside(v: int) -> bool:
        return minimum <= v and (maximum is None or v <= maximum)

    bad = (str(minimum - 1), "2.5", "x") + (() if maximum is None else (str(maximum + 1),))
    return Domain(what, _whole, _integral, inside, fix, bad)


@functools.lru_cache(maxsize=None)
def numbers(*, above: float | None = None, at_least: float | None = None, below: float | None = None,
            at_most: float | None = None, fix: str = "", finite: bool = True) -> Domain:
    """The real numbers in a range (open at ``above``/``below``, closed at ``at_least``/``at_most``), finite unless
    ``finite`` is False; never NaN.

    >>> delta = numbers(above=0, below=1, fix="delta")
    >>> delta.what, delta.bad, numbers(above=0).what, numbers(at_least=0, finite=False).what
    ('in (0, 1)', ('0', '1', 'nan', 'x'), 'a finite number > 0', 'a number >= 0')
    """
    low = (above, "(", ">") if above is not None else (at_least, "[", ">=") if at_least is not None else None
    high = (below, ")", "<") if below is not None else (at_most, "]", "<=") if at_most is not None else None
    if low and high:
        what = f"in {low[1]}{low[0]:g}, {high[0]:g}{high[1]}"
    else:
        kind = "a finite number" if finite else "a number" if low or high else "a real number"
        what = kind + "".join(f" {sign} {b:g}" for b, _, sign in filter(None, (low, high)))

    def inside(v: float) -> bool:
        return ((math.isfinite(v) or not finite)
                and (above is None or v > above) and (at_least is None or v >= at_least)
                and (below is None or v < below) and (at_most is None or v <= at_most))

    outside = [f"{b:g}" if sign in (">", "<") else f"{b - 1:g}" if sign == ">=" else f"{b + 1:g}"
               for b, _, sign in filter(None, (low, high))]
    return Domain(what, float, _real, inside, fix, (*outside, "nan", "x"))


def _unknown(kind: str, name: str, valid: list, hint: str = "") -> str:
    return (f"unknown {kind} {name!r}{did_you_mean(name, valid)}; valid: {', '.join(map(str, valid))}"
            + (f" ({hint})" if hint else ""))


def choice(valid: Iterable[str], kind: str, fix: str = "") -> Domain:
    """One of the names ``valid``; a wrong one is named with the closest valid name and all of them."""
    valid = list(valid)

    def read(text: str) -> str:
        if text not in valid:
            raise Refused(_unknown(kind, text, valid, fix))
        return text

    return Domain(f"one of {', '.join(valid)}", read, inside=lambda v: v in valid, fix=fix, bad=("nonesuch",))


def listing(each: Domain, fix: str = "") -> Domain:
    """A comma-separated list of at least one value of the domain ``each``, each read and checked by it (empty parts
    dropped).

    >>> listing(numbers(above=0))("2,4.5,"), listing(integers(1)).bad
    ([2.0, 4.5], (',', '0', '2.5', 'x'))
    """
    def read(text: str) -> list:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts:
            raise Refused(f"must be a comma-separated list, each {each.what}"
                          + (f" ({fix or each.fix})" if fix or each.fix else "") + f", got {text!r}")
        out = []
        for part in parts:
            try:
                out.append(each(part))
            except argparse.ArgumentTypeError as err:
                raise Refused(str(err)) from None
        return out

    return Domain(f"a comma-separated list, each {each.what}", read, inside=lambda v: all(map(each.allows, v)),
                  fix=fix or each.fix, bad=(",", *each.bad))


def either(domain: Domain, *words: str) -> Domain:
    """A value of ``domain``, or one of the ``words`` (a setting read from a table, e.g. ``"table2"``).

    >>> ratio = either(numbers(above=0), "table2")
    >>> ratio("table2"), ratio("2.5"), ratio.bad
    ('table2', 2.5, ('0', 'nan', 'x'))
    """
    def read(given: str):
        return given if given in words else domain.read(given)

    return Domain(f"{domain.what} or one of {', '.join(map(repr, words))}", read,
                  inside=lambda v: v in words or domain.allows(v), fix=domain.fix, bad=domain.bad)


def text(what: str = "a non-empty text", fix: str = "") -> Domain:
    """Any non-empty text (a SLURM partition, an account)."""
    return Domain(what, str, inside=lambda v: isinstance(v, str) and v.strip() != "", fix=fix, bad=("",))


# The ranges a notebook's parameters cell gives its parameters as types (``epochs: Count = 8``, ``seeds: list[Seed]
# = [0, 1]``), each an ``Annotated`` type that carries its Domain; dpbook.repro.params.notebook_parameters checks
# them (every element of a list or a dict) before anything runs.

#: A notebook parameter of this type is an integer >= 1 (epochs, a batch size, a number of repetitions).
Count = Annotated[int, integers(1)]
#: A notebook parameter of this type is an integer >= 0 (a seed).
Seed = Annotated[int, integers(0)]
#: A notebook parameter of this type is an integer >= 2 (the points of a curve).
Points = Annotated[int, integers(2, "points of a curve")]
#: A notebook parameter of this type is a finite number > 0 (a budget, a learning rate, a threshold).
Positive = Annotated[float, numbers(above=0)]
#: A notebook parameter of this type is a finite number >= 0 (a noise multiplier that may be 0).
NonNegative = Annotated[float, numbers(at_least=0)]
#: A notebook parameter of this type is a number in (0, 1) (delta).
Probability = Annotated[float, numbers(above=0, below=1)]
#: A notebook parameter of this type is a number in [0, 1] (a target quantile, a fraction).
Fraction = Annotated[float, numbers(at_least=0, at_most=1)]
#: A notebook parameter of this type is a number in (0, 1] (a scaling coefficient s, a momentum weight).
PositiveFraction = Annotated[float, numbers(above=0, at_most=1)]


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


# The checks of the constructors and functions: each returns the value typed (a float, an int), or raises a
# ValueError that names the argument, its domain, the hint (what it means, how to fix it) and the value.

_REAL, _POSITIVE = numbers(finite=False), numbers(above=0)
_NON_NEGATIVE, _NON_NEGATIVE_OR_INF = numbers(at_least=0), numbers(at_least=0, finite=False)
_RATE = numbers(above=0, at_most=1, fix="a sampling probability")
_OPEN_UNIT, _CLOSED_UNIT = numbers(above=0, below=1), numbers(at_least=0, at_most=1)


def real(name: str, value, hint: str = "") -> float:
    """``value`` as a float (python, numpy or 0-d tensor numbers, infinities too; not texts, bools or NaN)."""
    return _REAL.value(name, value, hint)


def positive(name: str, value, hint: str = "") -> float:
    """A finite number > 0."""
    return _POSITIVE.value(name, value, hint)


def non_negative(name: str, value, hint: str = "", *, allow_inf: bool = False) -> float:
    """A number >= 0 (finite unless ``allow_inf``)."""
    return (_NON_NEGATIVE_OR_INF if allow_inf else _NON_NEGATIVE).value(name, value, hint)


def rate(name: str, value, hint: str = "") -> float:
    """A sampling probability in (0, 1]."""
    return _RATE.value(name, value, hint)


def open_unit(name: str, value, hint: str = "") -> float:
    """A number strictly between 0 and 1 (delta, a target quantile p)."""
    return _OPEN_UNIT.value(name, value, hint)


def closed_unit(name: str, value, hint: str = "") -> float:
    """A number in [0, 1] (a target quantile that may be 0 or 1, a momentum parameter)."""
    return _CLOSED_UNIT.value(name, value, hint)


def integer(name: str, value, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (python or numpy integers; not floats or bools)."""
    return integers(minimum).value(name, value)


def one_of(kind: str, name: str, valid, hint: str = "") -> None:
    """Raise a ValueError when ``name`` is not among ``valid``, naming it, the closest valid name (case aside), all
    of them and the ``hint``.

    >>> one_of("hyperparameter", "c", ["C", "sigma"])
    Traceback (most recent call last):
    ...
    ValueError: unknown hyperparameter 'c' (did you mean 'C'?); valid: C, sigma
    """
    valid = list(valid)
    if name not in valid:
        raise ValueError(_unknown(kind, name, valid, hint))


def did_you_mean(name: str, valid) -> str:
    """`` (did you mean 'x'?)`` for the valid name closest to ``name`` (case aside), or ``""``.

    >>> did_you_mean("epoch", ["epochs", "seeds"]), did_you_mean("xyz", ["epochs"])
    (" (did you mean 'epochs'?)", '')
    """
    lowered = {str(v).lower(): v for v in valid}
    close = difflib.get_close_matches(str(name).lower(), list(lowered), n=1)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""
