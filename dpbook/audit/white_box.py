r"""The white-box audit: many plays of T consecutive private steps (T = 1: one step) with and without a canary,
through the method's own ``start / accumulate / release / advance``.

For a method put in the state of its :class:`~dpbook.methods.scenario.Scenario`, the canary is first chosen by the
sweep of :mod:`dpbook.audit.sweep`: the scenario's own, unless a canary of another norm or direction moves the
release more. Then ``trials`` plays are drawn on the background batch D and ``trials`` on D' = D plus the canary
(:mod:`dpbook.audit.worlds`; at sample rate q < 1 the canary joins each step's batch when the engine's own sampler,
:class:`~dpbook.sampling.PoissonSampler` over the background and the canary, puts it there: a sampler that drew it
at another rate would show; one that breaks only the independence between examples, as fixed-size batches do, is
:mod:`dpbook.audit.sampling`'s to catch). A play of T steps runs one instance of the method, so what it carries from
step to step carries over: a method that reuses or correlates its noise across steps shows it (a one-step audit,
whose every trial is a first release, cannot see it). Over T > 1 steps the canary's signs follow every pattern of
:func:`~dpbook.audit.worlds.sign_patterns` (constant, alternating, one drawn at random), each pattern its own audit
against the same plays of D, and the worst is reported (both bounds of the pattern that goes furthest past its
claims): noise that cancels itself across steps shows against a constant canary only, and noise that repeats
itself against an alternating one only. Each play is reduced to a *score*:

1. the features of a play are, at each step :math:`t`, the release's projection :math:`x_t` on the canary's
   noise-free effect :math:`\Delta_t` (the release with the canary minus the release without it, both computed with
   the noise switched off) and every released scalar of the method's ``diagnostics()`` that the canary moves
   (DC-SGD's histogram counts, AdaClip's unclipped fraction); and, for T > 1, the products :math:`x_sx_t`, which see
   dependence between steps. The auditor sees everything the steps release;
2. the score is the linear discriminant of these features, :math:`w^\top x` with
   :math:`w = \Sigma^{-1}(\bar x' - \bar x)` (the difference of the two worlds' feature means), which is the
   likelihood-ratio test when the features are Gaussian with a common covariance; it is fitted on the first half of
   the trials only.

:func:`dpbook.audit.statistics.certify` then chooses thresholds on the first half and certifies lower bounds on
:math:`\varepsilon` and :math:`\mu` on the second half (95 % confidence, shared among the sign patterns). They are
compared with the claims for these T steps: the accountant's :math:`\varepsilon` of the T steps' declared noise
multipliers :math:`\sigma_t` at :math:`q`, and :math:`\mu = (\sum_t\sigma_t^{-2})^{1/2}`, the composition of
Gaussian steps (exact at :math:`q = 1` for single Gaussian releases, and an upper bound at :math:`q < 1`, since
subsampling only helps). The audit also checks the declaration behind both claims: no canary of the sweep may move
the noisy gradient by more than its declared sensitivity (:func:`~dpbook.methods.base.gradient_sensitivity` of the
method's :meth:`~dpbook.methods.base.Method.releases`). A method is *flagged* when a lower bound exceeds its claim
or an effect exceeds the declaration.

    >>> result = audit("dpsgd", trials=2000, seed=0)
    >>> result.mu_claimed, result.mu_lower <= result.mu_claimed, result.flagged
    (1.0, True, False)
    >>> two = audit("dpsgd", steps=2, trials=2000, seed=0)
    >>> round(two.mu_claimed, 4), two.flagged
    (1.4142, False)
"""

from __future__ import annotations

__all__ = ["DELTA", "FAST_TRIALS", "FAST_RANDOM_NORMS", "AuditResult", "discriminant", "run", "audit"]

import math
import time
from dataclasses import dataclass, field, fields

import numpy as np

from dpbook import accounting, checks
from dpbook.audit.scenarios import SCENARIOS
from dpbook.audit.statistics import CONFIDENCE, certify
from dpbook.audit.sweep import RANDOM_NORMS, worst_canary
from dpbook.audit.worlds import NoNoise, Play, sign_patterns, worlds
from dpbook.methods import METHODS
from dpbook.methods.scenario import Scenario
from dpbook.noise import GaussianNoise
from dpbook.sampling import PoissonSampler

DELTA = 1e-5
"""The delta of every audited claim (the book's runs use 1e-5)."""

FAST_TRIALS = 2000
"""Trials per world in the test suite's audit (seconds per method)."""

FAST_RANDOM_NORMS = 64
"""Random canary norms of the sweep in the test suite's audits of methods without a band (each norm costs about a
millisecond; :data:`~dpbook.audit.sweep.RANDOM_NORMS` by default)."""


@dataclass(frozen=True)
class AuditResult:
    """One audited (method, sample rate, steps): the claims, the certified lower bounds and the verdict."""

    method: str
    broken: str | None
    trials: int  # plays per world
    sample_rate: float
    steps: int
    delta: float
    accountant: str
    noise_multiplier: float  # of the first step
    sensitivity: float  # declared, of the first step's noisy gradient
    shift: float  # the largest noise-free effect of a canary of the sweep on the first step's noisy gradient
    canary: str  # the canary audited: the scenario's, or the sweep's worse one
    signs: tuple[int, ...]  # the canary's sign at each step, of the worst pattern audited
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
        return {**record, "features": list(self.features), "signs": list(self.signs), "flagged": self.flagged}


def _moved_keys(without: dict, with_canary: dict) -> list[str]:
    """The released scalars that the canary moves (noise-free), in a fixed order."""
    keys = []
    for k in sorted(set(without) & set(with_canary)):
        a, b = float(without[k]), float(with_canary[k])
        if math.isfinite(a) and math.isfinite(b) and abs(a - b) > 1e-12 * max(1.0, abs(a)):
            keys.append(k)
    return keys


class _Features:
    """The features of a play (module docstring, step 1), fixed from the two worlds' noise-free plays."""

    def __init__(self, quiet0: Play, quiet1: Play):
        effects = [r1 - r0 for r0, r1 in zip(quiet0.releases, quiet1.releases)]
        moved = [e for e in effects if np.linalg.norm(e) > 0]
        fallback = moved[0] / np.linalg.norm(moved[0]) if moved else effects[0]
        # a step where the canary moves nothing (a zero gradient) is read along the first step it moves
        self.directions = [e / np.linalg.norm(e) if np.linalg.norm(e) > 0 else fallback for e in effects]
        self.keys = [_moved_keys(d0, d1) for d0, d1 in zip(quiet0.diagnostics, quiet1.diagnostics)]
        T = len(effects)
        self.pairs = [(s, t) for s in range(T) for t in range(s + 1, T)]
        step = (lambda t: "") if T == 1 else (lambda t: f"@{t + 1}")
        self.names = ([f"projection{step(t)}" for t in range(T)]
                      + [f"{k}{step(t)}" for t in range(T) for k in self.keys[t]]
                      + [f"projection{step(s)}*projection{step(t)}" for s, t in self.pairs])

    def __call__(self, play: Play) -> list[float]:
        x = [float(r @ d) for r, d in zip(play.releases, self.directions)]
        released = [float(d[k]) for d, keys in zip(play.diagnostics, self.keys) for k in keys]
        return x + released + [x[s] * x[t] for s, t in self.pairs]


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


def _claims(sigmas: list[float], q: float, delta: float, accountant: str) -> tuple[float, float]:
    """The (epsilon, mu) charged for steps of noise multipliers ``sigmas`` at sample rate q."""
    epsilon = accounting.epsilon_of_history([(s, q, 1) for s in sigmas], delta, accountant)
    mu = math.sqrt(sum(s ** -2 for s in sigmas)) if all(s > 0 for s in sigmas) else math.inf
    return epsilon, mu


def _memberships(sampler: type, n_background: int, q: float, trials: int, steps: int, seed: int) -> list:
    """Whether the canary is in each step's batch of each trial, as ``sampler`` (the engine's class) draws batches
    from the background and the canary (the last example) at rate q; at q = 1, None for each trial (always in)."""
    if q == 1:
        return [None] * trials
    N = n_background + 1
    draw = sampler(N=N, expected_batch_size=q * N, seed=seed)
    return [[bool((draw.sample() == N - 1).any()) for _ in range(steps)] for _ in range(trials)]


def _excess(certificate, epsilon_claimed: float, mu_claimed: float) -> float:
    """How far a certificate's bounds go past the claims, the larger of the two ratios (a bound above a claim of 0
    is infinitely far): the worst pattern is the one of the largest.

        >>> from dpbook.audit.statistics import Certificate
        >>> bounds = Certificate(epsilon=2.0, mu=0.5, epsilon_threshold=0, mu_threshold=0, confidence=0.95, held_out=9)
        >>> _excess(bounds, 4.0, 1.0), _excess(bounds, 0.0, 0.0)
        (0.5, inf)
    """
    def ratio(lower: float, claimed: float) -> float:
        return lower / claimed if claimed > 0 else math.inf if lower > 0 else 0.0
    return max(ratio(certificate.epsilon, epsilon_claimed), ratio(certificate.mu, mu_claimed))


def run(cls: type, scenario: Scenario, *, name: str, broken: str | None = None, trials: int = FAST_TRIALS,
        sample_rate: float = 1.0, steps: int = 1, delta: float = DELTA, accountant: str = "rdp", seed: int = 0,
        confidence: float = CONFIDENCE, sampler: type = PoissonSampler,
        random_norms: int = RANDOM_NORMS) -> AuditResult:
    """The audit of T = ``steps`` consecutive steps of one method class in one scenario (module docstring);
    :func:`audit` picks them by name.

    ``confidence`` is that of the two lower bounds together, over every sign pattern; an audit of k methods at once
    gives each ``1 - (1 - confidence) / k`` so that all its bounds hold together (:mod:`dpbook.audit.__main__`).
    ``sampler`` draws the canary's membership at q < 1 (the engine's :class:`~dpbook.sampling.PoissonSampler`);
    ``random_norms`` is the sweep's number of random canary norms (:func:`~dpbook.audit.sweep.sweep`)."""
    trials = checks.integer("trials (plays per world)", trials, minimum=4)
    q = checks.rate("sample_rate", sample_rate)
    steps = checks.integer("steps", steps, minimum=1)
    delta = checks.open_unit("delta", delta)
    accountant = accounting.check_accountant(accountant)
    confidence = checks.open_unit("confidence", confidence)
    if cls.full_batch and q != 1:
        raise ValueError(f"{name!r} is full-batch (every step holds the whole training set): audit it at "
                         f"sample rate 1, not {q!r}")
    start = time.perf_counter()
    audited, swept = worst_canary(cls, scenario, seed, checks.integer("random_norms", random_norms, minimum=0))
    patterns = sign_patterns(steps, seed)
    without = worlds(cls, audited, patterns[0])[0]  # D: the background at every step, whatever the canary's signs
    quiet0 = without.play(NoNoise())
    epsilon_claimed, mu_claimed = _claims(quiet0.noise_multipliers, q, delta, accountant)

    noise = GaussianNoise(seed)
    plays0 = [without.play(noise) for _ in range(trials)]
    present = _memberships(sampler, without.n_background, q, trials, steps, seed + 1)
    half, each = trials // 2, 1 - (1 - confidence) / len(patterns)
    worst = None
    for signs in patterns:
        with_canary = worlds(cls, audited, signs)[1]
        features = _Features(quiet0, with_canary.play(NoNoise()))
        x0 = np.array([features(play) for play in plays0])
        x1 = np.array([features(with_canary.play(noise, inside)) for inside in present])
        w = discriminant(x0[:half], x1[:half])
        certificate = certify(x0 @ w, x1 @ w, delta=delta, confidence=each)
        excess = _excess(certificate, epsilon_claimed, mu_claimed)
        if worst is None or excess > worst[0]:
            worst = (excess, certificate, signs, features, x0 @ w, x1 @ w)
    _, certificate, signs, features, scores0, scores1 = worst
    canary = ("the scenario's" if swept.worst_direction == "scenario"
              else f"norm {swept.worst_norm:.3g}, {swept.worst_direction}")
    return AuditResult(
        method=name, broken=broken, trials=trials, sample_rate=q, steps=steps, delta=delta, accountant=accountant,
        noise_multiplier=quiet0.noise_multipliers[0], sensitivity=swept.sensitivity, shift=swept.worst_shift,
        canary=canary, signs=signs, epsilon_claimed=epsilon_claimed, epsilon_lower=certificate.epsilon,
        mu_claimed=mu_claimed, mu_lower=certificate.mu, confidence=confidence, features=tuple(features.names),
        seconds=time.perf_counter() - start, state=scenario.state, scores=(scores0, scores1))


def audit(method: str, **options) -> AuditResult:
    """The white-box audit of the registered method ``method`` in its scenario (:data:`SCENARIOS`); ``options`` are
    :func:`run`'s (trials, sample_rate, steps, delta, accountant, seed, confidence, random_norms)."""
    checks.one_of("method", method, METHODS)
    return run(METHODS[method], SCENARIOS[method], name=method, **options)
