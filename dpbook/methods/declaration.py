"""What the book knows about a method, declared once, next to its class.

A method is one module: besides the algorithm, its class carries a :class:`Declaration` (``declaration = ...`` in
the class body, checked by :func:`dpbook.methods.registry.register`) that every other part of the book reads:

- ``label`` and ``colour``: its name in tables and legends, and its colour in every figure
  (:func:`dpbook.repro.plotting.method_colour`);
- ``position``: where it comes in the book's lists, tables and legends (:func:`dpbook.methods.in_book_order`);
- ``audit``: the :class:`~dpbook.methods.scenario.Scenario` of its white-box audit (hyperparameters, state, canary),
  whose hyperparameters are also its ``example`` (the bench and the tests build it with them);
- ``run``: the hyperparameters of a short training run whose noise comes from the run's budget
  (:meth:`~dpbook.methods.base.Method.from_plan`: an ``Experiment``, the tests);
- ``grids``: its hyperparameter grid in each benchmark (:data:`DIGITS`, :data:`MNIST5K`), absent from a benchmark
  that does not run it.

No table keyed by method names lives anywhere else: adding a method is adding a module.

    >>> from dpbook.methods import METHODS
    >>> d = METHODS["dpsgd"].declaration
    >>> d.label, d.example, d.run, len(d.grids[DIGITS])
    ('DP-SGD', {'C': 1.0, 'sigma': 1.0}, {'C': 1.0}, 4)
"""

from __future__ import annotations

__all__ = ["DIGITS", "MNIST5K", "C_GRIDS", "Declaration"]

from dataclasses import dataclass, field
from typing import Mapping

from dpbook import checks
from dpbook.methods.scenario import Scenario

DIGITS = "digits-benchmark"
"""The digits benchmark's name (``dpbook.repro.digits_benchmark``): 4 tenths of the DC-SGD paper's Adam grids."""

MNIST5K = "mnist5k"
"""The MNIST-5k benchmark's name (``dpbook.repro.mnist5k_benchmark``): 2 tenths of the DC-SGD paper's Adam grids."""

C_GRIDS: Mapping[str, tuple[float, ...]] = {DIGITS: (0.1, 0.5, 1.0, 4.0), MNIST5K: (0.1, 1.0)}
"""Each benchmark's clipping thresholds: 4 and 2 of the DC-SGD paper's 10 values of C (Table VII), over its range."""


@dataclass(frozen=True)
class Declaration:
    """Everything the book knows about one method besides its algorithm (see the module docstring)."""

    label: str
    colour: str
    position: int
    audit: Scenario
    run: Mapping[str, object]
    grids: Mapping[str, list[dict]] = field(default_factory=dict)

    def __post_init__(self):
        if not (self.colour.startswith("#") and len(self.colour) == 7):
            raise ValueError(f"colour of {self.label!r} must be '#rrggbb', got {self.colour!r}")
        checks.integer(f"position of {self.label!r}", self.position, minimum=0)
        for study in self.grids:
            checks.one_of(f"benchmark of {self.label!r}'s grid", study, C_GRIDS)

    @property
    def example(self) -> dict:
        """The hyperparameters the method is built with in examples, the bench and the tests: its audit's (every
        noise multiplier about 1)."""
        return dict(self.audit.hyperparameters)
