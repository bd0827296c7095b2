r"""The canary's noise-free effect swept over norms and directions, and the worst canary found.

A statistical audit probes one canary. A method whose weights break the declared bound only for some norms (a band)
or some directions (against the other examples' sum, when the sum rather than each example is clipped) passes an
audit whose canary misses them. Before any trial, :func:`sweep` releases the step with the noise switched off for a
log grid of canary norms (:data:`NORMS`) in each of these directions:

- ``"declared"``: the scenario's own canary direction (:math:`u = e_0` for most methods);
- ``"orthogonal"``: :math:`u = e_0`, orthogonal to every background gradient (when it differs from the declared one);
- ``"along"`` and ``"against"``: plus and minus the background's sum :math:`\sum_i g_i`, normalised;

and measures the canary's effect on the noisy gradient the optimizer receives, :math:`\lVert\Delta\rVert`, the
release with the canary minus the release without it. No effect may exceed the declared sensitivity
(:func:`~dpbook.methods.base.gradient_sensitivity`). :func:`worst_canary` then hands the statistical audit the
canary of the largest effect; the scenario's own canary is kept unless another is strictly worse, since it also
saturates the method's other releases (AdaClip's count, DC-SGD's histogram) as its scenario explains.

    >>> from dpbook.methods import METHODS
    >>> s = sweep(METHODS["psasc"], METHODS["psasc"].declaration.audit)
    >>> s.sensitivity, round(s.worst_shift, 6), s.worst_shift <= s.sensitivity
    (2.0, 2.0, True)
"""

from __future__ import annotations

__all__ = ["NORMS", "Sweep", "directions", "sweep", "worst_canary"]

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from dpbook.audit.worlds import NoNoise, World, prepared, with_canary
from dpbook.methods.scenario import Scenario, background, dirac
from dpbook.per_sample import Grads

NORMS = np.logspace(-6, 7, 131)
"""The canary norms swept: 10 per decade from :math:`10^{-6}` to :math:`10^7`."""


def _unit(grads: Grads) -> Grads:
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    return [g / norm for g in grads]


def directions(cls: type, scenario: Scenario) -> dict[str, Grads]:
    """The canary directions swept (unit vectors, one tensor per parameter): see the module docstring."""
    bg = background(scenario.background_norms)
    declared = _unit(scenario.canary_direction(prepared(cls, scenario, bg)))
    total = _unit([g.sum(0) for g in bg])
    out = {"declared": declared}
    if any(not torch.allclose(a, b) for a, b in zip(declared, dirac())):
        out["orthogonal"] = dirac()
    return {**out, "along": total, "against": [-t for t in total]}


@dataclass(frozen=True)
class Sweep:
    """The effect of every canary of the grid, and the worst one."""

    norms: np.ndarray
    shifts: dict[str, np.ndarray]  # direction -> the effect at each norm of NORMS
    own_shift: float  # the effect of the scenario's own canary
    sensitivity: float  # declared, of the noisy gradient
    worst_direction: str  # "scenario" when no canary of the grid beats the scenario's own
    worst_norm: float

    @property
    def worst_shift(self) -> float:
        return max(self.own_shift, *(float(s.max()) for s in self.shifts.values()))

    @property
    def exceeds(self) -> bool:
        """Does some canary move the release by more than the declared sensitivity?"""
        return self.worst_shift > self.sensitivity * (1 + 1e-9)


def _effect(cls: type, scenario: Scenario, bg: Grads, reference: np.ndarray, canary: Grads) -> float:
    grads = with_canary(bg, canary)
    play = World([grads], prepared(cls, scenario, grads), canary=True).play(NoNoise())
    return float(np.linalg.norm(play.releases[0] - reference))


def sweep(cls: type, scenario: Scenario, norms: np.ndarray = NORMS) -> Sweep:
    """The noise-free effect of a canary of every norm of ``norms`` in every direction of :func:`directions`."""
    bg = background(scenario.background_norms)
    base = World([bg], prepared(cls, scenario, bg), canary=False).play(NoNoise())
    reference = base.releases[0]
    own = scenario.canary(prepared(cls, scenario, bg))
    own_shift = _effect(cls, scenario, bg, reference, own)
    shifts = {name: np.array([_effect(cls, scenario, bg, reference, [float(r) * d.unsqueeze(0) for d in unit])
                              for r in norms])
              for name, unit in directions(cls, scenario).items()}
    worst, where = own_shift, ("scenario", math.nan)
    for name, values in shifts.items():
        i = int(np.argmax(values))
        if values[i] > worst * (1 + 1e-6):  # worse than the scenario's own canary (beyond rounding)
            worst, where = float(values[i]), (name, float(norms[i]))
    return Sweep(np.asarray(norms), shifts, own_shift, base.sensitivities[0], *where)


_SWEPT: dict[tuple[type, int], tuple[Scenario, Sweep]] = {}  # (class, id(scenario)) -> (scenario, its sweep)


def worst_canary(cls: type, scenario: Scenario) -> tuple[Scenario, Sweep]:
    """The scenario with its canary replaced by the worst of the sweep (unchanged when none is worse), and the
    sweep (noise-free, so computed once per class and scenario: the audits of one and two steps share it)."""
    key = (cls, id(scenario))
    if key not in _SWEPT or _SWEPT[key][0] is not scenario:
        _SWEPT[key] = (scenario, sweep(cls, scenario))
    result = _SWEPT[key][1]
    if result.worst_direction == "scenario":
        return scenario, result
    unit = directions(cls, scenario)[result.worst_direction]
    return dataclasses.replace(scenario, canary_norm=lambda method: result.worst_norm,
                               canary_direction=lambda method: unit), result
