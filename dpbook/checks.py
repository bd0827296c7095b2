"""Validation of hyperparameters: every bad value raises a ValueError that names it, its value and the valid range.

``hint`` adds what the parameter means or how to fix it, e.g. ``rate("sample_rate", q, "q = B/N")``.
"""

from __future__ import annotations

__all__ = ["real", "positive", "non_negative", "rate", "open_unit", "closed_unit", "integer", "one_of", "did_you_mean"]

import difflib
import math
import numbers


def _fail(name: str, requirement: str, value, hint: str):
    extra = f" ({hint})" if hint else ""
    raise ValueError(f"{name} must be {requirement}{extra}, got {value!r}")


def real(name: str, value, hint: str = "") -> float:
    """``value`` as a float (python, numpy or 0-d tensor numbers; not strings, bools or NaN)."""
    if isinstance(value, (str, bytes, bool)):
        _fail(name, "a real number", value, hint)
    try:
        v = float(value)
    except (TypeError, ValueError):
        _fail(name, "a real number", value, hint)
    if math.isnan(v):
        _fail(name, "a real number, not NaN", value, hint)
    return v


def positive(name: str, value, hint: str = "") -> float:
    """A finite number > 0."""
    v = real(name, value, hint)
    if not 0 < v < math.inf:
        _fail(name, "a finite number > 0", value, hint)
    return v


def non_negative(name: str, value, hint: str = "", *, allow_inf: bool = False) -> float:
    """A number >= 0 (finite unless ``allow_inf``)."""
    v = real(name, value, hint)
    if v < 0 or (v == math.inf and not allow_inf):
        _fail(name, ">= 0" if allow_inf else "a finite number >= 0", value, hint)
    return v


def rate(name: str, value, hint: str = "") -> float:
    """A sampling probability in (0, 1]."""
    v = real(name, value, hint)
    if not 0 < v <= 1:
        _fail(name, "in (0, 1]", value, hint or "a sampling probability")
    return v


def open_unit(name: str, value, hint: str = "") -> float:
    """A number strictly between 0 and 1 (delta, a target quantile p)."""
    v = real(name, value, hint)
    if not 0 < v < 1:
        _fail(name, "in (0, 1)", value, hint)
    return v


def closed_unit(name: str, value, hint: str = "") -> float:
    """A number in [0, 1] (a target quantile that may be 0 or 1, a momentum parameter)."""
    v = real(name, value, hint)
    if not 0 <= v <= 1:
        _fail(name, "in [0, 1]", value, hint)
    return v


def integer(name: str, value, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (python or numpy integers; not floats or bools)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        _fail(name, f"an integer >= {minimum}", value, "")
    return int(value)


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
        extra = f" ({hint})" if hint else ""
        raise ValueError(f"unknown {kind} {name!r}{did_you_mean(name, valid)}; valid: {', '.join(map(str, valid))}"
                         f"{extra}")


def did_you_mean(name: str, valid) -> str:
    """`` (did you mean 'x'?)`` for the valid name closest to ``name`` (case aside), or ``""``.

    >>> did_you_mean("epoch", ["epochs", "seeds"]), did_you_mean("xyz", ["epochs"])
    (" (did you mean 'epochs'?)", '')
    """
    lowered = {str(v).lower(): v for v in valid}
    close = difflib.get_close_matches(str(name).lower(), list(lowered), n=1)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""
