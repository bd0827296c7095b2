r"""The papers' claims that the book's benchmarks test: one register, the paper's own numbers beside each claim.

A :class:`Claim` is one comparison a paper makes on MNIST (method ``a`` against method ``b`` under one tuning
protocol), read in the transcribed table that shows it (``data/paper/``). Both benchmark chapters, digits and
MNIST-5k, judge the same register (:data:`CLAIMS`, :func:`dpbook.repro.benchmark_report.judge`), so that no claim is
tested in one direction on one page and in the other on the next, and only at the budgets the paper reports it for.

Where a paper's text words a comparison otherwise than its own MNIST rows show it, the claim carries the text's words
(``says``, every sentence of the paper on it) and what they are (``reading``: a statement over all the paper's datasets,
or a text that says both), and the register tests the table (the evidence that has numbers); the chapters show both
(:func:`disagreements`). :func:`paper_sign` reads the direction of the paper's own difference with the rule the
benchmarks use on theirs.

>>> claim = next(c for c in CLAIMS if c.a == "psasc" and c.b == "psac")
>>> claim.where, {e: round(a - b, 2) for e, (a, b) in claim.paper_values().items()}, claim.table_agrees()
('DP-PSASC Table III', {3.0: 0.26}, True)
"""

from __future__ import annotations

__all__ = ["WORDS", "Claim", "paper_sign", "CLAIMS", "disagreements"]

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from dpbook.repro import results
from dpbook.repro.plotting import method_label

#: expectation -> verdict for a difference a - b significantly above (+1), below (-1) or within noise (0).
WORDS = {
    "higher": {1: "supports", -1: "contradicts", 0: "cannot tell"},
    "lower": {1: "contradicts", -1: "supports", 0: "cannot tell"},
    "not lower": {1: "supports", -1: "contradicts", 0: "consistent (within noise)"},
}

#: expectation -> the relation the claim states between a and b.
_RELATIONS = {"higher": ">", "lower": "<", "not lower": "≥"}

#: The expectations each sign of the paper's own difference agrees with.
_AGREES = {1: ("higher", "not lower"), -1: ("lower",), 0: ("not lower",)}


def paper_sign(row_a: Mapping, row_b: Mapping, *, runs: int = 5, z: float = 2.0) -> int:
    """The direction of the paper's difference a - b: where both rows print a standard deviation (over ``runs``
    runs, DC-SGD's Tables IV, V and VIII), by the benchmarks' rule (more than ``z`` Welch standard errors, else 0);
    where the table prints single values, their sign.

    >>> paper_sign({"value": 95.62, "std": 0.15}, {"value": 95.08, "std": 0.27})
    1
    >>> paper_sign({"value": 94.78, "std": 0.21}, {"value": 94.72, "std": 0.19}), paper_sign({"value": 1}, {"value": 2})
    (0, -1)
    """
    diff = row_a["value"] - row_b["value"]
    if "std" in row_a and "std" in row_b:
        se = math.sqrt((row_a["std"] ** 2 + row_b["std"] ** 2) / runs)
        return 0 if abs(diff) <= z * se else (1 if diff > 0 else -1)
    return (diff > 0) - (diff < 0)


@dataclass(frozen=True)
class Claim:
    """A paper's claim about MNIST: method ``a`` compared with ``b`` as ``expect`` says (:data:`WORDS`), under
    ``protocol``, in the transcribed ``table`` (rows selected by ``dataset``, the methods, the protocol and
    ``match``) at the budgets ``at`` (None: all the table reports). ``text`` is the claim as tested; ``says`` quotes
    the paper's sentences on it where its text words the comparison otherwise than its MNIST rows show it, and
    ``reading`` says what that difference is (the register tests the table: :func:`disagreements`)."""

    where: str
    text: str
    a: str
    b: str
    expect: str
    protocol: str
    table: str
    at: tuple[float, ...] | None = None
    says: tuple[str, ...] = ()
    reading: str = ""
    dataset: str = "mnist"
    match: Mapping = field(default_factory=dict)

    @property
    def short(self) -> str:
        """The claim as the chapters' tables show it: "a > b" (a above b), "a < b" (below) or "a ≥ b" (on par or
        above), in the book's method names.

        >>> CLAIMS[0].short, CLAIMS[2].short
        ('DC-SGD-E < DP-SGD', 'Du et al. ≥ DP-SGD')
        """
        return f"{method_label(self.a)} {_RELATIONS[self.expect]} {method_label(self.b)}"

    def rows(self, every_budget: bool = False) -> dict[float, tuple[dict, dict]]:
        """epsilon -> (a's row, b's row) of the paper's table (exactly one row each), at the claim's budgets or at
        every budget the table reports."""
        table = results.load_paper_table(self.table)
        out: dict[float, list] = {}
        for method, slot in ((self.a, 0), (self.b, 1)):
            for row in results.paper_rows(table, dataset=self.dataset, method=method, protocol=self.protocol,
                                          **self.match):
                e = float(row["epsilon"])
                if every_budget or self.at is None or e in self.at:
                    pair = out.setdefault(e, [None, None])
                    if pair[slot] is not None:
                        raise ValueError(f"{self.table}: two rows of {method} at eps={e:g}; narrow `match`")
                    pair[slot] = row
        return {e: (pair[0], pair[1]) for e, pair in sorted(out.items()) if None not in pair}

    def paper_values(self, every_budget: bool = False) -> dict[float, tuple[float, float]]:
        """epsilon -> (a's value, b's value) in the paper's table."""
        return {e: (ra["value"], rb["value"]) for e, (ra, rb) in self.rows(every_budget).items()}

    def table_agrees(self) -> bool:
        """Whether the paper's own difference points as ``expect`` says at every budget the claim is made for."""
        return all(self.expect in _AGREES[paper_sign(ra, rb)] for ra, rb in self.rows().values())


DC2, DC3, DC4, DC8 = "dcsgd_table2", "dcsgd_table3", "dcsgd_table4", "dcsgd_table8"
_SGD = {"optimizer": "sgd"}

CLAIMS: tuple[Claim, ...] = (
    Claim("DC-SGD Table IV", "free tuning: DC-SGD-E below DP-SGD", "dcsgd-e", "dpsgd", "lower", "none", DC4),
    Claim("DC-SGD Table IV", "free tuning: DC-SGD-P below DP-SGD at ε = 2, 4", "dcsgd-p", "dpsgd", "lower", "none",
          DC4, at=(2, 4)),
    Claim("DC-SGD Table IV", "free tuning: Du et al. on par with DP-SGD", "dynamic", "dpsgd", "not lower", "none",
          DC4, says=("Sec. VI-B: “The method of Du et al. can achieve the best performance under most settings”",),
          reading="a statement over all the paper's datasets: on MNIST, Du et al. and DP-SGD tie"),
    Claim("DC-SGD Table VIII", "free tuning: AutoClip above DP-SGD", "autos", "dpsgd", "higher", "none", DC8),
    Claim("DC-SGD Table VIII", "free tuning: AutoClip above DC-SGD-P", "autos", "dcsgd-p", "higher", "none", DC8,
          says=("App. G: “our work can still achieve a better or close performance compared to AutoClip”",
                "App. G: “For autoclip, it performs excellent on QNLI and MNIST”"),
          reading="the text says both: its sentence on MNIST agrees with the table"),
    Claim("DC-SGD Table III", "RDP: DP-SGD on par with or above DC-SGD-E", "dpsgd", "dcsgd-e", "not lower", "rdp",
          DC3, says=("Sec. VI-B: “In the results obtained using RDP, DC-SGD-E continues to exhibit the best "
                     "performance”",),
          reading="a statement over all the paper's datasets: on MNIST, DP-SGD is on par with DC-SGD-E or above it"),
    Claim("DC-SGD Table III", "RDP: DP-SGD (small grid) above Du et al.", "dpsgd", "dynamic", "higher", "rdp", DC3),
    Claim("DC-SGD Table III", "RDP: DC-SGD-P above Andrew et al.", "dcsgd-p", "adaclip", "higher", "rdp", DC3),
    Claim("DC-SGD Table II", "LT: DC-SGD-E above DP-SGD at ε = 2, 4", "dcsgd-e", "dpsgd", "higher", "lt", DC2,
          at=(2, 4), says=("Sec. VI-B: “with LT, DC-SGD-E performs well across various scenarios, especially on "
                           "complex datasets with a small privacy budget”",
                           "Sec. VI-B: “its improvement on the MNIST dataset is not as significant”"),
          reading="the text says both: on MNIST it claims a smaller gain than elsewhere"),
    Claim("DC-SGD Table II", "LT: DC-SGD-E above Du et al. at ε = 2, 4", "dcsgd-e", "dynamic", "higher", "lt", DC2,
          at=(2, 4)),
    Claim("DC-SGD Table II", "LT: DC-SGD-P below DP-SGD", "dcsgd-p", "dpsgd", "lower", "lt", DC2),
    Claim("DPDR Table 1", "DPDR above DP-SGD", "dpdr", "dpsgd", "higher", "none", "dpdr_table1", match=_SGD),
    Claim("DPDR Table 1", "DPDR above AutoClip", "dpdr", "autos", "higher", "none", "dpdr_table1", match=_SGD),
    Claim("DPDR Table 1", "DPDR above DIFF", "dpdr", "diff", "higher", "none", "dpdr_table1", match=_SGD),
    Claim("DPDR Table 1", "DPDR above DIFF2", "dpdr", "diff2", "higher", "none", "dpdr_table1", match=_SGD),
    Claim("DPDR Table 1", "DIFF below DP-SGD", "diff", "dpsgd", "lower", "none", "dpdr_table1", match=_SGD),
    Claim("DP-PSASC Table III", "DP-PSASC above DP-SGD", "psasc", "dpsgd", "higher", "none", "psasc_table3"),
    Claim("DP-PSASC Table III", "DP-PSASC above Auto-S", "psasc", "autos", "higher", "none", "psasc_table3"),
    Claim("DP-PSASC Table III", "DP-PSASC above DP-PSAC", "psasc", "psac", "higher", "none", "psasc_table3"),
    Claim("DP-PSASC Table III", "DP-PSASC* above DP-PSASC", "psasc-momentum", "psasc", "higher", "none",
          "psasc_table3"),
)
"""The register: every claim of the three papers about MNIST that the benchmarks test, in the papers' order."""


def disagreements(claims: Sequence[Claim] = CLAIMS) -> list[dict]:
    """The claims whose paper's text words the comparison otherwise than its MNIST rows show it: what the text
    says (each of its sentences on it), the table's difference a - b at every budget it reports (points), what the
    difference is, and what the register tests (:attr:`Claim.short`, under its protocol).

    >>> first = disagreements()[0]
    >>> first["where"], first["tested here"], first["the table's MNIST rows (a − b, points)"]
    ('DC-SGD Table IV', 'Du et al. ≥ DP-SGD (none)', 'ε = 1: -0.06, ε = 2: +0.01, ε = 4: -0.01')
    """
    return [{"where": c.where, "the text says": "; ".join(c.says),
             "the table's MNIST rows (a − b, points)": ", ".join(
                 f"ε = {e:g}: {a - b:+.2f}" for e, (a, b) in c.paper_values(every_budget=True).items()),
             "what it is": c.reading, "tested here": f"{c.short} ({c.protocol})"} for c in claims if c.says]
