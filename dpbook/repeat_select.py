r"""Renyi DP of releasing the best of a *random* number of runs (Papernot & Steinke, "Hyperparameter Tuning with
Renyi Differential Privacy", ICLR 2022, arXiv 2110.03620).

A search trains :math:`K` candidates, each a run :math:`Q` of some private training (with a hyperparameter point drawn
at random inside the run), and releases only the best by a score that :math:`Q` computes. With :math:`K` fixed, the
release can cost as much as composing :math:`K` runs. Papernot and Steinke show that with :math:`K` *random*, drawn
from a suitable distribution independent of the data, it costs a single run's Renyi DP plus terms that grow like
:math:`\log \mathbb E[K]`. This module holds the two distributions and the two theorems.

**The distributions** (:class:`RunCount`):

- Poisson with mean :math:`\mu`: :math:`P[K=k] = e^{-\mu}\mu^k/k!`, :math:`k \ge 0`. :math:`K = 0` happens with
  probability :math:`e^{-\mu}`: the search then trains nothing and releases nothing (the output :math:`\bot`).
- The truncated negative binomial :math:`\mathcal D_{\eta,\gamma}` with shape :math:`\eta \ge 0` and
  :math:`\gamma \in (0, 1)` (Theorem 2 also allows :math:`-1 < \eta < 0`; this module keeps to the shapes Google's
  ``dp-accounting``, its cross-check, implements):

  .. math::

      P[K=k] = \frac{(1-\gamma)^k}{\gamma^{-\eta}-1}\prod_{\ell=0}^{k-1}\frac{\ell+\eta}{\ell+1}, \quad k \ge 1,
      \qquad \mathbb E[K] = \frac{\eta(1-\gamma)}{\gamma(1-\gamma^\eta)}.

  :math:`\eta = 1` is the geometric distribution :math:`P[K=k] = \gamma(1-\gamma)^{k-1}`; :math:`\eta \to 0` the
  logarithmic distribution :math:`P[K=k] = (1-\gamma)^k/(k\ln(1/\gamma))`, mean :math:`(1/\gamma-1)/\ln(1/\gamma)`.
  :math:`K \ge 1`: something is always released. A :class:`RunCount` is given by its mean; :math:`\gamma` is solved
  from it (rounded towards the larger mean, the conservative side).

**Theorem 2 (truncated negative binomial).** If :math:`Q` is :math:`(\lambda, \varepsilon)`-RDP and
:math:`(\hat\lambda, \hat\varepsilon)`-RDP, with :math:`\lambda > 1` and :math:`\hat\lambda \ge 1`, releasing the best
of :math:`K \sim \mathcal D_{\eta,\gamma}` runs is :math:`(\lambda, \varepsilon')`-RDP with

.. math::

    \varepsilon' = \varepsilon + (1+\eta)\Big(1-\frac1{\hat\lambda}\Big)\hat\varepsilon
    + \frac{(1+\eta)\ln(1/\gamma)}{\hat\lambda} + \frac{\ln \mathbb E[K]}{\lambda-1}.

The two middle terms do not depend on :math:`\lambda`: they are minimised once over :math:`\hat\lambda` in the order
grid.

**Theorem 6 (Poisson).** If :math:`Q` is :math:`(\lambda, \varepsilon)`-RDP and
:math:`(\hat\varepsilon, \hat\delta)`-DP with :math:`e^{\hat\varepsilon} \le 1 + 1/(\lambda-1)`, releasing the best of
:math:`K \sim \mathrm{Poisson}(\mu)` runs is :math:`(\lambda, \varepsilon')`-RDP with

.. math::

    \varepsilon' = \varepsilon + \mu\hat\delta + \frac{\ln\mu}{\lambda-1}.

At each :math:`\lambda`, :math:`\hat\varepsilon = \ln(1 + 1/(\lambda-1))` (the largest the condition allows) and
:math:`\hat\delta` is the run's own :math:`\delta` at :math:`\hat\varepsilon`, converted from its RDP curve
(Balle et al. 2020, Thm. 21, the conversion :mod:`dpbook.accounting` uses, inverted) at the best order of the grid.

**The search's** :math:`(\varepsilon, \delta)`. The run's RDP curve is that of its own ledger history, heterogeneous
histories included (:func:`dpbook.accounting.rdp_at_orders`); the theorem maps it order by order; since a Renyi
divergence does not decrease with the order, a bound at an order also bounds every lower order, and the curve is
lowered accordingly; then :func:`dpbook.accounting.epsilon_of_rdp` converts it at the best order. The grid is
:mod:`dpbook.accounting`'s: Opacus's orders with the low orders 1.01-1.09, grown with
:data:`~dpbook.accounting.HIGH_ORDER_CHUNKS` while the optimum sits at its largest order.

What the theorems require of the search (the chapter "What tuning really costs" spells it out): the :math:`K` runs are
independent copies of one randomised run :math:`Q`, so each run draws its hyperparameters afresh (uniformly, with
replacement); :math:`K` is drawn independently of the data; each run's output carries a score computed by the run
itself (here: accuracy on held-out test data, which is not the private training set), and the search releases the
run with the best score, ties broken by a fixed rule (the first); nothing about the other runs is released, not even
:math:`K`.

On the MNIST setting (:math:`q = 256/60000`, :math:`T = 2{,}344`, :math:`\delta = 1/60000`) one run at
:math:`\sigma = 1` costs about 1.30; the best of a Poisson number of runs with mean 10, about 2.69:

>>> q, T, delta = 256 / 60000, 2344, 1 / 60000
>>> round(search_epsilon([(1.0, q, T)], delta, RunCount.poisson(10)).epsilon, 2)
2.69
>>> round(search_epsilon([(1.0, q, T)], delta, RunCount.logarithmic(10)).epsilon, 2)
2.28
"""

from __future__ import annotations

__all__ = ["RunCount", "search_rdp", "search_epsilon"]

import functools
import math
from dataclasses import dataclass

import numpy as np

from dpbook import accounting, checks
from dpbook.accounting import LOW_ORDERS, OPACUS_ORDERS, RDPOptimum, Segment


def _tnb_mean(gamma: float, eta: float) -> float:
    r""":math:`\mathbb E[K]` of :math:`\mathcal D_{\eta,\gamma}`: :math:`\eta(1-\gamma)/(\gamma(1-\gamma^\eta))`, its
    limit :math:`(1/\gamma-1)/\ln(1/\gamma)` at :math:`\eta = 0`, and 1 at :math:`\gamma = 1`."""
    if gamma == 1:
        return 1.0
    log_gamma = math.log(gamma)
    if eta == 0:
        return (1 / gamma - 1) / -log_gamma
    return eta * (1 - gamma) / (gamma * -math.expm1(eta * log_gamma))


@functools.lru_cache(maxsize=256)
def _tnb_gamma(mean: float, eta: float) -> float:
    r"""The :math:`\gamma` whose :math:`\mathcal D_{\eta,\gamma}` has ``mean`` (which decreases as :math:`\gamma`
    grows), bisected in log space down to a relative width of :math:`10^{-12}`; the lower end, whose mean is at least
    ``mean``."""
    if mean == 1:
        return 1.0
    lo, hi = 1e-300, 1.0
    while hi - lo > 1e-12 * hi:
        mid = math.sqrt(lo * hi) if hi / lo > 4 else (lo + hi) / 2
        if _tnb_mean(mid, eta) >= mean:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class RunCount:
    r"""The distribution of the number :math:`K` of runs of a search: Poisson (``shape=math.inf``) or the truncated
    negative binomial with shape :math:`\eta` = ``shape`` (1: geometric, 0: logarithmic), given by its ``mean``.

    >>> RunCount.logarithmic(10)
    RunCount(mean=10.0, shape=0.0)
    >>> RunCount.logarithmic(10).name, round(RunCount.logarithmic(10).gamma, 4)
    ('logarithmic', 0.0269)
    >>> round(RunCount.geometric(10).pmf(1), 3), round(RunCount.poisson(10).pmf(0), 6)
    (0.1, 4.5e-05)
    """

    mean: float
    shape: float = math.inf

    def __post_init__(self):
        mean = checks.real("mean (the expected number of runs E[K])", self.mean)
        if not (math.isfinite(mean) and mean >= 1):
            raise ValueError(f"mean (the expected number of runs E[K]) must be a finite number >= 1, got {self.mean!r}")
        shape = checks.real("shape (eta of the truncated negative binomial; inf for Poisson)", self.shape)
        if not shape >= 0:  # Theorem 2 allows eta > -1; dp-accounting, the cross-check, takes eta >= 0
            raise ValueError(f"shape must be >= 0 (eta of the truncated negative binomial: 0 logarithmic, 1 "
                             f"geometric) or math.inf (Poisson), got {self.shape!r}")
        object.__setattr__(self, "mean", float(mean))
        object.__setattr__(self, "shape", float(shape))

    @classmethod
    def poisson(cls, mean: float) -> "RunCount":
        """:math:`K \\sim` Poisson(``mean``) (Theorem 6); :math:`K = 0` is possible."""
        return cls(mean, math.inf)

    @classmethod
    def geometric(cls, mean: float) -> "RunCount":
        """The truncated negative binomial with :math:`\\eta = 1`: :math:`\\gamma = 1/` ``mean``."""
        return cls(mean, 1.0)

    @classmethod
    def logarithmic(cls, mean: float) -> "RunCount":
        """The truncated negative binomial with :math:`\\eta = 0`."""
        return cls(mean, 0.0)

    @property
    def is_poisson(self) -> bool:
        return self.shape == math.inf

    @property
    def name(self) -> str:
        """"Poisson", "geometric", "logarithmic" or "truncated negative binomial (eta=...)"."""
        names = {math.inf: "Poisson", 1.0: "geometric", 0.0: "logarithmic"}
        return names.get(self.shape, f"truncated negative binomial (eta={self.shape:g})")

    @property
    def gamma(self) -> float | None:
        r""":math:`\gamma` of the truncated negative binomial (None for Poisson)."""
        if self.is_poisson:
            return None
        return 1 / self.mean if self.shape == 1 else _tnb_gamma(self.mean, self.shape)

    @property
    def actual_mean(self) -> float:
        r""":math:`\mathbb E[K]` of the distribution as sampled: ``mean`` itself for Poisson, the mean at the solved
        :math:`\gamma` (at least ``mean``, by at most :math:`10^{-12}` relative) otherwise. The theorems use it."""
        return self.mean if self.is_poisson else _tnb_mean(self.gamma, self.shape)

    def pmf(self, k: int) -> float:
        """:math:`P[K = k]`."""
        k = checks.integer("k", k, minimum=0)
        if self.is_poisson:
            return math.exp(-self.mean + k * math.log(self.mean) - math.lgamma(k + 1))
        if k == 0:
            return 0.0
        gamma, eta = self.gamma, self.shape
        if gamma == 1:
            return float(k == 1)
        if eta == 0:
            return math.exp(k * math.log1p(-gamma) - math.log(k) - math.log(-math.log(gamma)))
        # prod_{l<k} (l + eta)/(l + 1) = Gamma(k + eta) / (Gamma(eta) k!)
        log_prod = math.lgamma(k + eta) - math.lgamma(eta) - math.lgamma(k + 1)
        return math.exp(k * math.log1p(-gamma) + log_prod - math.log(math.expm1(-eta * math.log(gamma))))

    def _first(self) -> float:
        r""":math:`P[K=1]` of the truncated negative binomial: :math:`(1-\gamma)\eta/(\gamma^{-\eta}-1)`, or
        :math:`(1-\gamma)/\ln(1/\gamma)` at :math:`\eta = 0` (1 at :math:`\gamma = 1`)."""
        gamma = self.gamma
        if gamma == 1:
            return 1.0
        if self.shape == 0:
            return (1 - gamma) / -math.log(gamma)
        return (1 - gamma) * self.shape / math.expm1(-self.shape * math.log(gamma))

    def _ratio(self, k: int) -> float:
        r""":math:`P[K=k+1]/P[K=k] = (1-\gamma)(k+\eta)/(k+1)`."""
        return (1 - self.gamma) * (k + self.shape) / (k + 1)

    def tail(self, k: int) -> float:
        r""":math:`P[K > k]`: how often a search makes more than ``k`` runs.

        >>> round(RunCount.poisson(10).tail(20), 4), round(RunCount.logarithmic(10).tail(20), 4)
        (0.0016, 0.1365)
        """
        k = checks.integer("k", k, minimum=0)
        return max(0.0, 1.0 - math.fsum(self.pmf(j) for j in range(k + 1)))

    def sample(self, rng: np.random.Generator) -> int:
        """One draw of :math:`K` from ``rng`` (numpy's Poisson sampler; the inverse CDF for the truncated negative
        binomial, one uniform draw).

        >>> [RunCount.poisson(4).sample(np.random.default_rng(s)) for s in range(5)]
        [2, 5, 3, 2, 5]
        """
        if self.is_poisson:
            return int(rng.poisson(self.mean))
        u = rng.random()
        k, p = 1, self._first()
        cdf = p
        while cdf < u and p > 0:  # p reaches 0 only where rounding keeps the cdf from reaching u
            p *= self._ratio(k)
            k += 1
            cdf += p
        return k


def _theorem(rdp: np.ndarray, a: np.ndarray, count: RunCount) -> tuple[np.ndarray, np.ndarray]:
    r"""Theorem 6 (Poisson) or Theorem 2 at each order of ``a``, before the lowering; and, at each order, the position
    of the order whose RDP fixes the added term (the best order for :math:`\hat\delta`; the best :math:`\hat\lambda`,
    the same everywhere)."""
    log_mean = math.log(count.actual_mean)
    if count.is_poisson:
        eps_hat = np.log1p(1 / (a - 1))  # the largest epsilon-hat Theorem 6 allows at each lambda
        # the run's delta at eps_hat[i], from its RDP at every order j (Balle et al. 2020, Thm. 21, solved for delta)
        log_delta = (a - 1) * (rdp - eps_hat[:, None] + np.log1p(-1 / a)) - np.log(a)
        fixer = log_delta.argmin(axis=1)
        delta_hat = np.minimum(1.0, np.exp(log_delta[np.arange(len(a)), fixer]))
        return rdp + count.mean * delta_hat + log_mean / (a - 1), fixer
    eta, gamma = count.shape, count.gamma
    terms = (1 - 1 / a) * rdp - math.log(gamma) / a
    best_hat = int(terms.argmin())
    constant = (1 + eta) * terms[best_hat]  # minimised over lambda-hat
    return rdp + constant + log_mean / (a - 1), np.full(len(a), best_hat)


def search_rdp(rdp: np.ndarray, orders: tuple[float, ...], count: RunCount) -> np.ndarray:
    r"""The RDP curve of releasing the best of :math:`K \sim` ``count`` runs, each with the RDP curve ``rdp`` at
    ``orders`` (increasing, all > 1): Theorem 6 (Poisson) or Theorem 2 (truncated negative binomial), then lowered to
    the minimum over the orders at or above each (a Renyi divergence does not decrease with the order).

    >>> orders = (2.0, 4.0, 8.0, 16.0)
    >>> rdp = np.array(orders) / (2 * 4.0 ** 2)           # a Gaussian mechanism, sigma = 4: alpha / (2 sigma^2)
    >>> (search_rdp(rdp, orders, RunCount.logarithmic(10)) - rdp).round(3).tolist()  # what the search adds
    [1.187, 1.125, 1.0, 0.824]
    """
    out, _ = _theorem(rdp, np.asarray(orders, dtype=np.float64), count)
    return np.minimum.accumulate(out[::-1])[::-1]


@dataclass(frozen=True)
class _Search:
    r""":func:`search_rdp` as a :class:`dpbook.accounting.CurveMap`: it grows with the run's curve, and its value at
    an order is fixed by the run's RDP at the order at or above it that the lowering picks and at that order's
    :math:`\hat\delta` or :math:`\hat\lambda` order."""

    count: RunCount

    def __call__(self, rdp: np.ndarray, orders: tuple[float, ...]) -> np.ndarray:
        return search_rdp(rdp, orders, self.count)

    def support(self, rdp: np.ndarray, orders: tuple[float, ...], i: int) -> tuple[int, int]:
        out, fixer = _theorem(rdp, np.asarray(orders, dtype=np.float64), self.count)
        lowest = i + int(out[i:].argmin())
        return lowest, int(fixer[lowest])


def _check_count(count) -> RunCount:
    if not isinstance(count, RunCount):
        raise ValueError(f"count must be a RunCount (e.g. RunCount.poisson(10)), got {count!r}")
    return count


def search_epsilon(history: list[Segment], delta: float, count: RunCount) -> RDPOptimum:
    r"""The :math:`(\varepsilon, \delta)` of releasing the best of :math:`K \sim` ``count`` runs whose ledger history
    is ``history`` (``(sigma, q, steps)`` segments): :func:`dpbook.accounting.rdp_optimum` of :func:`search_rdp`'s
    curve, on the low orders and Opacus's, grown until the optimum is interior; ``edge`` says where it is not.

    A run that releases nothing costs nothing, so does the search; a release without noise makes it infinite.

    >>> opt = search_epsilon([(1.0, 0.01, 1000)], 1e-5, RunCount.poisson(1))
    >>> opt.epsilon > search_epsilon([(1.0, 0.01, 1000)], 1e-5, RunCount.geometric(1)).epsilon, opt.edge
    (True, None)
    """
    delta = checks.open_unit("delta", delta, "the delta of the whole search")
    count = _check_count(count)
    history, trivial = accounting.released([accounting.check_segment(seg, i) for i, seg in enumerate(history)])
    if trivial is not None:
        return RDPOptimum(trivial, math.nan, None)
    return accounting.rdp_optimum(history, delta, _Search(count), LOW_ORDERS + OPACUS_ORDERS)
