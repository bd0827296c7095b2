"""Every registered method's audit scenario, read from its declaration (:mod:`dpbook.methods.scenario` says how a
scenario makes the audit tight; each method module declares its own, ``declaration.audit``)."""

from __future__ import annotations

__all__ = ["SCENARIOS"]

from dpbook.methods import METHODS
from dpbook.methods.scenario import Scenario

SCENARIOS: dict[str, Scenario] = {name: cls.declaration.audit for name, cls in METHODS.items()}
"""Method name -> its :class:`~dpbook.methods.scenario.Scenario`, in the registry's order."""
