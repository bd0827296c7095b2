r"""The two worlds of a white-box audit: a method prepared in its scenario's state, played for T steps on the
background batch D or on D' = D plus one canary, through the method's own ``start / accumulate / release /
advance``.

One *play* starts from a copy of the prepared method and runs T consecutive steps of that one instance: whatever
the method carries from step to step (its thresholds, its momenta, and any noise it wrongly keeps) carries over,
as in training. The canary may change across steps: at step :math:`t` its gradient is :math:`s_t c` for the
scenario's canary :math:`c` and a sign :math:`s_t` of ``signs`` (0 is an example that is present with a zero
gradient). The audit plays every pattern of :func:`sign_patterns`: noise that a method correlates across steps
cancels against a canary of one pattern and shows against another. The background is the same at every step.

The auditor holds the noise source, so a play records, besides what the step returns to the optimizer, what each of
the step's declared releases released (the statistic plus its noise, as the method drew it through
:meth:`~dpbook.noise.GaussianNoise.add_`): every release can be audited on its own.

    >>> from dpbook.methods import METHODS
    >>> D, D1 = worlds(METHODS["dpsgd"], METHODS["dpsgd"].declaration.audit, signs=(1, -1))
    >>> play = D1.play(NoNoise())
    >>> [round(float(r[0]), 6) for r in play.releases]   # the canary's coordinate: +C, then -C
    [1.0, -1.0]
    >>> [list(s) for s in play.statistics], [s["gradient"].shape for s in play.statistics]
    ([['gradient'], ['gradient']], [(10,), (10,)])
"""

from __future__ import annotations

__all__ = ["NoNoise", "Recorder", "Play", "World", "alternating", "sign_patterns", "prepared", "with_canary", "worlds"]

import copy
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from dpbook.methods.base import Method, MicroBatch, Release, gradient_sensitivity
from dpbook.methods.scenario import Scenario, background, zeros
from dpbook.noise import GaussianNoise
from dpbook.per_sample import FormedView, Grads, flat_norms


class NoNoise(GaussianNoise):
    """A noise source that adds nothing: the release's noise-free value, from the method's own code."""

    def like(self, t: torch.Tensor, std: float) -> torch.Tensor:
        return torch.zeros_like(t)


class Recorder(GaussianNoise):
    """A step's noise source as the auditor holds it: it draws from ``source`` and records what each release
    released (the statistic with its noise, flat, float64), by the release's name, its tensors in call order."""

    def __init__(self, source: GaussianNoise):
        self.source, self.generator = source, source.generator
        self.parts: dict[str, list[np.ndarray]] = {}

    def like(self, t: torch.Tensor, std: float) -> torch.Tensor:
        return self.source.like(t, std)

    def add_(self, release: Release, statistic: torch.Tensor) -> torch.Tensor:
        out = super().add_(release, statistic)
        self.parts.setdefault(release.name, []).append(out.detach().to("cpu", torch.float64, copy=True).numpy().ravel())
        return out

    def released(self, declared: Sequence[Release]) -> dict[str, np.ndarray]:
        """Each declared release's noisy statistic, in the declared order; a method that released another set (or
        drew noise outside :meth:`add_`, which escapes the audit's release-by-release view) is refused."""
        names = [r.name for r in declared]
        if sorted(self.parts) != sorted(names):
            raise ValueError(f"the step declared the releases {names} but released {sorted(self.parts)} through "
                             "noise.add_(release, statistic): every Gaussian release goes through that one call, "
                             "naming the declared Release it draws")
        return {name: np.concatenate(self.parts[name]) for name in names}


def alternating(steps: int) -> tuple[int, ...]:
    """The default signs of the canary over ``steps`` steps: +1, -1, +1, ... ("+c then -c").

        >>> alternating(3)
        (1, -1, 1)
    """
    return tuple((-1) ** t for t in range(steps))


def sign_patterns(steps: int, seed: int = 0) -> list[tuple[int, ...]]:
    """The canary's signs audited over ``steps`` steps: constant (+c at every step), alternating (+c, -c, ...) and one
    pattern drawn at random from ``seed``; each with its first sign +1 (the first step's canary is the sweep's
    worst, so the patterns differ in the later steps' signs relative to it), repeats dropped. Noise that cancels
    itself across steps (the next step adds minus this one's draw) shows against a constant canary, not an
    alternating one; noise that repeats itself shows against an alternating canary, not a constant one.

        >>> sign_patterns(1), sign_patterns(2)
        ([(1,)], [(1, 1), (1, -1)])
        >>> sign_patterns(4, seed=0)
        [(1, 1, 1, 1), (1, -1, 1, -1), (1, 1, 1, -1)]
    """
    drawn = np.random.default_rng(seed).choice([-1, 1], size=steps)
    out = []
    for pattern in ((1,) * steps, alternating(steps), tuple(int(s) for s in drawn)):
        pattern = tuple(s * pattern[0] for s in pattern)
        if pattern not in out:
            out.append(pattern)
    return out


@dataclass(frozen=True)
class Play:
    """What T steps released: the flat noisy sum the optimizer receives, each declared release's noisy statistic
    (flat, by name) and the released diagnostics of each step, and what each step declared before its release (its
    releases, their composed noise multiplier, the sensitivity of the noisy gradient)."""

    releases: list[np.ndarray]
    statistics: list[dict[str, np.ndarray]]
    diagnostics: list[dict[str, float]]
    declared: list[tuple[Release, ...]]
    noise_multipliers: list[float]
    sensitivities: list[float]


@dataclass(frozen=True)
class World:
    """One side of the game: the batch of every step and the method bound and prepared for the first."""

    steps: list[Grads]  # the per-example gradients of each step; with a canary, it is the last example
    method: Method
    canary: bool

    @property
    def n_background(self) -> int:
        return len(self.steps[0][0]) - int(self.canary)

    def play(self, noise: GaussianNoise, present: Sequence[bool] | None = None, *, once: bool = False) -> Play:
        """T consecutive steps of one copy of the prepared method. ``present[t]`` says whether the canary is in
        step t's batch (Poisson sampling; always, by default); without it the batch is the background. ``once``:
        the world is played this once, so its method itself plays (no copy)."""
        method = self.method if once else copy.deepcopy(self.method)
        out = Play([], [], [], [], [], [])
        for t, grads in enumerate(self.steps):
            inside = self.canary and (present is None or present[t])
            grads = grads if inside else [g[:self.n_background] for g in grads]
            n = len(grads[0])
            acc = method.start(zeros())  # the step's releases, declared before any example is seen
            out.declared.append(acc["releases"])
            out.noise_multipliers.append(method.noise_multiplier(acc["releases"]))
            out.sensitivities.append(gradient_sensitivity(acc["releases"]))
            view = FormedView(grads, flat_norms(grads), _grads_at(grads, canary=inside))
            method.accumulate(acc, MicroBatch(view, torch.arange(n)))
            recorder = Recorder(noise)
            released = method.release(acc, recorder)
            out.releases.append(torch.cat([r.flatten() for r in released]).numpy())
            out.statistics.append(recorder.released(acc["releases"]))
            out.diagnostics.append(method.diagnostics())
            method.advance()
        return out


def _grads_at(grads: Grads, *, canary: bool) -> Callable:
    """Per-example gradients at other parameter values: the same for the background (a loss linear in the
    parameters), 0 for the canary (the last example, when ``canary``): its gradient appears at the audited step."""
    def at(params) -> Grads:
        out = [g.clone() for g in grads]
        if canary:
            for o in out:
                o[-1] = 0.0
        return out
    return at


def prepared(cls: type, scenario: Scenario, grads: Grads) -> Method:
    """A fresh method of ``cls`` bound to the audited parameters and put in the scenario's state for ``grads``."""
    method = cls(**scenario.hyperparameters)
    B = len(grads[0]) if cls.full_batch else len(scenario.background_norms)  # full batch: B is N of the world
    method.bind(zeros(), expected_batch_size=B)
    scenario.prepare(method, grads)
    return method


def with_canary(bg: Grads, canary: Grads, sign: float = 1.0) -> Grads:
    """The background plus one last example of gradient ``sign * canary``."""
    return [torch.cat([b, sign * c]) for b, c in zip(bg, canary)]


def worlds(cls: type, scenario: Scenario, signs: Sequence[float] = (1,)) -> tuple[World, World]:
    """D (the background at every step) and D' (background + the canary, times ``signs[t]`` at step t), each with
    its own prepared method."""
    bg = background(scenario.background_norms)
    canary = scenario.canary(prepared(cls, scenario, bg))
    steps = [with_canary(bg, canary, s) for s in signs]
    return (World([bg] * len(signs), prepared(cls, scenario, bg), canary=False),
            World(steps, prepared(cls, scenario, steps[0]), canary=True))
