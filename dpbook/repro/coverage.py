r"""What the book does with every table and figure of a paper: reproduced, reproducible in run mode, a CPU analogue,
transcribed, or left out.

Each reproduction declares its paper's items (``Reproduction.COVERAGE``): every numbered table and figure the paper
prints, and for each an :class:`Item` saying what it shows and what the book does with it. The reproduction chapter
shows the list (:func:`coverage_table`), and the suite fails when a table or figure of the paper is missing from it
(:func:`missing_items`).

>>> items = {"Table 1": Item("accuracies", "reproducible in run mode", "`Reproduction(...)`")}
>>> missing_items(items, tables=2, figures=0, numerals="arabic")
['Table 2']
"""

from __future__ import annotations

__all__ = ["STATUSES", "Item", "coverage_table", "missing_items"]

from dataclasses import dataclass
from typing import Mapping

from dpbook.repro import results

#: What the book does with an item. "reproduced": every build of the book computes it (no GPU); "reproducible in run
#: mode": the chapter trains it when asked (``mode="run"``, a GPU at the paper's scale) and shows it from the result
#: files, so that until those exist the page holds the paper's numbers only.
STATUSES = ("reproduced", "reproducible in run mode", "CPU analogue", "transcribed", "left out")

_ROMAN = ("I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII")


@dataclass(frozen=True)
class Item:
    """One table or figure of a paper: what it ``shows``, the book's ``status`` (:data:`STATUSES`) and ``how``:
    the call or chapter that reproduces it, the chapter of its CPU analogue, the file it is transcribed in, or
    why it is left out."""

    shows: str
    status: str
    how: str

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if not self.how:
            raise ValueError("say how the item is covered (the call, the chapter, the file, or why it is left out)")


def coverage_table(items: Mapping[str, Item]) -> str:
    """The items as a Markdown table, in the paper's order (tables, then figures)."""
    rows = [{"item": name, "shows": item.shows, "status": item.status, "how": item.how}
            for name, item in items.items()]
    return results.markdown_table(rows, ["item", "shows", "status", "how"],
                                  ["table or figure", "what it shows", "in the book", "how, or why not"])


def missing_items(items: Mapping[str, Item], *, tables: int, figures: int, numerals: str) -> list[str]:
    """The paper's tables ("Table 1" or "Table I", by ``numerals``: "arabic" or "roman") and figures ("Fig. 1")
    that ``items`` lacks, then the items that are neither."""
    names = [f"Table {_ROMAN[i] if numerals == 'roman' else i + 1}" for i in range(tables)]
    names += [f"Fig. {i + 1}" for i in range(figures)]
    return [n for n in names if n not in items] + [f"{n} (not in the paper)" for n in items if n not in names]
