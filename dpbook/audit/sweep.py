r"""The canary's noise-free effect swept over norms and directions, and the worst canary found.

A statistical audit probes one canary. A method whose weights break the declared bound only for some norms (a band)
or some directions (against the other examples' sum, when the sum rather than each example is clipped) passes an
audit whose canary misses them. Before any trial, :func:`sweep` releases the step with the noise switched off for a
log grid of canary norms (:data:`NORMS`) in each of these directions:

- ``"declared"``: the scenario's own canary direction (:math:`u = e_0` for most methods);
- ``"orthogonal"``: :math:`u = e_0`, orthogonal to every background gradient (when it differs from the declared one);
- ``"along"`` and ``"against"``: plus and minus the background's sum :math:`\sum_i g_i`, normalised;

and measures the canary's effect, :math:`\lVert\Delta\rVert` (the release with the canary minus the release
without it), on each *target*: the noisy gradient the optimizer receives (:data:`GRADIENT`) and each of the step's
declared releases on its own (DC-SGD's histogram, AdaClip's count, DPDR's orthogonal parts and coefficients
:math:`\alpha`), each against its own declared sensitivity; :func:`sweeps` gives one :class:`Sweep` per target.
A band of norms narrower than the grid's step (a factor :math:`10^{0.1} = 1.26`) can lie between two of its points,
so the sweep then looks between them:

- around every strict local maximum of the grid's effect, :data:`REFINE` norms between its two neighbours, in its
  direction (where a peak's top lies between grid points);
- at ``random_norms`` norms (:data:`RANDOM_NORMS` by default) drawn log-uniformly over the grid's range from the
  audit's seed, in the declared direction: a band :math:`w` decades wide, wherever it lies inside the grid's range,
  holds one of 1,024 of them with probability :math:`1 - (1 - w/13)^{1024}` (:func:`band_probability`), 99.8 % for a
  band of 0.076 decades (a factor 1.19) and 55 % for one of 0.01 decades; the grid alone is sure to see a band at
  least 0.1 decades wide.

No effect may exceed the declared sensitivity (:func:`~dpbook.methods.base.gradient_sensitivity` for the noisy
gradient, the release's own for a release). :func:`worst_canary` then hands the statistical audit the canary of the
largest effect on a target; the scenario's own canary is kept unless another is strictly worse, since it also
saturates the method's other releases (AdaClip's count, DC-SGD's histogram) as its scenario explains.

    >>> from dpbook.methods import METHODS
    >>> s = sweep(METHODS["psasc"], METHODS["psasc"].declaration.audit)
    >>> s.sensitivity, round(s.worst_shift, 6), s.worst_shift <= s.sensitivity
    (2.0, 2.0, True)
    >>> histogram = sweeps(METHODS["dcsgd-p"], METHODS["dcsgd-p"].declaration.audit)["histogram"]
    >>> histogram.sensitivity, round(histogram.worst_shift, 6), histogram.worst_direction  # one count, by one
    (1.0, 1.0, 'scenario')
"""

from __future__ import annotations

__all__ = ["GRADIENT", "NORMS", "REFINE", "RANDOM_NORMS", "Sweep", "band_probability", "directions", "canary_effects",
           "sweeps", "sweep", "worst_canary"]

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch

from dpbook.audit.worlds import NoNoise, World, prepared, with_canary
from dpbook.methods.scenario import Scenario, background, dirac
from dpbook.per_sample import Grads

GRADIENT = "noisy gradient"
"""The target of the noisy gradient the optimizer receives (the others are the step's releases, by name)."""

NORMS = np.logspace(-6, 7, 131)
"""The canary norms swept: 10 per decade from :math:`10^{-6}` to :math:`10^7`."""

REFINE = 16
"""Norms swept between the two neighbours of each strict local maximum of the grid's effect."""

RANDOM_NORMS = 1024
"""Norms drawn log-uniformly over the grid's range, anew for each seed, in the declared direction (a sweep's
default; each costs one noise-free step, about a millisecond)."""


def band_probability(decades: float, draws: int = RANDOM_NORMS, span: float = 13.0) -> float:
    """The probability that one of ``draws`` log-uniform norms over ``span`` decades falls in a given band of norms
    ``decades`` wide (the sweep's random norms, module docstring).

        >>> round(band_probability(np.log10(1.55 / 1.3)), 3), round(band_probability(0.01), 2)
        (0.998, 0.55)
    """
    return float(1 - (1 - min(decades / span, 1.0)) ** draws)


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
    """The effect on one target of every canary of the grid and between its points, and the worst one."""

    target: str  # GRADIENT, or the name of a release
    norms: np.ndarray
    shifts: dict[str, np.ndarray]  # direction -> the effect at each norm of NORMS
    own_shift: float  # the effect of the scenario's own canary
    sensitivity: float  # declared, of the target
    worst_direction: str  # "scenario" when no canary of the sweep beats the scenario's own
    worst_norm: float
    between: dict[str, tuple[np.ndarray, np.ndarray]]  # direction -> (norms, effects) between the grid's points
    seed: int  # of the random norms

    @property
    def worst_shift(self) -> float:
        return max(self.own_shift, *(float(s.max()) for s in self.shifts.values()),
                   *(float(s.max()) for _, s in self.between.values() if len(s)))

    @property
    def exceeds(self) -> bool:
        """Does some canary move the release by more than the declared sensitivity?"""
        return self.worst_shift > self.sensitivity * (1 + 1e-9)


class _Effects:
    """The noise-free effect of a canary on each target (:data:`GRADIENT`, then the step's releases in their declared
    order) of one method's step in one scenario (the references computed once)."""

    def __init__(self, cls: type, scenario: Scenario):
        self.cls, self.scenario = cls, scenario
        self.bg = background(scenario.background_norms)
        base = World([self.bg], prepared(cls, scenario, self.bg), canary=False).play(NoNoise())
        self.targets = (GRADIENT, *base.statistics[0])
        self.sensitivities = (base.sensitivities[0], *(r.sensitivity for r in base.declared[0]))
        self.reference = self._vectors(base)

    @staticmethod
    def _vectors(play) -> list[np.ndarray]:
        return [play.releases[0], *play.statistics[0].values()]

    def __call__(self, canary: Grads) -> np.ndarray:
        grads = with_canary(self.bg, canary)
        play = World([grads], prepared(self.cls, self.scenario, grads), canary=True).play(NoNoise(), once=True)
        return np.array([np.linalg.norm(a - b) for a, b in zip(self._vectors(play), self.reference)])

    def along(self, unit: Grads, norms) -> np.ndarray:
        """The effects of canaries of each norm of ``norms`` along ``unit``, shape ``(len(norms), targets)``."""
        out = np.empty((len(norms), len(self.targets)))
        for i, r in enumerate(norms):
            out[i] = self([float(r) * d.unsqueeze(0) for d in unit])
        return out


def canary_effects(cls: type, scenario: Scenario, canary: Grads) -> dict[str, tuple[float, float]]:
    """The noise-free effect of one canary (one tensor per parameter, each of the parameter's shape) on each target
    of the step of ``cls`` in ``scenario``, and the declared sensitivity it may not exceed.

        >>> from dpbook.methods import METHODS
        >>> from dpbook.methods.scenario import dirac
        >>> canary_effects(METHODS["adaclip"], METHODS["adaclip"].declaration.audit, [5.0 * u for u in dirac()])
        {'noisy gradient': (1.0, 1.0), 'gradient': (1.0, 1.0), 'unclipped count': (0.5, 0.5)}
    """
    effects = _Effects(cls, scenario)
    shifts = effects([c.unsqueeze(0) for c in canary])
    return {t: (float(e), s) for t, e, s in zip(effects.targets, shifts, effects.sensitivities)}


def _peaks(values: np.ndarray) -> list[int]:
    """The strict interior local maxima of ``values`` (beyond rounding).

        >>> _peaks(np.array([0.0, 2.0, 1.0, 1.0, 3.0, 3.0, 0.0]))
        [1]
    """
    above = 1 + 1e-9
    return [i for i in range(1, len(values) - 1)
            if values[i] > values[i - 1] * above and values[i] > values[i + 1] * above]


def sweeps(cls: type, scenario: Scenario, norms: np.ndarray = NORMS, seed: int = 0,
           random_norms: int = RANDOM_NORMS) -> dict[str, Sweep]:
    """The noise-free effect on every target of a canary of every norm of ``norms`` in every direction of
    :func:`directions`, then between the grid's points (module docstring: around every target's peaks, and
    ``random_norms`` norms drawn from ``seed``): one :class:`Sweep` per target, :data:`GRADIENT` first."""
    effects = _Effects(cls, scenario)
    own = effects(scenario.canary(prepared(cls, scenario, effects.bg)))
    units = directions(cls, scenario)
    grid = {name: effects.along(unit, norms) for name, unit in units.items()}
    logs = np.log10(norms)
    drawn = 10 ** np.random.default_rng(seed).uniform(logs.min(), logs.max(), random_norms)
    refined = {name: np.unique(np.concatenate([np.logspace(logs[i - 1], logs[i + 1], REFINE + 2)[1:-1]
                                               for k in range(len(effects.targets)) for i in _peaks(values[:, k])]
                                              or [np.empty(0)]))
               for name, values in grid.items()}
    refined["declared"] = np.concatenate([refined["declared"], drawn])
    between = {name: (extra, effects.along(units[name], extra)) for name, extra in refined.items()}
    return {target: _worst(target, np.asarray(norms), {name: v[:, k] for name, v in grid.items()}, float(own[k]),
                           effects.sensitivities[k], {name: (at, v[:, k]) for name, (at, v) in between.items()}, seed)
            for k, target in enumerate(effects.targets)}


def _worst(target: str, norms: np.ndarray, shifts: dict, own_shift: float, sensitivity: float, between: dict,
           seed: int) -> Sweep:
    """One target's :class:`Sweep`: its worst canary, the scenario's own unless another is strictly worse."""
    worst, where = own_shift, ("scenario", math.nan)
    candidates = [(name, norms, values) for name, values in shifts.items()]
    candidates += [(name, extra, values) for name, (extra, values) in between.items() if len(values)]
    for name, at, values in candidates:
        i = int(np.argmax(values))
        if values[i] > worst * (1 + 1e-6):  # worse than the scenario's own canary (beyond rounding)
            worst, where = float(values[i]), (name, float(at[i]))
    return Sweep(target, norms, shifts, own_shift, sensitivity, *where, between=between, seed=seed)


def sweep(cls: type, scenario: Scenario, norms: np.ndarray = NORMS, seed: int = 0,
          random_norms: int = RANDOM_NORMS) -> Sweep:
    """The sweep of the noisy gradient the optimizer receives (:func:`sweeps`' first)."""
    return sweeps(cls, scenario, norms, seed, random_norms)[GRADIENT]


_SWEPT: dict[tuple, tuple[Scenario, dict[str, Sweep]]] = {}  # (class, id(scenario), seed, random norms) -> sweeps


def worst_canary(cls: type, scenario: Scenario, seed: int = 0, random_norms: int = RANDOM_NORMS,
                 target: str = GRADIENT) -> tuple[Scenario, Sweep]:
    """The scenario with its canary replaced by the worst of the sweep of ``target`` (unchanged when none is worse),
    and that sweep (noise-free, so computed once per class, scenario, seed and number of random norms: the audits of
    one and two steps, and of every target, share it)."""
    key = (cls, id(scenario), seed, random_norms)
    if key not in _SWEPT or _SWEPT[key][0] is not scenario:
        _SWEPT[key] = (scenario, sweeps(cls, scenario, seed=seed, random_norms=random_norms))
    result = _SWEPT[key][1][target]
    if result.worst_direction == "scenario":
        return scenario, result
    unit = directions(cls, scenario)[result.worst_direction]
    return dataclasses.replace(scenario, canary_norm=lambda method: result.worst_norm,
                               canary_direction=lambda method: unit), result
