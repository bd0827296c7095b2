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

1. the features of a play are, at each step :math:`t`, the noisy gradient's projection :math:`x_t` on the canary's
   noise-free effect :math:`\Delta_t` (the release with the canary minus the release without it, both computed with
   the noise switched off), likewise the projection of each declared release's own noisy statistic that is not the
   noisy gradient itself (DC-SGD's histogram, AdaClip's count, DPDR's :math:`\alpha` and orthogonal parts,
   :mod:`dpbook.audit.worlds`), every released scalar of the method's ``diagnostics()`` that the canary moves
   (DC-SGD's histogram counts, AdaClip's unclipped fraction); and, for T > 1, the products :math:`x_sx_t` of one
   statistic's projections, which see dependence between steps. The auditor sees everything the steps release;
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
method's :meth:`~dpbook.methods.base.Method.releases`).

**Every release on its own.** A step of several Gaussian releases (DC-SGD's gradient and histogram, AdaClip's
gradient and count, DPDR's orthogonal parts and :math:`\alpha`) is one mechanism at the composed multiplier
:math:`\sigma_{\mathrm{eff}}`, and a release that carries a small share of the budget can be badly wrong while the
step's composition hardly moves (a histogram at :math:`\sigma_H/2` takes DC-SGD's step from :math:`\mu = 1` to 1.06).
So each release of the first step is also audited alone (:class:`ReleaseAudit`): the canary that moves *it* most
(its own sweep, :func:`~dpbook.audit.sweep.sweeps`), features read from its statistic only, and its own claims, the
accountant's :math:`\varepsilon` and :math:`\mu = (\sum_t\sigma_{j,t}^{-2})^{1/2}` of its multipliers
:math:`\sigma_{j,t}` at the steps that declare it; the step's claim is their composition. Two declarations are
checked on it besides: no canary of its sweep moves it by more than its declared sensitivity, and the std of the
noise it adds, measured on the plays of D (its noisy statistic minus its noise-free one, at the first step, where
every play starts from the same state), is not below the declared ``noise_std``: an upper confidence bound
(:func:`~dpbook.audit.statistics.noise_std_upper`) under the declared std flags it. A method of one release has one
audit, the step's. A method is *flagged* when a lower bound exceeds its claim, an effect exceeds the declaration, or a
release's noise is smaller than declared; all the bounds and checks of one audit hold together at ``confidence``.

    >>> result = audit("dpsgd", trials=2000, seed=0)
    >>> result.mu_claimed, result.mu_lower <= result.mu_claimed, result.flagged
    (1.0, True, False)
    >>> two = audit("dpsgd", steps=2, trials=2000, seed=0)
    >>> round(two.mu_claimed, 4), two.flagged
    (1.4142, False)
"""

from __future__ import annotations

__all__ = ["DELTA", "FAST_TRIALS", "FAST_RANDOM_NORMS", "ReleaseAudit", "AuditResult", "discriminant", "run", "audit"]

import math
import time
from dataclasses import dataclass, field, fields

import numpy as np

from dpbook import accounting, checks
from dpbook.audit.scenarios import SCENARIOS
from dpbook.audit.statistics import CONFIDENCE, certify, noise_std_upper
from dpbook.audit.sweep import GRADIENT, RANDOM_NORMS, Sweep, worst_canary
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


def _failures(audited) -> tuple[str, ...]:
    """The bounds above their claims and the effect above its sensitivity, of a step's or a release's audit."""
    return tuple(name for name, failed in (
        ("mu bound", audited.mu_lower > audited.mu_claimed),
        ("epsilon bound", audited.epsilon_lower > audited.epsilon_claimed),
        ("effect", audited.shift > audited.sensitivity * (1 + 1e-9))) if failed)


@dataclass(frozen=True)
class ReleaseAudit:
    """One declared release of the audited steps on its own (module docstring, "Every release on its own"): its
    claims at its own noise multiplier, the certified lower bounds at the canary that moves it most, the largest
    effect of a canary on it against its declared sensitivity, and the std of its noise, measured, against the
    declared one."""

    name: str
    noise_multiplier: float  # declared, at the first step
    sensitivity: float  # declared, at the first step
    shift: float  # the largest noise-free effect on it of a canary of its sweep, at the first step
    canary: str
    signs: tuple[int, ...]
    epsilon_claimed: float
    epsilon_lower: float
    mu_claimed: float
    mu_lower: float
    noise_std: float  # declared, at the first step
    noise_std_upper: float  # an upper confidence bound on the std of the noise the first step added, measured

    @property
    def failures(self) -> tuple[str, ...]:
        """What refutes the release's declaration: ``"mu bound"`` or ``"epsilon bound"`` (above its claim),
        ``"effect"`` (above its sensitivity), ``"noise"`` (its noise's upper bound below the declared std)."""
        return _failures(self) + (("noise",) if self.noise_std_upper < self.noise_std * (1 - 1e-9) else ())

    @property
    def flagged(self) -> bool:
        return bool(self.failures)

    def to_dict(self) -> dict:
        record = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**record, "signs": list(self.signs), "failures": list(self.failures), "flagged": self.flagged}


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
    releases: tuple[ReleaseAudit, ...]  # every release of the first step on its own, in the declared order
    seconds: float
    state: str
    scores: tuple[np.ndarray, np.ndarray] = field(default=(), repr=False, compare=False)  # (D, D'), for plots

    @property
    def failures(self) -> tuple[str, ...]:
        """What refutes the declarations: the step's ``"mu bound"``, ``"epsilon bound"`` or ``"effect"``
        (:func:`_failures`), then each release's as ``"histogram: noise"``, ``"alpha: mu bound"`` (of one release,
        only its noise: its bounds and effect are the step's)."""
        alone = len(self.releases) > 1
        return _failures(self) + tuple(f"{r.name}: {f}" for r in self.releases for f in r.failures
                                       if alone or f == "noise")

    @property
    def flagged(self) -> bool:
        """Does the audit refute a declaration (:attr:`failures`)?"""
        return bool(self.failures)

    def to_dict(self) -> dict:
        """The record of a result file: every field but the scores, and the verdict."""
        record = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "scores"}
        return {**record, "features": list(self.features), "signs": list(self.signs),
                "releases": [r.to_dict() for r in self.releases], "failures": list(self.failures),
                "flagged": self.flagged}


def _moved_keys(without: dict, with_canary: dict) -> list[str]:
    """The released scalars that the canary moves (noise-free), in a fixed order."""
    keys = []
    for k in sorted(set(without) & set(with_canary)):
        a, b = float(without[k]), float(with_canary[k])
        if math.isfinite(a) and math.isfinite(b) and abs(a - b) > 1e-12 * max(1.0, abs(a)):
            keys.append(k)
    return keys


def _vector(play: Play, target: str, t: int) -> np.ndarray | None:
    """What step t of ``play`` released on ``target``: the noisy gradient, or a release's statistic (None when the
    step does not declare it)."""
    return play.releases[t] if target == GRADIENT else play.statistics[t].get(target)


def _effects(quiet0: Play, quiet1: Play, target: str) -> list[tuple[int, np.ndarray]]:
    """The canary's noise-free effect on ``target`` at every step that releases it."""
    return [(t, _vector(quiet1, t=t, target=target) - _vector(quiet0, t=t, target=target))
            for t in range(len(quiet0.releases)) if _vector(quiet0, target, t) is not None]


def _same_effects(a: list, b: list) -> bool:
    """Do two targets' effects coincide at every step (a release that is the noisy gradient itself)?"""
    return len(a) == len(b) and all(s == t and x.shape == y.shape and np.allclose(x, y, rtol=1e-12, atol=1e-300)
                                    for (s, x), (t, y) in zip(a, b))


class _Features:
    """The features of a play (module docstring, step 1), fixed from the two worlds' noise-free plays: the projection
    of each target (:data:`~dpbook.audit.sweep.GRADIENT`, or a release's statistic) on the canary's effect on it at
    every step that releases it, the moved diagnostics (``diagnostics``), and the products of one target's
    projections at two steps."""

    def __init__(self, quiet0: Play, quiet1: Play, targets: list[str], *, diagnostics: bool = True):
        T = len(quiet0.releases)
        step = (lambda t: "") if T == 1 else (lambda t: f"@{t + 1}")
        self.reads, names = [], []  # (target, step, unit direction)
        for target in targets:
            effects = _effects(quiet0, quiet1, target)
            moved = [e for _, e in effects if np.linalg.norm(e) > 0]
            fallback = moved[0] / np.linalg.norm(moved[0]) if moved else effects[0][1]
            # a step where the canary moves nothing (a zero gradient) is read along the first step it moves
            for t, e in effects:
                self.reads.append((target, t, e / np.linalg.norm(e) if np.linalg.norm(e) > 0 else fallback))
                names.append(f"{'projection' if target == GRADIENT else target}{step(t)}")
        self.keys = [_moved_keys(d0, d1) if diagnostics else [] for d0, d1 in zip(quiet0.diagnostics,
                                                                                 quiet1.diagnostics)]
        self.pairs = [(i, j) for i in range(len(self.reads)) for j in range(i + 1, len(self.reads))
                      if self.reads[i][0] == self.reads[j][0]]
        self.names = (names + [f"{k}{step(t)}" for t in range(T) for k in self.keys[t]]
                      + [f"{names[i]}*{names[j]}" for i, j in self.pairs])

    def __call__(self, play: Play) -> list[float]:
        x = [float(_vector(play, target, t) @ d) for target, t, d in self.reads]
        released = [float(d[k]) for d, keys in zip(play.diagnostics, self.keys) for k in keys]
        return x + released + [x[i] * x[j] for i, j in self.pairs]


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


def _canary(swept: Sweep) -> str:
    """The canary a sweep hands the audit, in words."""
    return ("the scenario's" if swept.worst_direction == "scenario"
            else f"norm {swept.worst_norm:.3g}, {swept.worst_direction}")


def _sigmas(quiet: Play, name: str) -> list[float]:
    """The noise multipliers of release ``name`` at the steps that declare it (the composed one for the step's)."""
    if name == GRADIENT:
        return quiet.noise_multipliers
    return [r.noise_multiplier for declared in quiet.declared for r in declared if r.name == name]


def run(cls: type, scenario: Scenario, *, name: str, broken: str | None = None, trials: int = FAST_TRIALS,
        sample_rate: float = 1.0, steps: int = 1, delta: float = DELTA, accountant: str = "rdp", seed: int = 0,
        confidence: float = CONFIDENCE, sampler: type = PoissonSampler,
        random_norms: int = RANDOM_NORMS) -> AuditResult:
    """The audit of T = ``steps`` consecutive steps of one method class in one scenario (module docstring);
    :func:`audit` picks them by name.

    ``confidence`` is that of all its bounds together, over every sign pattern, every release and every noise
    check; an audit of k methods at once gives each ``1 - (1 - confidence) / k`` so that all its bounds hold together
    (:mod:`dpbook.audit.__main__`). ``sampler`` draws the canary's membership at q < 1 (the engine's
    :class:`~dpbook.sampling.PoissonSampler`); ``random_norms`` is the sweep's number of random canary norms
    (:func:`~dpbook.audit.sweep.sweeps`)."""
    trials = checks.integer("trials (plays per world)", trials, minimum=4)
    q = checks.rate("sample_rate", sample_rate)
    steps = checks.integer("steps", steps, minimum=1)
    delta = checks.open_unit("delta", delta)
    accountant = accounting.check_accountant(accountant)
    confidence = checks.open_unit("confidence", confidence)
    random_norms = checks.integer("random_norms", random_norms, minimum=0)
    if cls.full_batch and q != 1:
        raise ValueError(f"{name!r} is full-batch (every step holds the whole training set): audit it at "
                         f"sample rate 1, not {q!r}")
    start = time.perf_counter()
    audited, swept = worst_canary(cls, scenario, seed, random_norms)
    patterns = sign_patterns(steps, seed)
    without = worlds(cls, audited, patterns[0])[0]  # D: the background at every step, whatever the canary's signs
    quiet0 = without.play(NoNoise())
    names = list(quiet0.statistics[0])  # the first step's releases, in their declared order
    released = list(dict.fromkeys(n for statistics in quiet0.statistics for n in statistics))
    # the step's audit, and each release's on its own when the steps release more than one statistic
    targets = {GRADIENT: (audited, swept), **{n: worst_canary(cls, scenario, seed, random_norms, target=n)
                                              for n in (names if len(released) > 1 else [])}}
    claims = {t: _claims(_sigmas(quiet0, t), q, delta, accountant) for t in targets}
    each = 1 - (1 - confidence) / (len(patterns) * len(targets) + len(names))

    noise = GaussianNoise(seed)
    plays0 = [without.play(noise) for _ in range(trials)]
    game = _Game(cls, quiet0, plays0, _memberships(sampler, without.n_background, q, trials, steps, seed + 1), noise,
                 released)
    worst = {}
    for members in _by_canary(targets).values():
        for signs in patterns:
            for t, (certificate, features, scores) in game.certify(targets[members[0]][0], signs, members, delta,
                                                                   each).items():
                excess = _excess(certificate, *claims[t])
                if t not in worst or excess > worst[t][0]:
                    worst[t] = (excess, certificate, signs, features, scores)
    _, certificate, signs, features, scores = worst[GRADIENT]
    alone = []
    for n, declared in zip(names, quiet0.declared[0]):
        _, bound, signs_n, _, _ = worst.get(n, worst[GRADIENT])  # one release: its audit is the step's
        swept_n = worst_canary(cls, scenario, seed, random_norms, target=n)[1]  # its own sweep (computed once)
        residuals = np.concatenate([play.statistics[0][n] - quiet0.statistics[0][n] for play in plays0])
        epsilon_n, mu_n = claims.get(n, claims[GRADIENT])
        alone.append(ReleaseAudit(
            name=n, noise_multiplier=declared.noise_multiplier, sensitivity=declared.sensitivity,
            shift=swept_n.worst_shift, canary=_canary(swept_n), signs=signs_n, epsilon_claimed=epsilon_n,
            epsilon_lower=bound.epsilon, mu_claimed=mu_n, mu_lower=bound.mu, noise_std=declared.noise_std,
            noise_std_upper=noise_std_upper(residuals, each)))
    epsilon_claimed, mu_claimed = claims[GRADIENT]
    return AuditResult(
        method=name, broken=broken, trials=trials, sample_rate=q, steps=steps, delta=delta, accountant=accountant,
        noise_multiplier=quiet0.noise_multipliers[0], sensitivity=swept.sensitivity, shift=swept.worst_shift,
        canary=_canary(swept), signs=signs, epsilon_claimed=epsilon_claimed, epsilon_lower=certificate.epsilon,
        mu_claimed=mu_claimed, mu_lower=certificate.mu, confidence=confidence, features=tuple(features.names),
        releases=tuple(alone), seconds=time.perf_counter() - start, state=scenario.state, scores=scores)


def _by_canary(targets: dict[str, tuple[Scenario, Sweep]]) -> dict[tuple, list[str]]:
    """The targets grouped by the canary they are audited at (their sweep's worst): those of one canary share its
    plays of D'."""
    groups: dict[tuple, list[str]] = {}
    for t, (_, s) in targets.items():
        groups.setdefault((s.worst_direction, None if s.worst_direction == "scenario" else s.worst_norm), []).append(t)
    return groups


class _Game:
    """The plays of D, shared by every audit of one (method, scenario, q, T), and the plays of D' at a canary."""

    def __init__(self, cls: type, quiet0: Play, plays0: list[Play], present: list, noise: GaussianNoise,
                 released: list[str]):
        self.cls, self.quiet0, self.plays0, self.present, self.noise = cls, quiet0, plays0, present, noise
        self.released = released  # every release of the steps, in order

    def certify(self, audited: Scenario, signs: tuple[int, ...], targets: list[str], delta: float,
                confidence: float) -> dict[str, tuple]:
        """For each target, the certificate of the canary of ``audited`` with ``signs``, its features and the scores
        (D, D'), from one set of plays of D' for all of them."""
        with_canary = worlds(self.cls, audited, signs)[1]
        quiet1 = with_canary.play(NoNoise())
        gradient = _effects(self.quiet0, quiet1, GRADIENT)
        features = {}
        for t in targets:  # the step reads every release that is not the noisy gradient itself; a release, its own
            read = ([GRADIENT] + [n for n in self.released
                                  if not _same_effects(_effects(self.quiet0, quiet1, n), gradient)]
                    if t == GRADIENT else [t])
            features[t] = _Features(self.quiet0, quiet1, read, diagnostics=t == GRADIENT)
        x1 = {t: [] for t in targets}
        for inside in self.present:
            play = with_canary.play(self.noise, inside)
            for t in targets:
                x1[t].append(features[t](play))
        out, half = {}, len(self.plays0) // 2
        for t in targets:
            x0, x = np.array([features[t](play) for play in self.plays0]), np.array(x1[t])
            w = discriminant(x0[:half], x[:half])
            out[t] = (certify(x0 @ w, x @ w, delta=delta, confidence=confidence), features[t], (x0 @ w, x @ w))
        return out


def audit(method: str, **options) -> AuditResult:
    """The white-box audit of the registered method ``method`` in its scenario (:data:`SCENARIOS`); ``options`` are
    :func:`run`'s (trials, sample_rate, steps, delta, accountant, seed, confidence, random_norms)."""
    checks.one_of("method", method, METHODS)
    return run(METHODS[method], SCENARIOS[method], name=method, **options)
