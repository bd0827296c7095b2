r"""The one-step white-box audit: many releases of one private step with and without a canary, through the
method's own ``start / accumulate / release``.

For a method put in the state of its :class:`~dpbook.methods.scenario.Scenario`, ``trials`` releases are drawn on
the background batch D and ``trials`` on D' = D plus the canary (at sample rate q < 1 the canary joins each D'
batch with probability q, Poisson sampling). Each release is reduced to a *score*:

1. the features of a release are its projection on the canary's noise-free effect :math:`\Delta` (the release with the
   canary minus the release without it, both computed with the noise switched off), and every released scalar of
   the method's ``diagnostics()`` that the canary moves (DC-SGD's histogram counts, AdaClip's unclipped fraction):
   the auditor sees everything the step releases;
2. the score is the linear discriminant of these features, :math:`w^\top x` with
   :math:`w = \Sigma^{-1}(\bar x' - \bar x)` (the difference of the two worlds' feature means), which is the
   likelihood-ratio test when the features are Gaussian; it is fitted on the first half of the trials only.

:func:`dpbook.audit.statistics.certify` then chooses thresholds on the first half and certifies lower bounds on
:math:`\varepsilon` and :math:`\mu` on the second half (95 % confidence). They are compared with the claims for
this one step: the accountant's :math:`\varepsilon` for one step at (``noise_multiplier()``, :math:`q`) and
:math:`\mu = 1/\sigma` with :math:`\sigma` = ``noise_multiplier()`` (exact for the Gaussian mechanism at
:math:`q = 1`, and an upper bound at :math:`q < 1`, since subsampling only helps). The audit also checks the
declaration behind both claims: the canary's effect on the sum, :math:`\lVert\Delta\rVert`, must not exceed the
declared
sensitivity of the noisy gradient (:func:`~dpbook.methods.base.gradient_sensitivity` of the method's
:meth:`~dpbook.methods.base.Method.releases`). A method is *flagged* when a lower bound exceeds its claim or the
effect exceeds the declaration.

    >>> result = audit("dpsgd", trials=2000, seed=0)
    >>> result.mu_claimed, result.mu_lower <= result.mu_claimed, result.flagged
    (1.0, True, False)
"""

from __future__ import annotations

__all__ = [
    "DELTA", "FAST_TRIALS", "NoNoise", "World", "AuditResult", "worlds", "discriminant", "run",
    "audit"
]

import copy
import math
import time
from dataclasses import dataclass, field, fields
from typing import Callable

import numpy as np
import torch

from dpbook import accounting, checks
from dpbook.audit.scenarios import SCENARIOS
from dpbook.audit.statistics import CONFIDENCE, certify
from dpbook.methods import METHODS
from dpbook.methods.base import Method, MicroBatch, gradient_sensitivity
from dpbook.methods.scenario import Scenario, background, zeros
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads, flat_norms

DELTA = 1e-5
"""The delta of every audited claim (the book's runs use 1e-5)."""

FAST_TRIALS = 2000
"""Trials per world in the test suite's audit (seconds per method)."""


class NoNoise(GaussianNoise):
    """A noise source that adds nothing: the release's noise-free value, from the method's own code."""

    def like(self, t: torch.Tensor, std: float) -> torch.Tensor:
        return torch.zeros_like(t)


@dataclass(frozen=True)
class World:
    """One side of the game: a batch of per-example gradients and the method bound and prepared for it."""

    grads: Grads
    method: Method
    canary: bool  # is the last example the canary?

    @property
    def n(self) -> int:
        return len(self.grads[0])

    def release(self, noise: GaussianNoise, keep: int | None = None) -> tuple[np.ndarray, dict[str, float]]:
        """One release on the first ``keep`` examples (all by default): the flat noisy sum and the diagnostics."""
        method = copy.deepcopy(self.method)
        grads = [g[:keep] for g in self.grads]
        n = len(grads[0])
        acc = method.start(zeros())
        method.accumulate(acc, MicroBatch(
            x=torch.zeros(n, 1), y=torch.zeros(n, dtype=torch.long), grads=grads, norms=flat_norms(grads),
            grads_at=_grads_at(grads, canary=self.canary and n == self.n), index=torch.arange(n)))
        released = method.release(acc, noise)
        return torch.cat([r.flatten() for r in released]).numpy(), method.diagnostics()


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


@dataclass(frozen=True)
class AuditResult:
    """One audited (method, sample rate): the claims, the certified lower bounds and the verdict."""

    method: str
    broken: str | None
    trials: int  # releases per world
    sample_rate: float
    delta: float
    accountant: str
    noise_multiplier: float
    sensitivity: float  # declared
    shift: float  # ||Delta||, the canary's measured effect on the noise-free sum
    epsilon_claimed: float
    epsilon_lower: float
    mu_claimed: float
    mu_lower: float
    confidence: float
    features: tuple[str, ...]
    seconds: float
    state: str
    scores: tuple[np.ndarray, np.ndarray] = field(default=(), repr=False, compare=False)  # (D, D'), for plots

    @property
    def flagged(self) -> bool:
        """Does the audit refute the claim (a lower bound above it, or an effect above the declared sensitivity)?"""
        return (self.epsilon_lower > self.epsilon_claimed or self.mu_lower > self.mu_claimed
                or self.shift > self.sensitivity * (1 + 1e-9))

    def to_dict(self) -> dict:
        """The record of a result file: every field but the scores, and the verdict."""
        record = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "scores"}
        return {**record, "features": list(self.features), "flagged": self.flagged}


def _prepared(cls: type, scenario: Scenario, grads: Grads) -> Method:
    """A fresh method of ``cls`` bound to the audited parameters and put in the scenario's state for ``grads``."""
    method = cls(**scenario.hyperparameters)
    B = len(grads[0]) if cls.full_batch else len(scenario.background_norms)  # full batch: B is N of the world
    method.bind(zeros(), expected_batch_size=B)
    scenario.prepare(method, grads)
    return method


def worlds(cls: type, scenario: Scenario) -> tuple[World, World]:
    """D (the background) and D' (background + canary), each with its own prepared method."""
    bg = background(scenario.background_norms)
    probe = _prepared(cls, scenario, bg)
    canary = scenario.canary(probe)
    with_canary = [torch.cat([b, c]) for b, c in zip(bg, canary)]
    return (World(bg, _prepared(cls, scenario, bg), canary=False),
            World(with_canary, _prepared(cls, scenario, with_canary), canary=True))


def _features(flat: np.ndarray, diagnostics: dict, direction: np.ndarray, keys: list[str]) -> list[float]:
    return [float(flat @ direction)] + [float(diagnostics[k]) for k in keys]


def _moved_keys(without: dict, with_canary: dict) -> list[str]:
    """The released scalars that the canary moves (noise-free), in a fixed order."""
    keys = []
    for k in sorted(set(without) & set(with_canary)):
        a, b = float(without[k]), float(with_canary[k])
        if math.isfinite(a) and math.isfinite(b) and abs(a - b) > 1e-12 * max(1.0, abs(a)):
            keys.append(k)
    return keys


def discriminant(x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    r"""Fisher's linear discriminant :math:`\Sigma^{-1}(\bar x_1 - \bar x_0)` of two feature samples (rows are
    trials).

    :math:`\Sigma` is the pooled covariance, with a small ridge so that constant or collinear features are harmless.

        >>> rng = np.random.default_rng(0)
        >>> w = discriminant(rng.normal(0, 1, (4000, 2)), rng.normal([1, 0], 1, (4000, 2)))
        >>> bool(w[0] > 0.8 and abs(w[1]) < 0.1)
        True
    """
    centred = np.concatenate([x0 - x0.mean(0), x1 - x1.mean(0)])
    sigma = np.atleast_2d(np.cov(centred, rowvar=False))
    ridge = 1e-9 * max(float(np.trace(sigma)), 1e-300) * np.eye(len(sigma))
    return np.linalg.pinv(sigma + ridge) @ (x1.mean(0) - x0.mean(0))


def run(cls: type, scenario: Scenario, *, name: str, broken: str | None = None, trials: int = FAST_TRIALS,
        sample_rate: float = 1.0, delta: float = DELTA, accountant: str = "rdp", seed: int = 0,
        confidence: float = CONFIDENCE) -> AuditResult:
    """The audit of one method class in one scenario (see the module docstring); :func:`audit` picks them by name.

    ``confidence`` is that of the two lower bounds together; an audit of k methods at once gives each
    ``1 - (1 - confidence) / k`` so that all its bounds hold together (:mod:`dpbook.audit.__main__`)."""
    trials = checks.integer("trials (releases per world)", trials, minimum=4)
    q = checks.rate("sample_rate", sample_rate)
    delta = checks.open_unit("delta", delta)
    accountant = accounting.check_accountant(accountant)
    confidence = checks.open_unit("confidence", confidence)
    if cls.full_batch and q != 1:
        raise ValueError(f"{name!r} is full-batch (every step holds the whole training set): audit it at "
                         f"sample rate 1, not {q!r}")
    start = time.perf_counter()
    without, with_canary = worlds(cls, scenario)
    sigma = without.method.noise_multiplier()
    quiet = NoNoise()
    r0, d0 = without.release(quiet)
    r1, d1 = with_canary.release(quiet)
    delta_vec = r1 - r0
    shift = float(np.linalg.norm(delta_vec))
    direction = delta_vec / shift if shift > 0 else delta_vec
    keys = _moved_keys(d0, d1)

    noise = GaussianNoise(seed)
    coin = torch.Generator().manual_seed(seed + 1)
    x0 = np.array([_features(*without.release(noise), direction, keys) for _ in range(trials)])
    included = (torch.rand(trials, generator=coin) < q).tolist()
    x1 = np.array([_features(*with_canary.release(noise, None if inside else without.n), direction, keys)
                   for inside in included])
    half = trials // 2
    w = discriminant(x0[:half], x1[:half])
    certificate = certify(x0 @ w, x1 @ w, delta=delta, confidence=confidence)
    return AuditResult(
        method=name, broken=broken, trials=trials, sample_rate=q, delta=delta, accountant=accountant,
        noise_multiplier=sigma, sensitivity=gradient_sensitivity(without.method.releases()), shift=shift,
        epsilon_claimed=accounting.epsilon(sigma, q, 1, delta, accountant),
        epsilon_lower=certificate.epsilon, mu_claimed=1 / sigma if sigma > 0 else math.inf,
        mu_lower=certificate.mu, confidence=confidence, features=("projection", *keys),
        seconds=time.perf_counter() - start, state=scenario.state, scores=(x0 @ w, x1 @ w))


def audit(method: str, **options) -> AuditResult:
    """The one-step audit of the registered method ``method`` in its scenario (:data:`SCENARIOS`); ``options`` are
    :func:`run`'s (trials, sample_rate, delta, accountant, seed, confidence)."""
    checks.one_of("method", method, METHODS)
    return run(METHODS[method], SCENARIOS[method], name=method, **options)
