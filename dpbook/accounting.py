r"""Privacy accounting: epsilon of a training run, noise calibration, and the noise splits of the book's methods.

Every method in the book releases, at each step, a Poisson-subsampled Gaussian mechanism: each example joins
the batch with probability :math:`q` (the sample rate), a sum with per-example L2 sensitivity 1 (after rescaling)
gets Gaussian noise of standard deviation :math:`\sigma` (the noise multiplier). After :math:`T` such steps the run
is :math:`(\varepsilon, \delta)`-DP. Two accountants turn :math:`(\sigma, q, T, \delta)` into :math:`\varepsilon`,
both from Opacus:

- ``"rdp"``: Renyi DP of the subsampled Gaussian (Mironov, Talwar & Zhang 2019, Sec. 3.3), summed over steps,
  converted to :math:`(\varepsilon, \delta)` with Balle et al. 2020, Thm. 21, minimised over the orders
  :math:`\alpha`. The grid starts as Opacus's :math:`\{1.1, 1.2, \ldots, 10.9, 12, \ldots, 63\}` and grows (up to
  :math:`\alpha = 65{,}536`, down to 1.01) until the best order is interior (:func:`rdp_optimum`): at small
  :math:`\delta` (a tuning protocol's :math:`10^{-17}`) or large noise the best order is far above 63, where
  Opacus's grid gives a loose bound. Where Opacus's grid holds the optimum the answer is
  Opacus's, digit for digit. An optimum at the grown grid's end is refused with an error, never hidden. This is
  what most papers report (DC-SGD and DPDR use it).
- ``"prv"``: numerical composition of privacy loss random variables (Gopi, Lee & Wutschitz 2021). Tighter; it
  returns Opacus's upper estimate, about ``eps_error = 0.01`` above the point estimate.

Google's independent ``dp_accounting`` agrees (``tests/test_accounting.py``): its PLD accountant sits about 0.01 below
our PRV; its RDP accountant agrees with ours to ~1e-13 where the best order is an integer and is up to ~0.4% higher
where it is fractional, because it bounds the series for :math:`A_\alpha` by its absolute values where Opacus sums it
exactly. Noise calibrated here agrees with a calibration under Google's RDP accountant (wide order list) to 1 % on the
DC-SGD paper's settings, tuning protocols included.

A history is a list of segments ``(noise_multiplier, sample_rate, steps)``, the format Opacus accountants
keep in their ``history`` attribute; heterogeneous histories (e.g. DPDR's schedule) compose exactly.

Conventions, shared by every function here:

- ``noise_multiplier`` is >= 0. ``0`` means a release without noise: epsilon is ``math.inf`` (no exception).
  ``math.inf`` means nothing was released: the segment costs nothing.
- ``sample_rate`` is in (0, 1]; ``delta`` in (0, 1); ``steps`` an ``int`` >= 0, and 0 steps cost epsilon 0.0.
- Bad input raises ``ValueError`` naming the parameter, its value and the valid range.

>>> round(epsilon(noise_multiplier=1.5, sample_rate=0.04, steps=2250, delta=1e-5), 4)
7.3291
"""

from __future__ import annotations

__all__ = [
    "ACCOUNTANTS", "MAX_NOISE_MULTIPLIER", "calibrate", "epsilon", "epsilon_of_history", "noise_multiplier",
    "PrivacyLedger", "sigma_T", "sigma_delta", "sigma_eff", "OPACUS_ORDERS", "LOW_ORDERS", "MAX_ORDER",
    "HIGH_ORDER_CHUNKS", "RDPOptimum", "rdp_optimum", "CurveMap", "check_interior", "released", "rdp_at_orders",
    "epsilon_of_rdp", "Segment", "check_segment", "first_steps",
    "check_accountant", "check_delta_for"
]

import functools
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import numpy as np
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.analysis import rdp as rdp_analysis
from opacus.accountants.analysis.prv.domain import Domain
from scipy import special

from dpbook import checks

#: The accountants :func:`epsilon` knows, by name.
ACCOUNTANTS = {"rdp": RDPAccountant, "prv": PRVAccountant}

#: The largest noise multiplier :func:`noise_multiplier` will return (Opacus's own bound, ``MAX_SIGMA``).
MAX_NOISE_MULTIPLIER = 1e6

Segment = tuple[float, float, int]


# --------------------------------------------------------------------------------------------------------------
# Input checks: each names the parameter, its value and the valid range.
# --------------------------------------------------------------------------------------------------------------

def _check_noise_multiplier(value, name: str = "noise_multiplier") -> float:
    return checks.non_negative(name, value, "0 means no noise, i.e. epsilon = inf", allow_inf=True)


def _check_sample_rate(value, name: str = "sample_rate") -> float:
    return checks.rate(name, value, "the Poisson sampling probability q = B/N")


def _check_delta(value, name: str = "delta") -> float:
    return checks.open_unit(name, value, "typically below 1/N")


def check_delta_for(delta: float, N: int, *, weak: bool = False) -> float:
    """``delta`` as the delta of a guarantee about N examples: below 1/N, unless ``weak`` says the caller knows.

    A mechanism that publishes one of the N examples at random, in the clear, is (0, 1/N)-DP: at delta >= 1/N the
    guarantee does not rule that out, so it is refused, naming the risk and the fix. ``weak=True`` accepts it
    (the DC-SGD paper's delta = 1/N, reproduced as the paper sets it).

    >>> check_delta_for(1e-5, 60_000)
    1e-05
    >>> check_delta_for(0.01, 1437)
    Traceback (most recent call last):
    ...
    ValueError: delta=0.01 is at least 1/N = 0.000695894 (N = 1437): a run that publishes one training example in \
the clear is (0, 1/N)-DP, so this guarantee would not rule it out; choose delta < 1/N (e.g. 1e-5, or 1/(10 N)), or \
accept the weak guarantee explicitly (Trainer's allow_weak_delta=True; an Experiment's delta=None is exactly 1/N)
    >>> check_delta_for(1 / 1437, 1437, weak=True) == 1 / 1437
    True
    """
    delta, N = _check_delta(delta), checks.integer("N (training examples)", N)
    if delta >= 1 / N and not weak:
        raise ValueError(f"delta={delta:g} is at least 1/N = {1 / N:g} (N = {N}): a run that publishes one training "
                         f"example in the clear is (0, 1/N)-DP, so this guarantee would not rule it out; choose "
                         f"delta < 1/N (e.g. 1e-5, or 1/(10 N)), or accept the weak guarantee explicitly (Trainer's "
                         f"allow_weak_delta=True; an Experiment's delta=None is exactly 1/N)")
    return delta


def check_accountant(value) -> str:
    checks.one_of("accountant", value, ACCOUNTANTS)
    return value


def check_segment(segment, index: int) -> Segment:
    """``history[index]`` validated as a ``(noise_multiplier, sample_rate, steps)`` triple of python numbers."""
    try:
        sigma, q, steps = segment
    except (TypeError, ValueError):
        raise ValueError(
            f"history[{index}] must be a (noise_multiplier, sample_rate, steps) triple, got {segment!r}") from None
    return (
        _check_noise_multiplier(sigma, f"history[{index}] noise_multiplier"),
        _check_sample_rate(q, f"history[{index}] sample_rate"),
        checks.integer(f"history[{index}] steps", steps, minimum=0),
    )


# --------------------------------------------------------------------------------------------------------------
# RDP orders: Opacus's grid, extended until the optimal order is interior (privacy hygiene rule 9)
# --------------------------------------------------------------------------------------------------------------
# The RDP -> (epsilon, delta) conversion is a minimum over orders alpha, and it is only as tight as the orders it
# sees. Opacus's grid stops at alpha = 63; at small delta (tuning protocols reach 1e-17) or large noise the best
# order lies far above it, and the minimum over Opacus's grid is then a loose, edge-of-grid bound. Here the grid
# starts as Opacus's (so every answer whose optimum Opacus's grid contains is Opacus's, digit for digit) and grows
# chunk by chunk, below and above, while the minimiser sits on its edge.

#: Opacus's orders, always evaluated first: 1.1, 1.2, ..., 10.9, 12, 13, ..., 63.
OPACUS_ORDERS: tuple[float, ...] = tuple(RDPAccountant.DEFAULT_ALPHAS)
#: Orders added below Opacus's when its smallest (1.1) is the best: 1.01, ..., 1.09.
LOW_ORDERS: tuple[float, ...] = tuple(1 + k / 100 for k in range(1, 10))
#: Chunks of integer orders added above, one at a time while the largest order so far is the best: every integer
#: from 64 to 256, then about 1 % apart up to :data:`MAX_ORDER`.
HIGH_ORDER_CHUNKS: tuple[tuple[int, ...], ...] = (
    tuple(range(64, 257)),
    *(tuple(sorted({int(round(a)) for a in np.geomspace(lo + 1, 4 * lo, 140)}))
      for lo in (256, 1024, 4096, 16384)),
)
#: The largest order evaluated. An optimum there means :math:`\varepsilon < \log(1/\delta)/\alpha_{\max}`, with
#: :math:`\alpha_{\max}` = ``MAX_ORDER``: the accountant refuses.
MAX_ORDER: int = HIGH_ORDER_CHUNKS[-1][-1]


def _log_a_int(q: float, sigma: float, alpha: int) -> float:
    r"""log A_alpha of the Poisson-subsampled Gaussian at an integer order (Mironov, Talwar & Zhang 2019, Sec. 3.3):
    A_alpha = sum_{i=0}^{alpha} C(alpha, i) q^i (1-q)^(alpha-i) exp((i^2 - i) / (2 sigma^2)), summed in log space
    (Opacus's loop over i overflows its binomial coefficient above alpha ~ 1030)."""
    i = np.arange(alpha + 1, dtype=np.float64)
    log_binom = special.gammaln(alpha + 1) - special.gammaln(i + 1) - special.gammaln(alpha - i + 1)
    terms = log_binom + i * math.log(q) + (alpha - i) * math.log1p(-q) + (i * i - i) / (2 * sigma ** 2)
    return float(special.logsumexp(terms))


@functools.lru_cache(maxsize=8192)
def _rdp_of_one_step(sigma: float, q: float, orders: tuple[float, ...]) -> np.ndarray:
    """The RDP curve of one subsampled Gaussian step at ``orders`` (cached: a log asks for the same few (sigma, q)
    segments at every epoch, and a calibration for the same chunks at every probe). Opacus's own function for its
    grid and the fractional low orders; :func:`_log_a_int` for the high integer chunks."""
    if orders[0] < 64:
        rdp = rdp_analysis.compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=list(orders))
    elif q == 1:
        rdp = np.array(orders, dtype=np.float64) / (2 * sigma ** 2)  # no subsampling: alpha / (2 sigma^2)
    else:
        rdp = np.array([_log_a_int(q, sigma, a) / (a - 1) for a in orders])
    rdp.flags.writeable = False
    return rdp


def rdp_at_orders(history: Sequence[Segment], orders: tuple[float, ...]) -> np.ndarray:
    """The RDP of a validated history at each of ``orders`` (a tuple): the steps' curves add up order by order."""
    return sum(_rdp_of_one_step(s, q, orders) * t for s, q, t in history)


def epsilon_of_rdp(rdp: np.ndarray, orders: Sequence[float], delta: float) -> np.ndarray:
    """epsilon(alpha) of an RDP curve at each order. Balle et al. 2020, Thm. 21:
    eps = rdp - (log delta + log alpha) / (alpha - 1) + log((alpha - 1) / alpha), Opacus's ``get_privacy_spent``
    formula, in its order of operations."""
    a = np.array(orders, dtype=np.float64)
    return rdp - (math.log(delta) + np.log(a)) / (a - 1) + np.log((a - 1) / a)


class CurveMap(Protocol):
    """A map of RDP curves to RDP curves, order by order on a grid, that does not decrease where the curve grows (e.g.
    :func:`dpbook.repeat_select.search_rdp`); :func:`rdp_optimum` minimises the conversion of its image."""

    def __call__(self, rdp: np.ndarray, orders: tuple[float, ...]) -> np.ndarray: ...

    def support(self, rdp: np.ndarray, orders: tuple[float, ...], i: int) -> Iterable[int]:
        """The positions whose RDP values alone fix the image's value at position ``i``."""


class _Identity:
    """The RDP curve itself."""

    def __call__(self, rdp, orders):
        return rdp

    def support(self, rdp, orders, i):
        return (i,)


class _LazyCurve:
    """The RDP curve of a validated history on a grid, evaluated at the integer orders (each a finite sum) and, on
    demand, at the fractional ones (each a series: about 0.4 ms, nine tenths of Opacus's grid's cost). ``known``
    (order -> RDP) is shared as the grid grows. Between evaluated orders the curve is bracketed: a Rényi divergence
    does not decrease as the order grows (van Erven & Harremoës 2014, Thm. 3), so an unevaluated order's RDP lies
    between the nearest evaluated ones below (0 if none) and above (inf if none), widened by 1e-9 (the series'
    rounding)."""

    def __init__(self, history: list[Segment], orders: tuple[float, ...], known: dict[float, float]):
        self.history, self.orders, self.known = history, orders, known
        self.evaluate(a for a in orders if float(a).is_integer())

    def evaluate(self, orders: Iterable[float]) -> None:
        todo = sorted({a for a in orders if a not in self.known})
        for chunk in ([a for a in todo if a < 64], [a for a in todo if a >= 64]):  # as _rdp_of_one_step splits
            self.known.update(zip(chunk, rdp_at_orders(self.history, tuple(chunk)) if chunk else ()))

    def missing(self, positions: Iterable[int]) -> list[float]:
        return [self.orders[i] for i in positions if self.orders[i] not in self.known]

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds of the curve at every order, exact where evaluated."""
        value = np.array([self.known.get(a, np.nan) for a in self.orders])
        known = ~np.isnan(value)
        below = np.maximum.accumulate(np.where(known, value, 0.0)) * (1 - 1e-9)
        above = np.minimum.accumulate(np.where(known, value, np.inf)[::-1])[::-1] * (1 + 1e-9)
        return np.where(known, value, below), np.where(known, value, above)


def _pruned_minimum(curve: _LazyCurve, delta: float, curve_map: CurveMap) -> tuple[np.ndarray, int]:
    """epsilon(alpha) of ``curve_map``'s image of ``curve`` at each order and the first order attaining the minimum,
    with the full grid's minimum, order and value there, bit for bit, and as few fractional orders evaluated as that
    allows.

    Every step below rounds monotonically, so the image of the lower bounds converts to an epsilon curve below the
    full grid's everywhere. Once the values that fix the image at its minimiser (its support) are all evaluated, that
    curve's minimum is exact and its first minimiser is the full grid's. Until then, the support is evaluated, with
    every order whose lower epsilon does not exceed the least upper one (where the minimum may lie)."""
    orders = curve.orders
    while True:
        lower, upper = curve.bounds()
        eps = epsilon_of_rdp(curve_map(lower, orders), orders, delta)
        best = int(np.nanargmin(eps))
        support = curve.missing(curve_map.support(lower, orders, best))
        if not support:
            return eps, best
        ceiling = np.nanmin(epsilon_of_rdp(curve_map(upper, orders), orders, delta))
        curve.evaluate(support + curve.missing(np.flatnonzero(eps <= ceiling)))


@dataclass(frozen=True)
class RDPOptimum:
    """The RDP accountant's answer: epsilon, the order that attains it, and whether that order is interior.

    ``edge`` is ``None`` when the optimum has orders on both sides; ``"smallest"`` or ``"largest"`` when even the
    extended grid's end (1.01 or :data:`MAX_ORDER`) is the best, where the bound is valid but not tight.
    """

    epsilon: float
    order: float
    edge: str | None


def rdp_optimum(history: Sequence[Segment], delta: float, curve_map: CurveMap | None = None,
                orders: tuple[float, ...] = OPACUS_ORDERS) -> RDPOptimum:
    r"""The RDP epsilon of a validated history at ``delta`` (of ``curve_map``'s image of its RDP curve, if given),
    over an order grid grown until its optimum is interior.

    The grid starts as ``orders``; while the best is the last order, the next chunk of :data:`HIGH_ORDER_CHUNKS` is
    added; if it is the first (1.1), :data:`LOW_ORDERS` are. A fractional order is evaluated only where it can
    matter (:class:`_LazyCurve`): the answer is the full grid's, bit for bit, so that where Opacus's grid holds the
    optimum this is exactly Opacus's ``RDPAccountant.get_epsilon``.

    >>> q, T = 256 / 60000, 2340                        # MNIST, 10 epochs; LT's per-run delta_1 ~ 1e-17
    >>> opt = rdp_optimum([(3.0, q, T)], 1e-17)
    >>> int(opt.order) > 63, opt.edge
    (True, None)
    >>> rdp_optimum([(1.5, 0.04, 2250)], 1e-5)          # inside Opacus's grid: Opacus's answer
    RDPOptimum(epsilon=7.3291111714386545, order=3.9, edge=None)
    """
    curve_map = curve_map or _Identity()
    known: dict[float, float] = {}
    chunks = iter(HIGH_ORDER_CHUNKS)
    while True:
        eps, best = _pruned_minimum(_LazyCurve(list(history), orders, known), delta, curve_map)
        if best == len(orders) - 1 and orders[-1] < MAX_ORDER:
            orders = orders + next(chunks)
        elif best == 0 and orders[0] > LOW_ORDERS[0]:
            orders = LOW_ORDERS + orders
        else:
            break
    edge = "smallest" if best == 0 else "largest" if best == len(orders) - 1 else None
    # with orders above 1/delta the conversion can dip below 0: (0, delta)-DP is what it then certifies
    return RDPOptimum(max(0.0, float(eps[best])), float(orders[best]), edge)


def check_interior(opt: RDPOptimum, subject: str, fix_largest: str) -> float:
    """``opt.epsilon``, refused where the optimal order is at the end of the grown grid (privacy hygiene rule 9):
    at the largest order the bound is valid but RDP cannot say how loose (``fix_largest`` says what to do); at the
    smallest it is no meaningful guarantee."""
    if opt.edge == "largest":
        raise ValueError(
            f"the RDP bound is optimal at the largest order evaluated (alpha = {MAX_ORDER}) for {subject}: epsilon is "
            f"below {opt.epsilon:.3g} but RDP cannot certify how far below. {fix_largest}")
    if opt.edge == "smallest":
        raise ValueError(
            f"the RDP bound is optimal at the smallest order evaluated (alpha = {LOW_ORDERS[0]}) for {subject}: its "
            f"value {opt.epsilon:.3g} is no meaningful guarantee (this much privacy loss means the release is "
            f"essentially not private). Use more noise.")
    return opt.epsilon


def released(history: list[Segment]) -> tuple[list[Segment], float | None]:
    """The segments of a validated history that release something, and the epsilon of the history where it needs no
    accountant: 0.0 if no segment releases (zero steps, or sigma = inf), inf if one releases without noise."""
    history = [(s, q, t) for s, q, t in history if t > 0 and s != math.inf]
    if not history:
        return history, 0.0
    return history, math.inf if any(s == 0 for s, _, _ in history) else None


# --------------------------------------------------------------------------------------------------------------
# Epsilon
# --------------------------------------------------------------------------------------------------------------

class _PRV(PRVAccountant):
    """Opacus's PRV accountant, its truncation domain sized with :func:`rdp_optimum`'s grown grid.

    Opacus sizes the domain (Gopi, Lee & Wutschitz 2021, Remark 5.6: L = max(L_max, eps_error) + 3, L_max the
    RDP epsilon of the whole history at delta_error/4 and of each single step at delta_error/(8 n)) with its own
    orders, which at small delta or large noise end at the optimum: the domain is then larger than needed and
    Opacus warns. The same rule, with orders that contain the optimum.
    """

    def _get_domain(self, prvs, num_self_compositions, eps_error, delta_error):
        n = sum(num_self_compositions)
        segments = [(p.noise_multiplier, p.sample_rate, k) for p, k in zip(prvs, num_self_compositions)]
        # an optimum at the grid's end still bounds epsilon from above: the domain is then merely larger
        L_max = max([rdp_optimum(segments, delta_error / 4).epsilon]
                    + [rdp_optimum([(s, q, 1)], delta_error / (8 * n)).epsilon for s, q, _ in segments])
        mesh_size = eps_error / np.sqrt(n * np.log(12 / delta_error) / 2)
        return Domain.create_aligned(-(max(L_max, eps_error) + 3), max(L_max, eps_error) + 3, mesh_size)


def _epsilon_checked(history: list[Segment], delta: float, accountant: str) -> float:
    """Epsilon of an already validated history (no warning filtered: the RDP grid contains the optimum)."""
    history, trivial = released(history)
    if trivial is not None:
        return trivial
    if accountant == "prv":
        acc = _PRV()
        acc.history = list(history)
        with np.errstate(divide="ignore"):  # log(1 - q) = -inf at q = 1 is expected and harmless
            eps = acc.get_epsilon(delta=delta)
    else:
        eps = check_interior(rdp_optimum(history, delta), f"history={history}, delta={delta!r}",
                             "Use accountant='prv', or less noise.")
    eps = float(eps)
    if math.isnan(eps):
        raise RuntimeError(f"the {accountant} accountant returned NaN for history={history}, delta={delta}")
    return eps


def epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
            accountant: str = "rdp") -> float:
    r""":math:`\varepsilon` after ``steps`` Poisson-subsampled Gaussian releases, each :math:`(\sigma, q)`, at the given
    :math:`\delta`.

    Args:
        noise_multiplier: :math:`\sigma`, noise standard deviation over the L2 sensitivity; >= 0 (0 gives
            ``math.inf``).
        sample_rate: :math:`q = B/N`, the Poisson sampling probability, in (0, 1].
        steps: :math:`T`, the number of releases; an integer >= 0 (0 gives 0.0).
        delta: :math:`\delta`, in (0, 1).
        accountant: ``"rdp"`` (Renyi DP, orders grown until the optimum is interior) or ``"prv"`` (numerical,
            tighter).

    The RDP orders grow past Opacus's 63 until the best one is interior (:func:`rdp_optimum`); an optimum at the
    grown grid's end (:math:`\alpha = 65{,}536` or 1.01) raises a ValueError instead of returning a loose bound.

    >>> round(epsilon(noise_multiplier=1.5, sample_rate=0.04, steps=2250, delta=1e-5), 4)
    7.3291
    >>> round(epsilon(1.5, 0.04, 2250, 1e-5, accountant="prv"), 2)
    6.78
    >>> epsilon(0.0, 0.04, 1, 1e-5), epsilon(1.5, 0.04, 0, 1e-5)
    (inf, 0.0)
    """
    segment = (_check_noise_multiplier(noise_multiplier), _check_sample_rate(sample_rate),
               checks.integer("steps", steps, minimum=0))
    return _epsilon_checked([segment], _check_delta(delta), check_accountant(accountant))


def epsilon_of_history(history: Iterable[Sequence], delta: float, accountant: str = "rdp") -> float:
    r"""Epsilon of a heterogeneous composition: ``history`` is a sequence of ``(sigma, q, steps)`` segments.

    Under RDP the segments' Renyi divergences add order by order before the conversion to
    :math:`(\varepsilon, \delta)`; under PRV their privacy loss distributions are convolved. Either way the segments
    are composed jointly, which is tighter than adding their epsilons. An empty history costs 0.0; any segment with
    :math:`\sigma = 0` and steps > 0 makes the whole run ``math.inf``.

    Example: DPDR (Table 2, MNIST at :math:`\varepsilon = 3`) runs 1 DP-SGD step at :math:`\sigma_g`,
    :math:`s - 1 = 49` decomposition steps whose two releases on the same batch compose to
    :math:`\sigma_{\mathrm{eff}}(\sigma_\perp, \sigma_\alpha)`, then DP-SGD again. :math:`\sigma_g` alone meets
    :math:`\varepsilon = 3`; the 49 steps at :math:`\sigma_{\mathrm{eff}}(0.81, 2.0) = 0.75` push the run slightly
    past it.

    >>> q, T = 256 / 60000, 4700
    >>> round(epsilon(0.803, q, T, delta=1e-5), 2)
    3.0
    >>> history = [(0.803, q, 1), (sigma_eff(0.81, 2.0), q, 49), (0.803, q, T - 50)]
    >>> round(epsilon_of_history(history, delta=1e-5), 2)
    3.02
    >>> epsilon_of_history([], delta=1e-5)
    0.0
    """
    delta = _check_delta(delta)
    accountant = check_accountant(accountant)
    checked = [check_segment(seg, i) for i, seg in enumerate(history)]
    return _epsilon_checked(checked, delta, accountant)


def first_steps(history: Iterable[Sequence], steps: int) -> list[tuple[float, float, int]]:
    """The first ``steps`` steps of ``history`` (``(sigma, q, steps)`` segments): what was spent by then.

    >>> first_steps([(1.0, 0.01, 1), (2.4, 0.01, 2), (1.0, 0.01, 7)], 4)
    [(1.0, 0.01, 1), (2.4, 0.01, 2), (1.0, 0.01, 1)]
    """
    left, out = checks.integer("steps", steps, minimum=0), []
    for sigma, q, n in history:
        if left == 0:
            break
        out.append((sigma, q, min(n, left)))
        left -= out[-1][2]
    return out


# --------------------------------------------------------------------------------------------------------------
# Noise calibration
# --------------------------------------------------------------------------------------------------------------

def calibrate(epsilon_at: Callable[[float], float], target_epsilon: float, *, epsilon_tolerance: float = 0.01,
              sigma_tolerance: float = 1e-2, name: str = "noise_multiplier", setting: str = "",
              fix: str = "") -> float:
    r"""The one noise calibration of the library: the smallest x with ``epsilon_at(x) <= target_epsilon``.

    ``epsilon_at(x)`` is the epsilon of a whole run's (composed) history in which some noise multipliers are x or scale
    with it: plain DP-SGD's ``(x, q, T)`` (:func:`noise_multiplier`), DPDR's DP-SGD steps at :math:`\sigma_g` beside its
    GDR steps (:func:`dpbook.methods.dpdr.calibrate_sigma_g`), DIFF2's difference steps at x and its restarts at a
    multiple of it. It must decrease as x grows.

    The search is Opacus's ``get_noise_multiplier`` bisection, so that plain DP-SGD matches Opacus digit for digit: the
    bracket ``(0, 20]`` (0 is "no noise", :math:`\varepsilon = \infty`) whose upper end doubles while it spends too
    much, then halved intervals keeping the upper end. Opacus stops as soon as
    ``target_epsilon - epsilon_tolerance <= epsilon_at(x)``; where :math:`\varepsilon` is steep in :math:`x` that
    already pins :math:`x`. Where it is flat (small :math:`\delta`, as in a tuning protocol's per-run budget) Opacus's
    rule stops at a coarse bracket point (3.4375, 5.0, 7.5, ...); the search here goes on until the bracket is also
    ``sigma_tolerance`` narrow (relative). The result x satisfies
    ``target_epsilon - epsilon_tolerance <= epsilon_at(x) <= target_epsilon``.

    >>> q, T = 0.01, 1000
    >>> x = calibrate(lambda x: epsilon_of_history([(x, q, 10), (2 * x, q, T - 10)], 1e-5), 2.0,
    ...               epsilon_tolerance=1e-4)
    >>> round(epsilon_of_history([(x, q, 10), (2 * x, q, T - 10)], 1e-5), 3)
    2.0

    Raises:
        ValueError: when even x = ``MAX_NOISE_MULTIPLIER`` spends more than the target; the message names x
            (``name``), the ``setting`` and what to change (``fix``).
    """
    target = checks.positive("target_epsilon", target_epsilon)
    tol = checks.positive("epsilon_tolerance", epsilon_tolerance)
    sigma_tol = checks.positive("sigma_tolerance", sigma_tolerance)
    lo, hi = 0.0, 20.0
    eps_hi = epsilon_at(hi)
    while eps_hi > target:
        if hi >= MAX_NOISE_MULTIPLIER:
            raise ValueError(f"target_epsilon={target!r} is unreachable{setting and ' ' + setting}: even "
                             f"{name}={MAX_NOISE_MULTIPLIER:g} gives epsilon={eps_hi:.4g}. {fix}".rstrip())
        hi = min(2 * hi, MAX_NOISE_MULTIPLIER)
        eps_hi = epsilon_at(hi)
    for _ in range(200):  # 200 halvings exhaust float precision; a cap guards against a discontinuous epsilon
        if target - eps_hi <= tol and hi - lo <= sigma_tol * hi:
            break
        mid = (lo + hi) / 2
        eps_mid = epsilon_at(mid)
        if eps_mid < target:
            hi, eps_hi = mid, eps_mid
        else:
            lo = mid
    return hi


def noise_multiplier(target_epsilon: float, target_delta: float, sample_rate: float, steps: int,
                     accountant: str = "rdp", epsilon_tolerance: float = 0.01,
                     sigma_tolerance: float = 1e-2) -> float:
    r"""The smallest :math:`\sigma` whose ``steps`` releases at rate :math:`q` stay within ``target_epsilon``, to both
    tolerances.

    :func:`calibrate` on ``epsilon(sigma, q, steps, target_delta)``: the result is Opacus's
    ``make_private_with_epsilon`` :math:`\sigma` digit for digit where :math:`\varepsilon` is steep in :math:`\sigma`,
    and within ``sigma_tolerance`` of the smallest :math:`\sigma` that fits where it is flat. The probes use
    :func:`rdp_optimum`'s grown order grid, and the answer is refused unless its optimal order is interior.

    Args:
        target_epsilon: finite, > 0.
        target_delta: in (0, 1).
        sample_rate: :math:`q`, in (0, 1].
        steps: :math:`T`, an integer >= 1.
        accountant: ``"rdp"`` or ``"prv"``.
        epsilon_tolerance: how far below the target the returned :math:`\sigma`'s :math:`\varepsilon` may be;
            finite, > 0.
        sigma_tolerance: the bracket's final relative width; finite, > 0.

    Raises:
        ValueError: on bad input, or when even ``sigma = MAX_NOISE_MULTIPLIER`` exceeds the target.

    DPDR's Table 2 gives :math:`\sigma_g = 0.803` for MNIST (:math:`B = 256`, :math:`N = 60000`, 20 epochs) at
    :math:`\varepsilon = 3`:

    >>> round(noise_multiplier(target_epsilon=3, target_delta=1e-5, sample_rate=256 / 60000, steps=4700), 3)
    0.803
    """
    target_epsilon = checks.positive("target_epsilon", target_epsilon)
    target_delta = _check_delta(target_delta, "target_delta")
    sample_rate = _check_sample_rate(sample_rate)
    steps = checks.integer("steps", steps, minimum=1)
    accountant = check_accountant(accountant)

    def eps(sigma: float) -> float:
        """A valid upper bound on epsilon at every probe (an optimum at the grid's end is refused only at the
        answer, below)."""
        if accountant == "rdp":
            return rdp_optimum([(sigma, sample_rate, steps)], target_delta).epsilon
        return _epsilon_checked([(sigma, sample_rate, steps)], target_delta, accountant)

    sigma = calibrate(eps, target_epsilon, epsilon_tolerance=epsilon_tolerance, sigma_tolerance=sigma_tolerance,
                      setting=f"for sample_rate={sample_rate!r}, steps={steps}, target_delta={target_delta!r} with "
                              f"the {accountant!r} accountant",
                      fix="Use a larger target_epsilon, fewer steps or a smaller sample_rate.")
    try:
        _epsilon_checked([(sigma, sample_rate, steps)], target_delta, accountant)  # an optimum at the grid's end
    except ValueError as err:
        raise ValueError(f"target_epsilon={target_epsilon!r} asks for so little noise (sigma = {sigma:.3g} for "
                         f"sample_rate={sample_rate!r}, steps={steps}) that the {accountant!r} accountant's bound is "
                         f"no meaningful guarantee there ({str(err).split(': ', 1)[0]}): use a smaller "
                         "target_epsilon") from None
    return sigma


# --------------------------------------------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------------------------------------------

class PrivacyLedger:
    r"""The record of what a training run released: a list of ``(sigma, q, steps)`` segments.

    :meth:`record` is called once per private step (after the release); consecutive steps with the same
    ``(sigma, q)`` are merged into one segment, as Opacus accountants do, so ``history`` stays short and can be
    handed to :func:`epsilon_of_history` or assigned to an Opacus accountant's ``history``. A step with
    noise multiplier 0 (no noise) is recorded like any other and makes :meth:`epsilon` ``math.inf``.
    :meth:`state_dict` holds only python lists, floats and ints, so it loads with
    ``torch.load(..., weights_only=True)``.

    >>> ledger = PrivacyLedger()
    >>> for _ in range(3):
    ...     ledger.record(noise_multiplier=1.1, sample_rate=0.01)
    >>> ledger.record(2.0, 0.01, steps=5)
    >>> ledger.history, ledger.steps
    ([(1.1, 0.01, 3), (2.0, 0.01, 5)], 8)
    >>> ledger.epsilon(delta=1e-5) == epsilon_of_history(ledger.history, delta=1e-5)
    True
    >>> PrivacyLedger.from_state_dict(ledger.state_dict()).history == ledger.history
    True
    """

    def __init__(self, history: Iterable[Sequence] = ()):
        self.history: list[Segment] = []
        for seg in history:
            self.record(*seg)

    def record(self, noise_multiplier: float, sample_rate: float, steps: int = 1) -> None:
        """Append ``steps`` releases at ``(noise_multiplier, sample_rate)``, merged with the last segment if equal.

        Arguments are validated here, so a bad value fails at the step that produced it. ``steps=0`` records
        nothing.
        """
        sigma = _check_noise_multiplier(noise_multiplier)
        q = _check_sample_rate(sample_rate)
        steps = checks.integer("steps", steps, minimum=0)
        if steps == 0:
            return
        if self.history and self.history[-1][:2] == (sigma, q):
            self.history[-1] = (sigma, q, self.history[-1][2] + steps)
        else:
            self.history.append((sigma, q, steps))

    @property
    def steps(self) -> int:
        """Total number of recorded steps, :math:`T`."""
        return sum(t for _, _, t in self.history)

    def epsilon(self, delta: float, accountant: str = "rdp") -> float:
        """Epsilon spent so far at ``delta`` (``math.inf`` if any recorded step had noise multiplier 0)."""
        return epsilon_of_history(self.history, delta, accountant=accountant)

    def state_dict(self) -> dict:
        """``{"history": [[sigma, q, steps], ...]}`` with python floats and ints only."""
        return {"history": [[float(s), float(q), int(t)] for s, q, t in self.history]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Replace the history by the one in ``state_dict`` (as written by :meth:`state_dict`), validated."""
        if not isinstance(state_dict, dict) or "history" not in state_dict:
            raise ValueError(f"state_dict must be a dict with a 'history' key, got {state_dict!r}")
        self.history = [check_segment(seg, i) for i, seg in enumerate(state_dict["history"])]

    @classmethod
    def from_state_dict(cls, state_dict: dict) -> "PrivacyLedger":
        """A new ledger holding the history in ``state_dict``."""
        ledger = cls()
        ledger.load_state_dict(state_dict)
        return ledger

    def __repr__(self) -> str:
        return f"PrivacyLedger(history={self.history!r})"


# --------------------------------------------------------------------------------------------------------------
# Noise splits: several Gaussian releases on the same batch are one Gaussian mechanism.
# --------------------------------------------------------------------------------------------------------------
# Releasing f_1(B) + N(0, sigma_1^2 S_1^2) and f_2(B) + N(0, sigma_2^2 S_2^2) on the same Poisson batch B is one
# Gaussian mechanism on the rescaled, concatenated vector (f_1/(sigma_1 S_1), f_2/(sigma_2 S_2)) with unit
# noise and L2 sensitivity (sigma_1^-2 + sigma_2^-2)^(1/2); its noise multiplier is sigma_eff below. The splits
# solve sigma_eff(sigma_main, sigma_side) = sigma for sigma_main, so that the run costs what DP-SGD at sigma costs.

def sigma_T(sigma: float, sigma_H: float) -> float:
    r"""DC-SGD's gradient noise multiplier: :math:`\sigma_T = (\sigma^{-2} - \sigma_H^{-2})^{-1/2}` (DC-SGD, Eq. (5)).

    The gradient (multiplier :math:`\sigma_T`) and the noisy histogram of gradient norms (multiplier
    :math:`\sigma_H`, sensitivity 1) are released on the same batch; together they cost exactly DP-SGD at
    :math:`\sigma`. Requires :math:`\sigma_H > \sigma > 0` (:math:`\sigma_H = \infty`, no histogram, gives
    :math:`\sigma`).

    >>> round(sigma_T(4.0, 5.0), 6)  # (1/16 - 1/25)^(-1/2) = 20/3
    6.666667
    >>> round(sigma_T(1.0, 5.0), 4)
    1.0206
    """
    sigma = checks.positive("sigma", sigma)
    sigma_H = checks.real("sigma_H", sigma_H)
    if not sigma_H > sigma:
        raise ValueError(f"sigma_H must exceed sigma (DC-SGD Eq. (5)), got sigma_H={sigma_H!r}, sigma={sigma!r}")
    return (sigma ** -2 - sigma_H ** -2) ** -0.5


def sigma_delta(sigma: float, sigma_b: float) -> float:
    r"""Andrew et al.'s gradient noise multiplier: :math:`\sigma_\Delta = (\sigma^{-2} - (2\sigma_b)^{-2})^{-1/2}`.

    Andrew, Thakkar, McMahan & Ramaswamy, "Differentially private learning with adaptive clipping" (NeurIPS
    2021), Sec. 3: the clipped-count estimate for the quantile update has sensitivity 1/2 and noise std
    :math:`\sigma_b`, i.e. noise multiplier :math:`2\sigma_b`; the gradient gets :math:`\sigma_\Delta` so the pair
    costs DP-SGD at :math:`\sigma`. Requires :math:`2\sigma_b > \sigma > 0`.

    >>> round(sigma_delta(3.0, 2.5), 12)  # (1/9 - 1/25)^(-1/2) = 15/4
    3.75
    >>> round(sigma_delta(1.0, 256 / 20), 5)  # sigma_b = B/20, the DC-SGD paper's setting
    1.00076
    """
    sigma = checks.positive("sigma", sigma)
    sigma_b = checks.real("sigma_b", sigma_b)
    if not 2 * sigma_b > sigma:
        raise ValueError(
            f"sigma_b: 2 * sigma_b must exceed sigma (Andrew et al.), got sigma_b={sigma_b!r}, sigma={sigma!r}")
    return (sigma ** -2 - (2 * sigma_b) ** -2) ** -0.5


def sigma_eff(*sigmas: float) -> float:
    r"""Noise multiplier of several Gaussian releases on the same batch:
    :math:`\sigma_{\mathrm{eff}} = \big(\sum_i\sigma_i^{-2}\big)^{-1/2}`.

    Privacy hygiene rule 4 (reading DPDR-13): the two decomposition releases :math:`(\sigma_\perp, \sigma_\alpha)`
    share one Poisson batch, so they are one subsampled Gaussian mechanism at :math:`\sigma_{\mathrm{eff}}`, not two
    independent ones. It inverts the splits: ``sigma_eff(sigma_T(s, h), h) == s`` and
    ``sigma_eff(sigma_delta(s, b), 2 * b) == s``. A :math:`\sigma_i` of 0 gives 0 (no privacy); ``math.inf``
    (nothing released) contributes nothing; a single release gives its own multiplier exactly.

    >>> sigma_eff(3.0, 4.0)  # (1/9 + 1/16)^(-1/2) = 12/5
    2.4
    >>> round(sigma_eff(sigma_T(1.0, 5.0), 5.0), 12)
    1.0
    """
    if not sigmas:
        raise ValueError("sigma_eff needs at least one noise multiplier, got none")
    values = [_check_noise_multiplier(s, f"sigmas[{i}]") for i, s in enumerate(sigmas)]
    if any(v == 0 for v in values):
        return 0.0
    released = [v for v in values if v != math.inf]
    if len(released) == 1:
        return released[0]  # one release is its own multiplier, to the bit
    precision = math.fsum(v ** -2 for v in values)
    return math.inf if precision == 0 else precision ** -0.5
