"""What a method is, besides its algorithm, declared once, next to its class.

A method is one module: besides the algorithm, its class carries a :class:`Declaration` (``declaration = ...`` in
the class body, checked by :func:`dpbook.methods.registry.register`) of what is intrinsic to it:

- ``label``: its name as the papers write it, which tables and legends show;
- ``audit``: the :class:`~dpbook.methods.scenario.Scenario` of its white-box audit (hyperparameters, state, canary),
  whose hyperparameters are also its ``example`` (the bench and the tests build it with them);
- ``run``: the hyperparameters of a short training run whose noise comes from the run's budget
  (:meth:`~dpbook.methods.base.Method.from_plan`: an ``Experiment``, the tests).

What the book does with a method (its colour, its place in the book's lists, its grids in the benchmarks) is the
book's, one row per method: :mod:`dpbook.repro.cast`.

    >>> from dpbook.methods import METHODS
    >>> d = METHODS["dpsgd"].declaration
    >>> d.label, d.example, d.run
    ('DP-SGD', {'C': 1.0, 'sigma': 1.0}, {'C': 1.0})
"""

from __future__ import annotations

__all__ = ["Declaration"]

from dataclasses import dataclass
from typing import Mapping

from dpbook.methods.scenario import Scenario


@dataclass(frozen=True)
class Declaration:
    """What is intrinsic to one method besides its algorithm (see the module docstring)."""

    label: str
    audit: Scenario
    run: Mapping[str, object]

    @property
    def example(self) -> dict:
        """The hyperparameters the method is built with in examples, the bench and the tests: its audit's (every
        noise multiplier about 1)."""
        return dict(self.audit.hyperparameters)
