r"""From membership guesses to certified lower bounds on epsilon and on the Gaussian-DP mu.

An audit plays the distinguishing game of the definition of differential privacy. It runs a mechanism many times
on a dataset :math:`D` and on :math:`D'` = :math:`D` plus one *canary*, scores every output, and guesses "canary
present" when the score exceeds a threshold :math:`\tau`. Two error rates follow: the false-positive rate
:math:`\mathrm{FPR} = P[\text{score} > \tau \mid D]` and the false-negative rate
:math:`\mathrm{FNR} = P[\text{score} \le \tau \mid D']`. An :math:`(\varepsilon, \delta)`-DP mechanism forces, for
every test (Kairouz, Oh & Viswanath 2015),

.. math::

    \mathrm{FPR} + e^\varepsilon\,\mathrm{FNR} \ge 1 - \delta \qquad\text{and}\qquad
    \mathrm{FNR} + e^\varepsilon\,\mathrm{FPR} \ge 1 - \delta,

so an observed pair of rates *refutes* every :math:`\varepsilon` below

.. math::

    \max\Big(\log\frac{1 - \delta - \mathrm{FNR}}{\mathrm{FPR}},
        \log\frac{1 - \delta - \mathrm{FPR}}{\mathrm{FNR}}\Big).

A :math:`\mu`-GDP mechanism (Dong, Roth & Su 2022) forces
:math:`\mathrm{FNR} \ge \Phi\big(\Phi^{-1}(1 - \mathrm{FPR}) - \mu\big)`, which refutes every :math:`\mu` below
:math:`\Phi^{-1}(1 - \mathrm{FPR}) - \Phi^{-1}(\mathrm{FNR})`.

The rates are estimated from finitely many trials, so each is replaced by its one-sided Clopper-Pearson upper
bound at level :math:`1 - \alpha/2`: with probability at least :math:`1 - \alpha` (95 % by default) both true rates
lie below their bounds, and then the bound computed from them is a true lower bound. Choosing the threshold on the
same trials would void that guarantee; :func:`certify` chooses it on one half of the trials and evaluates it on
the other half (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021).

The one-run audit (Steinke, Nasr & Jagielski 2023) plays the game with :math:`m` canaries in one training run instead of
one canary in many runs: :func:`one_run_epsilon` inverts their Theorem 3.1 (with its delta term) at 95 % confidence.
"""

from __future__ import annotations

__all__ = [
    "CONFIDENCE", "clopper_pearson_upper", "epsilon_from_rates", "mu_from_rates", "Certificate",
    "certify", "noise_std_upper", "one_run_p_value", "one_run_epsilon"
]

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dpbook import checks

CONFIDENCE = 0.95
"""The confidence level of every certified lower bound (joint over the two error rates of a test)."""


def clopper_pearson_upper(errors, trials, confidence: float):
    r"""One-sided Clopper-Pearson upper bound on a rate, ``errors`` of ``trials``: ``P[rate <= bound] >= confidence``.

    The ``confidence`` quantile of Beta(errors + 1, trials - errors); 1 when every trial erred. Works elementwise.

        >>> round(float(clopper_pearson_upper(0, 1000, 0.975)), 5)   # no error in 1,000 trials: rate < 0.37 %
        0.00368
        >>> float(clopper_pearson_upper(10, 10, 0.975))
        1.0
    """
    errors, trials = np.asarray(errors, dtype=float), np.asarray(trials, dtype=float)
    full = errors >= trials
    bound = stats.beta.ppf(confidence, errors + 1, np.maximum(trials - errors, 1))
    return np.where(full, 1.0, bound)


def epsilon_from_rates(fpr, fnr, delta: float):
    r"""The largest :math:`\varepsilon` that rates ``(FPR, FNR)`` refute at ``delta`` (0 when they refute none);
    elementwise.

        >>> round(float(epsilon_from_rates(0.01, 0.5, 1e-5)), 4)    # log((1 - 1e-5 - 0.5) / 0.01)
        3.912
    """
    fpr, fnr = np.asarray(fpr, dtype=float), np.asarray(fnr, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        one = np.log(np.maximum(1 - delta - fnr, 0) / fpr)
        two = np.log(np.maximum(1 - delta - fpr, 0) / fnr)
    return np.maximum(np.nan_to_num(np.maximum(one, two), nan=0.0, neginf=0.0), 0.0)


def mu_from_rates(fpr, fnr):
    r"""The largest Gaussian-DP :math:`\mu` that rates ``(FPR, FNR)`` refute:
    :math:`\Phi^{-1}(1 - \mathrm{FPR}) - \Phi^{-1}(\mathrm{FNR})`, floored at 0.

        >>> round(float(mu_from_rates(stats.norm.sf(1.0), 0.5)), 6)   # the threshold test of N(0,1) vs N(1,1)
        1.0
    """
    return np.maximum(stats.norm.isf(np.asarray(fpr, dtype=float)) - stats.norm.ppf(np.asarray(fnr, dtype=float)),
                      0.0)


def _error_counts(without: np.ndarray, with_canary: np.ndarray, thresholds: np.ndarray):
    """False positives (scores of D above tau) and false negatives (scores of D' at or below tau) per threshold."""
    fp = len(without) - np.searchsorted(np.sort(without), thresholds, side="right")
    fn = np.searchsorted(np.sort(with_canary), thresholds, side="right")
    return fp, fn


def _bounds_at(without, with_canary, thresholds, *, delta: float, confidence: float = CONFIDENCE):
    r"""Certified ``(epsilon, mu)`` lower bounds of the tests "score > tau" for each threshold tau.

    ``without`` holds the scores of outputs on D, ``with_canary`` those on D'. Each rate is bounded at level
    ``1 - (1 - confidence) / 2``, so that both bounds hold together with probability ``confidence``.

        >>> rng = np.random.default_rng(0)
        >>> eps, mu = _bounds_at(rng.normal(0, 1, 5000), rng.normal(3, 1, 5000), [1.5], delta=1e-5)
        >>> 1.5 < float(mu[0]) < 3.0, float(eps[0]) > 1.0
        (True, True)
    """
    without, with_canary = np.asarray(without, dtype=float), np.asarray(with_canary, dtype=float)
    thresholds = np.atleast_1d(np.asarray(thresholds, dtype=float))
    fp, fn = _error_counts(without, with_canary, thresholds)
    level = 1 - (1 - confidence) / 2
    fpr = clopper_pearson_upper(fp, len(without), level)
    fnr = clopper_pearson_upper(fn, len(with_canary), level)
    return epsilon_from_rates(fpr, fnr, delta), mu_from_rates(fpr, fnr)


@dataclass(frozen=True)
class Certificate:
    """Lower bounds certified on held-out trials, with the thresholds chosen on the other half."""

    epsilon: float  # epsilon_lower: no (epsilon, delta)-DP mechanism with a smaller epsilon produced these trials
    mu: float  # mu_lower: likewise for mu-GDP
    epsilon_threshold: float
    mu_threshold: float
    confidence: float
    held_out: int  # trials per world used to certify


def certify(without, with_canary, *, delta: float, confidence: float = CONFIDENCE,
            candidates: int = 256) -> Certificate:
    r"""Lower bounds on epsilon and mu from two score samples, each bound certified at ``confidence``.

    The first half of each sample chooses the threshold that maximises the bound (among ``candidates`` quantiles of
    the pooled scores); the second half, which played no part in that choice, certifies it. The two bounds hold
    together with probability at least ``confidence`` (each rate is bounded at ``1 - (1 - confidence) / 4``).

        >>> rng = np.random.default_rng(0)
        >>> c = certify(rng.normal(0, 1, 20000), rng.normal(1, 1, 20000), delta=1e-5)   # exactly 1-GDP
        >>> 0.8 < c.mu <= 1.0, c.epsilon < 4.4, c.held_out
        (True, True, 10000)
    """
    without, with_canary = np.asarray(without, dtype=float), np.asarray(with_canary, dtype=float)
    half0, half1 = len(without) // 2, len(with_canary) // 2
    if min(half0, half1) < 1:
        raise ValueError(f"certify needs at least 2 scores per world, got {len(without)} and {len(with_canary)}")
    choose0, check0 = without[:half0], without[half0:]
    choose1, check1 = with_canary[:half1], with_canary[half1:]
    pooled = np.concatenate([choose0, choose1])
    thresholds = np.unique(np.quantile(pooled, np.linspace(0, 1, candidates)))
    eps, mu = _bounds_at(choose0, choose1, thresholds, delta=delta, confidence=confidence)
    tau_eps, tau_mu = thresholds[int(np.argmax(eps))], thresholds[int(np.argmax(mu))]
    each = 1 - (1 - confidence) / 2  # two certified bounds, both true with probability >= confidence
    eps_held, _ = _bounds_at(check0, check1, [tau_eps], delta=delta, confidence=each)
    _, mu_held = _bounds_at(check0, check1, [tau_mu], delta=delta, confidence=each)
    return Certificate(float(eps_held[0]), float(mu_held[0]), float(tau_eps), float(tau_mu), confidence,
                       min(len(check0), len(check1)))


# --------------------------------------------------------------------------------------------------------------
# Steinke, Nasr & Jagielski 2023: m canaries, one run
# --------------------------------------------------------------------------------------------------------------

def noise_std_upper(residuals: np.ndarray, confidence: float = CONFIDENCE) -> float:
    r"""An upper confidence bound on the std of zero-mean Gaussian noise from draws of it: with probability at least
    ``confidence`` the true std lies below :math:`\big(\sum_ir_i^2/\chi^2_{n,\,1 - \mathrm{confidence}}\big)^{1/2}`
    (:math:`\sum_ir_i^2/\mathrm{std}^2` is :math:`\chi^2_n` for :math:`n` i.i.d. draws). The white-box audit reads the
    residuals of a release (its noisy statistic minus its noise-free one) and flags a release whose bound falls below
    the declared std: its noise is smaller than the accountant was told.

        >>> draws = np.random.default_rng(0).normal(0, 2.0, 40000)
        >>> 2.0 < noise_std_upper(draws) < 2.04, noise_std_upper(draws / 2) < 2.0
        (True, True)
    """
    r = np.asarray(residuals, dtype=np.float64).ravel()
    confidence = checks.open_unit("confidence", confidence)
    return math.sqrt(float(r @ r) / stats.chi2.ppf(1 - confidence, len(r)))


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    r"""P[at least v of r guesses correct] for an (epsilon, delta)-DP run with m canaries (Steinke et al., Thm 3.1).

    Each of the :math:`m` canaries is included with probability 1/2; the auditor guesses in/out for :math:`r` of
    them. Under :math:`(\varepsilon, 0)`-DP the number of correct guesses is dominated by
    :math:`\mathrm{Binomial}\big(r, e^\varepsilon/(1 + e^\varepsilon)\big)`; the :math:`\delta` term adds
    :math:`2m\delta\max_{1\le i\le v}P[v - i \le \mathrm{Binomial} < v]/i`.

        >>> round(one_run_p_value(1000, 100, 50, 0.0, 0.0), 4)   # coin flips: half right is the median
        0.5398
    """
    p = 1 / (1 + math.exp(-epsilon))  # accuracy of epsilon-DP randomised response
    tail = stats.binom.sf(v - 1, r, p)  # P[Binomial(r, p) >= v]
    below = stats.binom.pmf(np.arange(v - 1, -1, -1), r, p)  # P[Binomial = v - i], i = 1..v
    slack = float(np.max(np.cumsum(below) / np.arange(1, v + 1))) if v > 0 else 0.0
    return min(1.0, float(tail) + 2 * m * delta * slack)


def one_run_epsilon(m: int, r: int, v: int, delta: float, *, confidence: float = CONFIDENCE) -> float:
    r"""The largest epsilon that ``v`` correct guesses of ``r`` (m canaries) refute at ``confidence`` (Steinke et al.).

    Bisection on epsilon for ``one_run_p_value(...) = 1 - confidence``; 0 when even epsilon = 0 is not refuted.

        >>> round(one_run_epsilon(1000, 100, 100, 0.0), 2)   # 100 of 100 right
        3.49
        >>> one_run_epsilon(1000, 100, 50, 0.0)
        0.0
    """
    m = checks.integer("m (number of canaries)", m)
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    alpha = 1 - confidence
    if one_run_p_value(m, r, v, 0.0, delta) >= alpha:
        return 0.0
    low, high = 0.0, 1.0
    while one_run_p_value(m, r, v, high, delta) < alpha:
        low, high = high, 2 * high
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if one_run_p_value(m, r, v, mid, delta) < alpha else (low, mid)
    return low
