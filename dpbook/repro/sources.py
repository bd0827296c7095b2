r"""Where every default of a reproduction or a benchmark comes from: the paper, or a reading of it.

A :class:`Source` says where a setting's value comes from: ``paper``, the place the paper states it (a table, a
figure, a section), and ``reading``, the id of the row of the book's Readings chapter that says what the paper
leaves open or where the book departs from it, and why. A setting the paper states exactly needs only ``paper``;
any other needs a ``reading``. Each reproduction (``Reproduction.SOURCES``) and each benchmark (``SOURCES`` of
:mod:`dpbook.repro.digits_benchmark` and :mod:`dpbook.repro.mnist5k_benchmark`) declares one per setting, the
chapters show them (:func:`sources_table`), and the suite fails on a default without one.

>>> print(sources_table({"epochs": 20, "s": 50}, {"epochs": Source("App. A.1"), "s": Source("Fig. 6", "DPDR-27")}))
| setting | default | the paper | reading |
|---|---|---|---|
| `epochs` | 20 | App. A.1 | — |
| `s` | 50 | Fig. 6 | [DPDR-27] |
"""

from __future__ import annotations

__all__ = ["READING_ID", "PLACE", "Source", "sources_table", "unsourced"]

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from dpbook.repro import results

#: A reading's id, as the Readings chapter defines it: a paper's prefix (a new paper adds its own), a number.
READING_ID = re.compile(r"(?:DCSGD|DPDR|PSASC)-[0-9]+")
#: A place in a paper: a table, a figure, an algorithm, an equation, a section or an appendix, after the paper's
#: name where the setting is not a paper's own (a benchmark's).
PLACE = re.compile(r"(?:(?:DC-SGD|DPDR|DP-PSASC) )?(?:Table|Fig\.|Alg\.|Eq\.|Sec\.|App\.) [0-9A-Z]+[A-Za-z0-9.\-–]*")


@dataclass(frozen=True)
class Source:
    """Where a setting's default comes from: ``paper`` (where the paper states it, e.g. ``"Table II"``; several
    places joined by "; "), ``reading`` (a Readings id such as ``"PSASC-15"``, required when the paper does not
    state the value; a benchmark's setting names the paper, e.g. ``"DC-SGD Sec. V-C"``). ``note``: a few words on
    the value, shown in the chapter's table."""

    paper: str = ""
    reading: str = ""
    note: str = ""

    def __post_init__(self):
        if not (self.paper or self.reading):
            raise ValueError("a Source needs the paper's place or a reading id")
        for place in filter(None, self.paper.split("; ")):
            if not PLACE.match(place):
                raise ValueError(f"not a place in a paper: {place!r} (e.g. 'Table II', 'Fig. 6', 'App. A.1')")
        if self.reading and not READING_ID.fullmatch(self.reading):
            raise ValueError(f"not a reading id: {self.reading!r} (e.g. 'DPDR-21')")


def sources_table(defaults: Mapping[str, object], sources: Mapping[str, Source]) -> str:
    """The settings and their sources as a Markdown table: a row per setting of ``sources``, with its default."""
    rows = [{"setting": f"`{name}`", "default": _shown(defaults[name]) + (f" ({s.note})" if s.note else ""),
             "the paper": s.paper or "—", "reading": f"[{s.reading}]" if s.reading else "—"}
            for name, s in sources.items()]
    return results.markdown_table(rows, ["setting", "default", "the paper", "reading"])


def _shown(value: object) -> str:
    """A default as the table shows it: numbers as written, lists without brackets, a grid of points by the values
    each key takes, long ones shortened."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
        axes = {k: list(dict.fromkeys(point[k] for point in value if k in point)) for point in value for k in point}
        text = f"{len(value)} points: " + "; ".join(f"{k} {_shown(v)}" for k, v in axes.items())
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, (list, tuple)) for v in value):
        text = ", ".join("/".join(map(str, v)) for v in value)
    elif isinstance(value, (list, tuple)):
        text = ", ".join(_shown(v) for v in value)
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, dict):
        text = ", ".join(f"{k} {_shown(v)}" for k, v in value.items()) or "none"
    else:
        text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def unsourced(settings: Iterable[str], sources: Mapping[str, Source]) -> list[str]:
    """The settings that have no source (in order), then the sources of no setting: what the suite refuses.

    >>> unsourced(["epochs", "lr"], {"epochs": Source("App. A.1"), "s": Source(reading="DPDR-27")})
    ['lr', 's (no such setting)']
    """
    settings = list(settings)
    return ([name for name in settings if name not in sources]
            + [f"{name} (no such setting)" for name in sources if name not in settings])
