"""The book's cast of methods: for every registered method, its colour in every figure, its place in the book's
lists, tables and legends, and its hyperparameter grid in each benchmark.

A method module holds what is intrinsic to the method (its algorithm, releases, audit scenario, its name as the
papers write it and a short run's hyperparameters: :mod:`dpbook.methods.declaration`); what the book does with it is
here, one row of :data:`CAST` per method, in the book's order. Adding a method to the library is one module; adding
it to the book's figures and benchmarks is one row (``tests/test_declaration.py``: every registered method has its
row or is in :data:`LEFT_OUT`, with why).

    >>> in_book_order()[:3], CAST["dpsgd"].colour, CAST["dpsgd"].grids[DIGITS][:2]
    (['dpsgd', 'dcsgd-p', 'dcsgd-e'], '#1f77b4', [{'C': 0.1}, {'C': 0.5}])
"""

from __future__ import annotations

__all__ = ["DIGITS", "MNIST5K", "BENCHMARKS", "C_GRIDS", "MOMENTUM_AXES", "Role", "CAST", "LEFT_OUT", "in_book_order"]

from dataclasses import dataclass, field
from typing import Mapping

from dpbook import checks
from dpbook.tuning import grid_product

DIGITS = "digits-benchmark"
"""The digits benchmark's name (``dpbook.repro.digits_benchmark``): 4 tenths of the DC-SGD paper's Adam grids."""

MNIST5K = "mnist5k"
"""The MNIST-5k benchmark's name (``dpbook.repro.mnist5k_benchmark``): 2 tenths of the DC-SGD paper's Adam grids."""

BENCHMARKS = (DIGITS, MNIST5K)

C_GRIDS: Mapping[str, tuple[float, ...]] = {DIGITS: (0.1, 0.5, 1.0, 4.0), MNIST5K: (0.1, 1.0)}
"""Each benchmark's clipping thresholds: 4 and 2 of the DC-SGD paper's 10 values of C (Table VII), over its range."""

#: The momentum constants DP-PSASC* is tuned over [PSASC-15]: the paper calls them "the proper momentum parameters"
#: and never gives them, so the grid is stated. gamma1 = 1 is no outer momentum, 0.3 the order T^(-1/4) of
#: Theorem 3's gamma at the benchmarks' T of 80 to 110 steps; gamma0 = 0.5 and 0.9 a short and a long inner memory.
#: K0 = 2 throughout: a step costs K0 + 1 per-sample gradient passes.
MOMENTUM_AXES = {"gamma0": (0.5, 0.9), "gamma1": (0.3, 1.0)}


@dataclass(frozen=True)
class Role:
    """A method's part in the book: its colour (``#rrggbb``), its grid in each benchmark that runs it, and why a cell
    of its may be unreachable there (``unreachable_because``: phrases of the reason; a cell unreachable for any
    other reason is an incomplete benchmark, :func:`dpbook.repro.benchmark_report.check_complete`)."""

    colour: str
    grids: Mapping[str, list[dict]] = field(default_factory=dict)
    unreachable_because: tuple[str, ...] = ()

    def __post_init__(self):
        if not (self.colour.startswith("#") and len(self.colour) == 7):
            raise ValueError(f"a method's colour must be '#rrggbb', got {self.colour!r}")
        for study, grid in self.grids.items():
            checks.one_of("benchmark", study, BENCHMARKS)
            if not grid:
                raise ValueError(f"the grid of benchmark {study!r} is empty: give its points, or leave it out")


def _both(grid) -> dict[str, list[dict]]:
    """The grid ``grid(study)`` in each benchmark."""
    return {study: grid(study) for study in BENCHMARKS}


CAST: dict[str, Role] = {
    "dpsgd": Role("#1f77b4", _both(lambda study: grid_product(C=C_GRIDS[study]))),
    "dcsgd-p": Role("#d62728", {DIGITS: grid_product(p=(0.2, 0.4, 0.6, 0.8)), MNIST5K: grid_product(p=(0.4, 0.8))}),
    "dcsgd-e": Role("#ff7f0e", _both(lambda study: [{}])),
    # Andrew et al.'s count noise is fixed at sigma_b = B/20, which can leave no gradient noise for a small budget
    "adaclip": Role("#2ca02c", {DIGITS: grid_product(p=(0.2, 0.4, 0.5, 0.6, 0.8, 0.9), eta_C=(0.1, 0.2, 0.3)),
                                MNIST5K: grid_product(p=(0.2, 0.5, 0.8), eta_C=(0.1, 0.2, 0.3))},
                    unreachable_because=("sigma_b",)),
    "dynamic": Role("#9467bd", _both(lambda study: grid_product(C_0=C_GRIDS[study],
                                                                rho_C=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)))),
    "autos": Role("#8c564b", _both(lambda study: [{}])),
    "psac": Role("#e377c2", {DIGITS: grid_product(C=(1.0,), r=(1e-3, 1e-2, 1e-1)),
                             MNIST5K: grid_product(C=(1.0,), r=(1e-3, 1e-1))}),
    "psasc": Role("#bcbd22", {DIGITS: grid_product(C=(1.0,), r=(1e-2,), s=(0.3, 0.55, 0.8)),
                              MNIST5K: grid_product(C=(1.0,), r=(1e-2,), s=(0.55, 0.9))}),
    "psasc-momentum": Role("#17becf", {
        DIGITS: grid_product(C=(1.0,), r=(1e-2,), s=(0.3, 0.55, 0.8), K0=(2,), **MOMENTUM_AXES),
        MNIST5K: grid_product(C=(1.0,), r=(1e-2,), s=(0.55, 0.9), K0=(2,), gamma0=(0.5,),
                              gamma1=MOMENTUM_AXES["gamma1"])}),
    # full batch (sample rate 1): the benchmarks' Poisson minibatch setting, at a shared epoch budget, does not apply
    "psasc-momentum-gd": Role("#0e7c86"),
    # the DP-SGD phase clips at the same bound as the orthogonal parts (C_g = C_perp); the GDR steps alone, at the
    # paper's sigma_perp and sigma_alpha, can spend more than a small budget
    "dpdr": Role("#7f7f7f", {
        DIGITS: [{"C_perp": C, "C_g": C, "C_alpha": 0.3, "s": s} for C in (0.5, 1.0) for s in (5, 22)],
        MNIST5K: [{"C_perp": C, "C_g": C, "C_alpha": 0.3, "s": s} for C in C_GRIDS[MNIST5K] for s in (4, 16)]},
                 unreachable_because=("GDR steps",)),
    "diff": Role("#aec7e8", {DIGITS: grid_product(C_d=(0.1, 0.5, 1.0), C_g=(1.0,)),
                             MNIST5K: grid_product(C_d=C_GRIDS[MNIST5K], C_g=(1.0,))}),
    # the restart period and the restart-to-difference noise ratio are left open by the papers [DPDR-25]: tuned
    "diff2": Role("#98df8a", {
        DIGITS: grid_product(C_d=(0.1, 0.5, 1.0), C_g=(1.0,), restart_every=(5, 50), restart_noise_ratio=(1.0, 0.5)),
        MNIST5K: grid_product(C_d=C_GRIDS[MNIST5K], C_g=(1.0,), restart_every=(5, 50), restart_noise_ratio=(1.0,))}),
}
"""Method name -> its :class:`Role`, in the book's order (lists, tables, legends)."""

LEFT_OUT: Mapping[str, str] = {}
"""Registered methods the book does not show, each with why (none today: every method has its row)."""


def in_book_order() -> list[str]:
    """The names of the methods the book shows, in its order (:data:`CAST`'s)."""
    return list(CAST)
