r"""The privacy cost of hyperparameter tuning: per-run noise when a whole search is charged to one
:math:`(\varepsilon, \delta)`.

A grid search trains :math:`G` candidate models on the private data and releases the best one. The selection looks
at every candidate, so the released model is only as private as the *whole search*. DC-SGD (Wei et al., arXiv
2503.22988, Sec. II-C and VI-B, Tables II and III) charges the search to the budget in two ways, and compares with
tuning for free (Tables IV and V). This module implements all three as *protocols*:

``"none"``
    One run, no tuning cost: every run gets the whole :math:`(\varepsilon, \delta)`. This is the protocol of Tables
    IV and V. For :math:`G > 1` the selection of the best run is *not* covered by the guarantee.
``"rdp"``
    Sequential composition (Sec. VI-B): "the grid search involves repeatedly training G models, the privacy cost
    for a single training can be obtained through G-composition". Every run has the same :math:`(\sigma, q, T)`, so
    the Renyi divergences of the :math:`G` runs add up order by order. The :math:`G` runs are one history of
    :math:`GT` subsampled Gaussian steps, and :math:`\sigma` is calibrated so that
    :math:`\varepsilon(\sigma, q, GT, \delta) \le \varepsilon`. Picking the best run is post-processing of the
    :math:`G` outputs. This is the protocol of Table III.
``"lt"``
    Liu & Talwar's random stopping (Theorem 1 of the paper, quoted below), as the paper applies it following
    Mohapatra et al.: :math:`\delta_2 = 10^{-20}` and :math:`\gamma = 1/(2G)`. Theorem 1 is inverted to get the
    per-run budget :math:`(\varepsilon_1, \delta_1)` of :func:`per_run_budget`, and :math:`\sigma` is calibrated for
    one run at :math:`(\varepsilon_1, \delta_1)`. This is the protocol of Table II.
``"ps"``
    Papernot & Steinke's random search (ICLR 2022, :mod:`dpbook.repeat_select`), which postdates the paper: the number
    :math:`K` of runs is random with mean :math:`G` (logarithmic by default; Poisson or geometric on request), each run
    trains a grid point drawn uniformly with replacement, and the best is released. The search's Renyi DP is a
    single run's plus terms that grow like :math:`\log G` (Theorems 2 and 6 of that paper); :math:`\sigma` is
    calibrated so that it converts to at most :math:`(\varepsilon, \delta)`.

A grid with one point (DC-SGD-E: nothing to tune, :math:`G = 1`) involves no selection. Every protocol then charges
it as a single run with the whole budget, as the paper does: "DC-SGD-E ... will only train the model once with the
total privacy cost. Therefore, it has the same performance in both situations" (Sec. VI-B).

**Theorem 1 as the paper states it** (Sec. II-C, "Privacy Analysis of LT [25]"):

    We consider any :math:`\gamma \in [0, 1]` and :math:`\delta_2 > 0`, and define :math:`T` as
    :math:`(1/\gamma)\ln(1/\delta_2)`. Assuming that each iteration of DP-SGD is
    :math:`(\varepsilon_1, \delta_1)`-differentially private, the LT algorithm then achieves
    :math:`(\varepsilon', \delta')`-differential privacy. :math:`\varepsilon'` is defined as
    :math:`3\varepsilon_1 + 3\sqrt{2\delta_1}`, and :math:`\delta'` is calculated as
    :math:`3\sqrt{2\delta_1}\,T + \delta_2`.

**How this module reads it:**

1. *[DCSGD-28]* "each iteration of DP-SGD" means one full training run, i.e. one candidate. ":math:`T`" is the cap
   on the number of *runs*. It is written :math:`T_{LT}` here (:func:`lt_max_runs`) and is unrelated to the
   :math:`T` SGD steps of a run. LT is the algorithm that repeats: draw a candidate, train it, and stop with
   probability :math:`\gamma` after each run; it makes at most :math:`T_{LT}` runs and releases the best run seen.
2. Sec. VI-B sets :math:`\delta_2 = 10^{-20}` and ":math:`\gamma = 1/2G`", read as :math:`\gamma = 1/(2G)`, which
   gives the paper's "expected running time of LT is 2G". The cap is then :math:`T_{LT} = 2G\ln(10^{20})`, about
   :math:`92.1\,G` runs. :math:`T_{LT}` is the real number of the theorem, not rounded; the runner of
   :func:`grid_search` stops after :math:`\lfloor T_{LT}\rfloor` runs.
3. Inversion: set :math:`\delta' = \delta` and :math:`\varepsilon' = \varepsilon`. This gives

   .. math::

       \sqrt{2\delta_1} = \frac{\delta - \delta_2}{3T_{LT}}, \qquad
       \varepsilon_1 = \frac{\varepsilon}{3} - \sqrt{2\delta_1}.

   (:math:`\sqrt{2\delta_1}` is rounded down by :math:`10^{-12}`, relative, so that floating-point rounding never
   takes the recomputed :math:`\delta'` above :math:`\delta`.)
   That is the largest per-run budget the theorem allows (``per_run_budget``).
   For CIFAR10 at :math:`G = 10`, :math:`\delta_1` is about :math:`2.6\cdot10^{-17}` and :math:`\varepsilon_1` is
   about :math:`\varepsilon/3`.
4. The factor 3 in :math:`\delta' = 3\sqrt{2\delta_1}\,T + \delta_2` is the paper's. Liu & Talwar's own statement
   may read :math:`\sqrt{2\delta_1}\,T + \delta_2` (no 3); this could not be checked offline. The paper's version
   asks for a smaller :math:`\delta_1`, so it is the conservative one; it is also the statement the paper applies.
5. Theorem 1 covers *random stopping*, not a single pass over the grid. Releasing the best of one pass over
   :math:`G` fixed candidates, each at :math:`(\varepsilon_1, \delta_1)`, is not covered by it: composition only
   gives about :math:`G\varepsilon_1`. :func:`grid_search` therefore runs the LT algorithm itself under ``"lt"``: a
   uniformly random grid point per iteration, a coin with probability :math:`\gamma` after each run, and at most
   :math:`\lfloor T_{LT}\rfloor` runs. The number of runs is random, :math:`2G` on average. The paper's time
   accounting (Table I: "single training x number of combinations") suggests it trained each combination once.
   That reading is not sound under Theorem 1, so it is not offered.

LT's per-run :math:`\delta_1` is tiny (about :math:`10^{-17}` for :math:`G = 10` at :math:`\delta = 10^{-5}`), and
at such a :math:`\delta` the best RDP order is large (about 80 for MNIST at :math:`\varepsilon = 2` and
:math:`G = 10`, about 200 at :math:`\varepsilon = 1`): Opacus's orders (:math:`\alpha \le 63`) do not reach it, and
an accountant limited to them overstates the noise LT needs by 20-90 % at :math:`\varepsilon \le 2` and declares
:math:`\varepsilon = 1` unreachable. :func:`dpbook.accounting.rdp_optimum` grows the order grid until the optimum is
interior: LT at :math:`\varepsilon = 1` is reachable (MNIST, :math:`G = 10`: :math:`\sigma` about 5.1 per run). PRV
cannot work at such a small :math:`\delta`; its error says so.

>>> round(calibrate_sigma(4.0, 1e-5, sample_rate=0.01, steps=1000), 3)          # one run
0.778
>>> round(calibrate_sigma(4.0, 1e-5, 0.01, 1000, G=10, protocol="rdp"), 3)     # 10 runs composed
1.36
>>> round(calibrate_sigma(4.0, 1e-5, 0.01, 1000, G=10, protocol="lt"), 3)      # LT, gamma = 1/20
2.266
>>> round(calibrate_sigma(4.0, 1e-5, 0.01, 1000, G=10, protocol="ps"), 3)      # Papernot-Steinke, E[K] = 10
0.942
"""

from __future__ import annotations

__all__ = [
    "PROTOCOLS", "LT_DELTA2", "lt_gamma", "lt_max_runs", "lt_expected_runs", "lt_theorem", "per_run_budget",
    "calibrate_sigma", "TuningPlan", "tuning_plan", "search_schedule", "Run", "GridSearchResult", "grid_search",
    "grid_product", "RUN_COUNTS", "run_count",
]

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dpbook import accounting, checks
from dpbook.repeat_select import RunCount, search_epsilon

#: The protocols of this module and what each charges.
PROTOCOLS = {
    "none": "one run at the whole budget; tuning is free (Tables IV and V)",
    "rdp": "G runs composed under RDP as one history of G*T steps (Sec. VI-B, Table III)",
    "lt": "Liu-Talwar random stopping, Theorem 1 with delta_2 = 1e-20 and gamma = 1/(2G) (Sec. VI-B, Table II)",
    "ps": "Papernot-Steinke random search: the best of K runs, K random with mean G (logarithmic), under RDP",
}

#: The distributions of the number of runs under ``"ps"``, each given its mean :math:`G`
#: (:class:`dpbook.repeat_select.RunCount`); the first is the default.
RUN_COUNTS = {"logarithmic": RunCount.logarithmic, "poisson": RunCount.poisson, "geometric": RunCount.geometric}

#: The paper's :math:`\delta_2` for Theorem 1 (Sec. VI-B, following Mohapatra et al. [50]).
LT_DELTA2 = 1e-20


def grid_product(**axes) -> list[dict]:
    """Every combination of the axes' values, one dict per grid point, the first axis varying slowest: the one
    grid builder of the library, the benchmarks, the chapters and the notebook sweeps.

    >>> grid_product(C=(0.1, 1.0), s=(5,))
    [{'C': 0.1, 's': 5}, {'C': 1.0, 's': 5}]
    """
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


# --------------------------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------------------------

def _check_protocol(protocol) -> str:
    checks.one_of("protocol", protocol, PROTOCOLS)
    return protocol


def _check_G(G) -> int:
    return checks.integer("G (the number of hyperparameter combinations)", G)


def _check_budget(epsilon, delta) -> tuple[float, float]:
    return (checks.positive("epsilon", epsilon, "the total budget of the whole search"),
            checks.open_unit("delta", delta, "the total delta of the whole search, e.g. 1/N"))


def _check_delta2(delta2) -> float:
    return checks.open_unit("delta2", delta2, "Theorem 1's delta_2; the paper uses 1e-20")


def run_count(G: int, distribution: str = "logarithmic") -> RunCount:
    """The distribution of the number of runs of a ``"ps"`` search over ``G`` grid points: mean ``G``.

    >>> run_count(10)
    RunCount(mean=10.0, shape=0.0)
    """
    checks.one_of("distribution", distribution, RUN_COUNTS)
    return RUN_COUNTS[distribution](_check_G(G))


def _ps_epsilon(history, delta: float, count: RunCount) -> float:
    """What ``"ps"`` charges a search whose runs each have ``history``; refused where the optimal order is at the end
    of the grown grid (privacy hygiene rule 9)."""
    return accounting.check_interior(search_epsilon(history, delta, count),
                                     f"the Papernot-Steinke bound of history={history}, delta={delta!r}, {count}",
                                     "Use less noise.")


# --------------------------------------------------------------------------------------------------------------
# Theorem 1 (Liu & Talwar) as the paper states it
# --------------------------------------------------------------------------------------------------------------

def lt_gamma(G: int) -> float:
    r"""The paper's stopping probability :math:`\gamma = 1/(2G)` for a grid of :math:`G` combinations (Sec. VI-B).

    >>> lt_gamma(10)
    0.05
    """
    return 1 / (2 * _check_G(G))


def lt_max_runs(gamma: float, delta2: float = LT_DELTA2) -> float:
    r"""Theorem 1's cap on the number of runs, :math:`T_{LT} = (1/\gamma)\ln(1/\delta_2)` [DCSGD-28]. It is a real
    number.

    >>> round(lt_max_runs(lt_gamma(10)), 2)  # 20 ln(1e20)
    921.03
    """
    gamma = checks.real("gamma", gamma)
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must be in (0, 1] (the stopping probability; 0 never stops), got {gamma!r}")
    return math.log(1 / _check_delta2(delta2)) / gamma


def lt_expected_runs(gamma: float, delta2: float = LT_DELTA2) -> float:
    r"""Expected number of runs of LT random stopping: :math:`(1 - (1-\gamma)^K)/\gamma`, with
    :math:`K = \lfloor T_{LT}\rfloor`.

    Each run is followed by a stop with probability :math:`\gamma`, and there are at most :math:`K` runs. This is
    just below :math:`1/\gamma = 2G`.

    >>> round(lt_expected_runs(lt_gamma(10)), 6)
    20.0
    """
    runs_cap = math.floor(lt_max_runs(gamma, delta2))
    return (1 - (1 - gamma) ** runs_cap) / gamma


def lt_theorem(epsilon1: float, delta1: float, gamma: float, delta2: float = LT_DELTA2) -> tuple[float, float]:
    r"""Theorem 1 forwards: the :math:`(\varepsilon', \delta')` of LT when each run is
    :math:`(\varepsilon_1, \delta_1)`-DP.

    :math:`\varepsilon' = 3\varepsilon_1 + 3\sqrt{2\delta_1}` and
    :math:`\delta' = 3\sqrt{2\delta_1}\,T_{LT} + \delta_2`, with :math:`T_{LT} = (1/\gamma)\ln(1/\delta_2)`. This is the
    paper's statement, with its factor 3 on :math:`\delta'` (see the module docstring, reading 4).

    >>> eps, delta = lt_theorem(1.0, 5e-13, gamma=0.1, delta2=math.exp(-10))  # T_LT = 100, sqrt(2 delta_1) = 1e-6
    >>> round(eps, 9), round(delta - math.exp(-10), 12)
    (3.000003, 0.0003)
    """
    epsilon1 = checks.non_negative("epsilon1", epsilon1, "the per-run epsilon")
    delta1 = checks.non_negative("delta1", delta1, "the per-run delta")
    T_LT = lt_max_runs(gamma, delta2)
    root = math.sqrt(2 * delta1)
    return 3 * epsilon1 + 3 * root, 3 * root * T_LT + delta2


def per_run_budget(epsilon: float, delta: float, G: int, protocol: str = "lt", *,
                   delta2: float = LT_DELTA2) -> tuple[float, float]:
    r"""The :math:`(\varepsilon_1, \delta_1)` each run may spend so that the whole search is
    :math:`(\varepsilon, \delta)`-DP.

    - ``"lt"``: Theorem 1 inverted with :math:`\gamma = 1/(2G)` and :math:`\delta' = \delta` (module docstring,
      reading 3): :math:`\sqrt{2\delta_1} = (\delta - \delta_2)/(3T_{LT})` and
      :math:`\varepsilon_1 = \varepsilon/3 - \sqrt{2\delta_1}`.
    - ``"none"``, and any protocol with :math:`G = 1` (nothing is selected): the whole :math:`(\varepsilon, \delta)`.
    - ``"rdp"`` and ``"ps"`` have no per-run :math:`(\varepsilon, \delta)`. The runs' Renyi DP is composed (or
      transformed) before the conversion to :math:`(\varepsilon, \delta)`, which is tighter than splitting the
      budget. Use :func:`calibrate_sigma`.

    >>> eps1, delta1 = per_run_budget(2.0, 1 / 50000, G=10)   # CIFAR10, DP-SGD's grid
    >>> round(eps1, 6), float(f"{delta1:.2e}")
    (0.666667, 2.62e-17)
    >>> per_run_budget(2.0, 1 / 50000, G=1)                  # DC-SGD-E is trained once
    (2.0, 2e-05)

    Raises:
        ValueError: on bad input; if :math:`\delta \le \delta_2` (Theorem 1 cannot reach it); or if
            :math:`\varepsilon_1 \le 0`.
    """
    epsilon, delta = _check_budget(epsilon, delta)
    G = _check_G(G)
    protocol = _check_protocol(protocol)
    delta2 = _check_delta2(delta2)
    if protocol == "none" or G == 1:
        return epsilon, delta
    if protocol in ("rdp", "ps"):
        raise ValueError(
            f"protocol={protocol!r} charges the search through the runs' Renyi DP (composed under 'rdp', through "
            f"Papernot and Steinke's theorem under 'ps') before the conversion to (epsilon, delta), so it has no "
            f"per-run (epsilon, delta) budget; use calibrate_sigma(..., protocol={protocol!r}) for the per-run noise "
            f"multiplier")
    if not delta > delta2:
        raise ValueError(f"delta must exceed Theorem 1's delta2={delta2!r} (delta' = 3 sqrt(2 delta_1) T + delta_2), "
                         f"got delta={delta!r}")
    T_LT = lt_max_runs(1 / (2 * G), delta2)
    # sqrt(2 delta_1), rounded down by 1e-12 (relative) so that floating-point rounding can never push the
    # recomputed delta' = 3 sqrt(2 delta_1) T_LT + delta_2 above delta.
    root = (delta - delta2) / (3 * T_LT) * (1 - 1e-12)
    delta1 = root ** 2 / 2
    epsilon1 = epsilon / 3 - root
    if not epsilon1 > 0:
        raise ValueError(f"epsilon={epsilon!r} is too small for LT with G={G}: epsilon_1 = epsilon/3 - sqrt(2 delta_1) "
                         f"= {epsilon1:.3g} <= 0")
    return epsilon1, delta1


# --------------------------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------------------------

def _calibrate(epsilon, delta, sample_rate, steps, G, protocol, accountant, epsilon_tolerance, delta2, distribution):
    """sigma and the per-run (epsilon_1, delta_1) it was calibrated for (None for rdp and ps); inputs checked."""
    if protocol == "none" or G == 1:
        return accounting.noise_multiplier(epsilon, delta, sample_rate, steps, accountant, epsilon_tolerance), None
    if protocol == "ps":
        count = run_count(G, distribution)
        sigma = accounting.calibrate(
            lambda sigma: search_epsilon([(sigma, sample_rate, steps)], delta, count).epsilon, epsilon,
            epsilon_tolerance=epsilon_tolerance, name="sigma",
            setting=f"for the best of K ~ {count.name}(mean {G}) runs of {steps} steps at sample_rate={sample_rate!r}, "
                    f"delta={delta!r}", fix="Use a larger epsilon or a smaller grid.")
        _ps_epsilon([(sigma, sample_rate, steps)], delta, count)  # an optimum at the grid's end is refused
        return sigma, None
    if protocol == "rdp":
        try:
            sigma = accounting.noise_multiplier(epsilon, delta, sample_rate, G * steps, accountant, epsilon_tolerance)
        except ValueError as err:
            raise ValueError(f"the budget epsilon={epsilon!r}, delta={delta!r} cannot cover G={G} runs of {steps} "
                             f"steps composed ({G * steps} steps in all): {err} Use a larger epsilon, a smaller grid "
                             f"or protocol='lt'.") from err
        return sigma, None
    epsilon1, delta1 = per_run_budget(epsilon, delta, G, "lt", delta2=delta2)
    try:
        sigma = accounting.noise_multiplier(epsilon1, delta1, sample_rate, steps, accountant, epsilon_tolerance)
    except ValueError as err:
        raise ValueError(
            f"the LT per-run budget (epsilon_1={epsilon1:.4g}, delta_1={delta1:.3g}) that Theorem 1 leaves for a "
            f"total epsilon={epsilon!r}, delta={delta!r} with G={G} (gamma = 1/(2G), delta_2={delta2:g}) is "
            f"unreachable for one run of {steps} steps at sample_rate={sample_rate!r} with the {accountant!r} "
            f"accountant: {err} Use a larger epsilon, a smaller grid (delta_1 shrinks as 1/G^2), fewer steps, "
            f"or protocol='rdp'.") from err
    return sigma, (epsilon1, delta1)


def calibrate_sigma(epsilon: float, delta: float, sample_rate: float, steps: int, G: int = 1,
                    protocol: str = "none", *, accountant: str = "rdp", epsilon_tolerance: float = 0.01,
                    delta2: float = LT_DELTA2, distribution: str = "logarithmic") -> float:
    r"""The noise multiplier of *each* run when a search over :math:`G` combinations is charged to
    :math:`(\varepsilon, \delta)`.

    Args:
        epsilon, delta: the total budget :math:`(\varepsilon, \delta)` of the whole search (the paper uses
            :math:`\delta = 1/N`).
        sample_rate: :math:`q = B/N` of every run.
        steps: :math:`T`, the SGD steps of one run.
        G: the number :math:`G` of hyperparameter combinations, an integer >= 1.
        protocol: ``"none"`` (one run: ``G`` is ignored), ``"rdp"`` (:math:`G` runs composed: :math:`\sigma` for
            :math:`GT` steps), ``"lt"`` (Theorem 1: :math:`\sigma` for one run at :func:`per_run_budget`) or
            ``"ps"`` (the best of :math:`K` runs, :math:`\mathbb E[K] = G`). See :data:`PROTOCOLS`.
        accountant: ``"rdp"`` (the paper's) or ``"prv"``. Under ``"lt"`` PRV fails at
            :math:`\delta_1 \approx 10^{-17}`; ``"ps"`` is a theorem about Renyi DP and takes ``"rdp"`` only.
        distribution: under ``"ps"``, the distribution of :math:`K` (:data:`RUN_COUNTS`).
        epsilon_tolerance: passed to :func:`dpbook.accounting.noise_multiplier` (which also narrows :math:`\sigma`
            itself to 1 %); the default 0.01 matches Opacus's ``get_noise_multiplier``.

    With :math:`G = 1` every protocol gives the single-run :math:`\sigma` (nothing is selected). :math:`\sigma` grows
    with :math:`G` under "rdp" (about like :math:`\sqrt G`) and, far more slowly, under "lt" (through
    :math:`\ln(1/\delta_1)`, :math:`\delta_1 \sim 1/G^2`).

    >>> q, T, d = 256 / 60000, 2340, 1 / 60000            # MNIST, 10 epochs
    >>> [round(calibrate_sigma(4.0, d, q, T, G, "rdp"), 3) for G in (1, 10, 90)]
    [0.668, 0.995, 2.329]
    >>> [round(calibrate_sigma(4.0, d, q, T, G, "lt"), 3) for G in (1, 10, 90)]
    [0.668, 1.782, 1.882]
    >>> [round(calibrate_sigma(4.0, d, q, T, G, "ps"), 3) for G in (1, 10, 90)]
    [0.668, 0.788, 0.858]

    Raises:
        ValueError: naming the parameter on bad input, or explaining what to change when the budget cannot be
            reached (e.g. LT with :math:`\delta` below :math:`\delta_2`, or a grid so large that
            :math:`\varepsilon/3 - \sqrt{2\delta_1} \le 0`).
    """
    epsilon, delta = _check_budget(epsilon, delta)
    sample_rate = checks.rate("sample_rate", sample_rate, "q = B/N")
    steps = checks.integer("steps", steps, minimum=1)
    G = _check_G(G)
    protocol = _check_protocol(protocol)
    delta2 = _check_delta2(delta2)
    accounting.check_accountant(accountant)
    checks.one_of("distribution", distribution, RUN_COUNTS)
    if protocol == "ps" and accountant != "rdp":
        raise ValueError(f"protocol='ps' is a theorem about Renyi DP: it needs accountant='rdp', got {accountant!r}")
    return _calibrate(epsilon, delta, sample_rate, steps, G, protocol, accountant,
                      checks.positive("epsilon_tolerance", epsilon_tolerance), delta2, distribution)[0]


@dataclass(frozen=True)
class TuningPlan:
    r"""A calibrated search: the :math:`\sigma` of every run and what the whole search spends, recomputed by the
    accountant.

    ``per_run_epsilon`` is what one run at ``sigma`` spends at ``per_run_delta``, recomputed by the accountant.
    ``per_run_delta`` is :math:`\delta` itself, or :math:`\delta_1` under LT. ``total_epsilon`` and ``total_delta``
    are what the protocol charges for the whole search:

    - "none": one run;
    - "rdp": the accountant on :math:`GT` steps at :math:`\sigma`;
    - "lt": Theorem 1 applied to the recomputed per-run :math:`\varepsilon`;
    - "ps": Papernot and Steinke's theorem for :math:`K \sim` ``count``
      (:func:`dpbook.repeat_select.search_epsilon`).

    Each is <= the target. ``charged_protocol`` is "none" when :math:`G = 1`, whatever was asked.
    ``max_runs`` and ``expected_runs`` count training runs. Under LT they are :math:`\lfloor T_{LT}\rfloor` and about
    :math:`2G`; under "ps" there is no cap (``None``) and the mean is :math:`G`.
    """

    protocol: str
    charged_protocol: str
    G: int
    sigma: float
    sample_rate: float
    steps: int
    epsilon: float
    delta: float
    per_run_epsilon: float
    per_run_delta: float
    total_epsilon: float
    total_delta: float
    max_runs: int | None
    expected_runs: float
    accountant: str
    gamma: float | None = None
    delta2: float | None = None
    count: RunCount | None = None

    @property
    def selection_charged(self) -> bool:
        """Whether the guarantee covers releasing the best of the runs (False only for "none" with G > 1)."""
        return self.charged_protocol != "none" or self.G == 1

    def charge(self, history) -> float:
        r"""What the protocol charges for a search whose every run has the ledger ``history`` (``(sigma, q, steps)``
        segments), to be kept at most :attr:`charge_limit`: the one charge rule, which every method's ``from_plan``
        calibrates to and every recorded run is checked against.

        - "none" (and any :math:`G = 1`): the run's :math:`\varepsilon` at :math:`\delta`;
        - "rdp": :math:`G` copies of the history composed, at :math:`\delta`;
        - "lt": the run's :math:`\varepsilon` at Theorem 1's per-run :math:`\delta_1` (the theorem's
          :math:`\varepsilon' = 3\varepsilon_1 + 3\sqrt{2\delta_1}` grows with it);
        - "ps": Papernot and Steinke's bound on the search, at :math:`\delta`, from the history's Renyi DP curve.

        >>> plan = tuning_plan(4.0, 1e-5, 0.01, 1000, G=10, protocol="ps")
        >>> plan.charge([(plan.sigma, 0.01, 1000)]) == plan.charge_limit == plan.total_epsilon
        True
        """
        history = [accounting.check_segment(seg, i) for i, seg in enumerate(history)]
        if self.charged_protocol == "lt":
            return accounting.epsilon_of_history(history, self.per_run_delta, self.accountant)
        if self.charged_protocol == "ps":
            return _ps_epsilon(history, self.delta, self.count)
        runs = self.G if self.charged_protocol == "rdp" else 1
        return accounting.epsilon_of_history([(s, q, t * runs) for s, q, t in history], self.delta, self.accountant)

    @property
    def charge_limit(self) -> float:
        """What :meth:`charge` gives a DP-SGD run at ``sigma``, the most any run of the search may be charged: the
        recomputed per-run epsilon under "lt", the recomputed total epsilon otherwise."""
        return self.per_run_epsilon if self.charged_protocol == "lt" else self.total_epsilon


def tuning_plan(epsilon: float, delta: float, sample_rate: float, steps: int, G: int = 1, protocol: str = "none",
                *, accountant: str = "rdp", epsilon_tolerance: float = 0.01, delta2: float = LT_DELTA2,
                distribution: str = "logarithmic") -> TuningPlan:
    r"""Calibrate :math:`\sigma` like :func:`calibrate_sigma`, then recompute what the whole search spends.

    >>> plan = tuning_plan(4.0, 1e-5, 0.01, 1000, G=10, protocol="rdp")
    >>> round(plan.sigma, 3), plan.total_epsilon <= 4.0, plan.max_runs
    (1.36, True, 10)
    >>> lt = tuning_plan(4.0, 1e-5, 0.01, 1000, G=10, protocol="lt")
    >>> round(lt.sigma, 3), round(lt.per_run_epsilon, 3), float(f"{lt.per_run_delta:.2e}"), lt.max_runs
    (2.266, 1.327, 6.55e-18, 921)
    >>> round(lt.expected_runs, 6)
    20.0
    >>> lt.total_epsilon <= 4.0, lt.total_delta <= 1e-5
    (True, True)
    >>> ps = tuning_plan(4.0, 1e-5, 0.01, 1000, G=10, protocol="ps")
    >>> round(ps.sigma, 3), round(ps.per_run_epsilon, 3), 3.99 <= ps.total_epsilon <= 4.0, ps.max_runs, ps.count.name
    (0.942, 2.415, True, None, 'logarithmic')
    """
    sigma = calibrate_sigma(epsilon, delta, sample_rate, steps, G, protocol, accountant=accountant,
                            epsilon_tolerance=epsilon_tolerance, delta2=delta2, distribution=distribution)
    G, protocol = int(G), str(protocol)
    charged = "none" if G == 1 else protocol
    if charged == "lt":
        epsilon1, delta1 = per_run_budget(epsilon, delta, G, "lt", delta2=delta2)
        gamma = lt_gamma(G)
        per_run = accounting.epsilon(sigma, sample_rate, steps, delta1, accountant)
        total_epsilon, total_delta = lt_theorem(per_run, delta1, gamma, delta2)
        return TuningPlan(protocol, charged, G, sigma, sample_rate, steps, epsilon, delta, per_run, delta1,
                          total_epsilon, total_delta, math.floor(lt_max_runs(gamma, delta2)),
                          lt_expected_runs(gamma, delta2), accountant, gamma, delta2)
    per_run = accounting.epsilon(sigma, sample_rate, steps, delta, accountant)
    if charged == "ps":
        count = run_count(G, distribution)
        total = _ps_epsilon([(sigma, sample_rate, steps)], delta, count)
        return TuningPlan(protocol, charged, G, sigma, sample_rate, steps, epsilon, delta, per_run, delta, total,
                          delta, None, count.actual_mean, accountant, count=count)
    total = accounting.epsilon(sigma, sample_rate, G * steps, delta, accountant) if charged == "rdp" else per_run
    runs = 1 if G == 1 else G
    return TuningPlan(protocol, charged, G, sigma, sample_rate, steps, epsilon, delta, per_run, delta, total, delta,
                      runs, float(runs), accountant)


# --------------------------------------------------------------------------------------------------------------
# The grid-search runner
# --------------------------------------------------------------------------------------------------------------

@dataclass
class Run:
    """One training run of a search: which grid point, with which seed, and what it returned."""

    order: int                     # position in the sequence of runs (0-based)
    grid_index: int                # index of its hyperparameters in the grid
    hyperparameters: dict
    seed: int
    metric: float
    output: Any = field(default=None, repr=False)


@dataclass
class GridSearchResult:
    r"""All runs of a charged search, the best one, and the privacy it was charged (a :class:`TuningPlan`).

    ``best`` is None when the search made no run (:math:`K = 0` under ``"ps"`` with a Poisson count): it releases
    nothing, the output :math:`\bot` of Papernot and Steinke's theorem, which covers it.

    ``composed_epsilon`` composes *every run actually made* with the plan's accountant at the total :math:`\delta`. That
    is an honest upper bound for any protocol. Under "lt" it counts every run at :math:`\delta` rather than at Theorem
    1's :math:`\delta_1`, so it is not what the protocol charges: Theorem 1 is what makes the random number of runs
    cheap.
    """

    plan: TuningPlan
    grid: list[dict]
    runs: list[Run]
    best: Run | None
    composed_epsilon: float
    maximize: bool = True

    @property
    def sigma(self) -> float:
        return self.plan.sigma

    @property
    def total_epsilon(self) -> float:
        return self.plan.total_epsilon

    @property
    def total_delta(self) -> float:
        return self.plan.total_delta

    @property
    def per_run_epsilon(self) -> float:
        return self.plan.per_run_epsilon

    @property
    def per_run_delta(self) -> float:
        return self.plan.per_run_delta

    def summary(self) -> str:
        r"""A few lines: the protocol, :math:`\sigma`, what was charged, the number of runs and the best run."""
        p = self.plan
        lines = [
            f"protocol {p.charged_protocol!r} (asked {p.protocol!r}), G = {p.G}, sigma = {p.sigma:.4f} per run, "
            f"q = {p.sample_rate:.4g}, T = {p.steps} steps per run",
            f"per run: epsilon = {p.per_run_epsilon:.4f} at delta = {p.per_run_delta:.3g}",
            f"charged: epsilon = {p.total_epsilon:.4f}, delta = {p.total_delta:.3g} (budget {p.epsilon:g}, "
            f"{p.delta:.3g}); selection of the best {'covered' if p.selection_charged else 'NOT covered'}",
            f"{len(self.runs)} runs; " + ("nothing released (K = 0)" if self.best is None else
                                          f"best: run {self.best.order} {self.best.hyperparameters} -> "
                                          f"metric {self.best.metric:.4f}"),
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _metric_of(output, metric_key: str | None, order: int) -> float:
    if isinstance(output, Mapping):
        key = metric_key or "metric"
        if key not in output:
            raise ValueError(f"run {order}: train returned a mapping without the metric key {key!r} "
                             f"(keys: {sorted(map(str, output))}); pass metric=... to grid_search")
        value = output[key]
    else:
        value = output
    try:
        v = checks.real(f"the metric of run {order}", value)
    except ValueError as err:
        raise ValueError(f"{err}; train must return a finite number or a mapping holding one") from None
    if not math.isfinite(v):
        raise ValueError(f"the metric of run {order} must be finite, got {value!r}")
    return v


def _check_history(output, plan: TuningPlan, order: int) -> None:
    """If a run reports its privacy history, it must not have spent more than the plan charged for it."""
    if not isinstance(output, Mapping) or "history" not in output:
        return
    history = [accounting.check_segment(seg, i) for i, seg in enumerate(output["history"])]
    steps = sum(t for _, _, t in history)
    for s, q, t in history:
        if t > 0 and (s < plan.sigma * (1 - 1e-12) or q > plan.sample_rate * (1 + 1e-12)):
            raise ValueError(f"run {order} reports a segment (sigma={s!r}, q={q!r}) that spends more than it was "
                             f"charged for: the plan needs sigma >= {plan.sigma!r} and q <= {plan.sample_rate!r}")
    if steps > plan.steps:
        raise ValueError(f"run {order} reports {steps} steps, more than the {plan.steps} the plan charged")


def search_schedule(plan: TuningPlan, seed: int = 0) -> list[tuple[int, int, int]]:
    r"""The runs a search makes, as ``(order, grid_index, run_seed)``, fixed before any training.

    - ``"none"`` and ``"rdp"``: every grid point once, in order; run k has seed ``seed + k``.
    - ``"lt"``: Theorem 1's random stopping (module docstring, reading 5): each iteration draws a uniformly random grid
      point, then stops with probability :math:`\gamma = 1/(2G)`; at most :math:`\lfloor T_{LT}\rfloor` runs. Both draws
      come from ``numpy.random.default_rng(seed)`` and never look at the data or at any result, so the whole schedule is
      known in advance: a sweep can run its trainings in parallel, and an interrupted search resumes exactly.
    - ``"ps"``: Papernot and Steinke's random search: :math:`K` drawn from the plan's ``count``, then :math:`K` grid
      points drawn uniformly with replacement, all from ``numpy.random.default_rng(seed)`` before any training.
      :math:`K = 0` (possible under Poisson) is an empty schedule: the search releases nothing.
    - :math:`G = 1`: one run with the whole budget.

    >>> plan = tuning_plan(4.0, 1e-5, 0.01, 1000, G=3, protocol="lt")
    >>> schedule = search_schedule(plan, seed=7)
    >>> [seed for _, _, seed in schedule][:3], all(0 <= i < 3 for _, i, _ in schedule)
    ([7, 8, 9], True)
    >>> search_schedule(tuning_plan(4.0, 1e-5, 0.01, 1000, G=3, protocol="rdp"), seed=7)
    [(0, 0, 7), (1, 1, 8), (2, 2, 9)]
    >>> search_schedule(tuning_plan(4.0, 1e-5, 0.01, 1000, G=3, protocol="ps"), seed=7)
    [(0, 2, 7), (1, 2, 8)]
    """
    seed = checks.integer("seed", seed, minimum=0)
    if plan.charged_protocol == "ps":
        rng = np.random.default_rng(seed)
        K = plan.count.sample(rng)
        return [(order, int(index), seed + order) for order, index in enumerate(rng.integers(plan.G, size=K))]
    if plan.charged_protocol != "lt":
        return [(order, order, seed + order) for order in range(plan.G)]
    rng = np.random.default_rng(seed)
    schedule = []
    for order in range(plan.max_runs):
        schedule.append((order, int(rng.integers(plan.G)), seed + order))
        if rng.random() < plan.gamma:
            break
    return schedule


def grid_search(grid: Sequence[Mapping[str, Any]], train: Callable[[dict, float, int], Any], *, epsilon: float,
                delta: float, sample_rate: float, steps: int, protocol: str, accountant: str = "rdp",
                seed: int = 0, maximize: bool = True, metric: str | None = None, epsilon_tolerance: float = 0.01,
                delta2: float = LT_DELTA2, distribution: str = "logarithmic") -> GridSearchResult:
    r"""Tune over ``grid`` with the search charged to :math:`(\varepsilon, \delta)`, and return every run and the best
    one.

    ``train(hyperparameters, sigma, seed)`` builds and trains one model with noise multiplier ``sigma`` (for
    ``steps`` steps at ``sample_rate``) and returns its final metric (e.g. test accuracy on public data). It may
    return a number or a mapping with the metric under ``metric`` (default key ``"metric"``). If the mapping also
    holds ``"history"`` (the run's ``(sigma, q, steps)`` segments, e.g. ``PrivacyLedger.history``), the runner
    checks that the run spent no more than it was charged for. The runner knows nothing of the method: any
    registered method can be tuned through the callable.

    The protocol decides :math:`\sigma` (:func:`tuning_plan`, with ``G = len(grid)``) and the runs made:

    - ``"none"`` and ``"rdp"``: every grid point once, in order. Run k gets seed ``seed + k``.
    - ``"lt"``: the LT algorithm of Theorem 1 (module docstring, reading 5). Each iteration trains a uniformly random
      grid point with seed ``seed + k``, then stops with probability :math:`\gamma = 1/(2G)`. There are at most
      :math:`\lfloor T_{LT}\rfloor` runs. Both draws come from ``numpy.random.default_rng(seed)``, never from the data.
    - ``"ps"``: :math:`K` runs of uniformly random grid points, :math:`K` random with mean :math:`G`
      (:func:`search_schedule`); with :math:`K = 0` nothing is released (``best`` is None).
    - A grid of one point is trained once with the whole budget, whatever the protocol.

    The best run is the first with the highest metric (lowest if ``maximize=False``).

    >>> grid = [{"C": C} for C in (0.1, 1.0, 10.0)]
    >>> def train(hp, sigma, seed):                  # a deterministic stand-in for a training run
    ...     return 1.0 - abs(hp["C"] - 1.0) / 10 - sigma / 100
    >>> result = grid_search(grid, train, epsilon=4.0, delta=1e-5, sample_rate=0.01, steps=1000, protocol="rdp")
    >>> result.best.hyperparameters, len(result.runs), round(result.sigma, 3), result.total_epsilon <= 4.0
    ({'C': 1.0}, 3, 0.94, True)
    """
    if isinstance(grid, (str, bytes)) or not isinstance(grid, Sequence):
        raise ValueError(f"grid must be a list of hyperparameter dicts, got {type(grid).__name__}")
    grid = list(grid)
    if not grid:
        raise ValueError("grid must hold at least one hyperparameter dict, got an empty grid")
    for i, point in enumerate(grid):
        if not isinstance(point, Mapping):
            raise ValueError(f"grid[{i}] must be a dict of hyperparameters, got {point!r}")
    if not callable(train):
        raise ValueError(f"train must be a callable train(hyperparameters, sigma, seed), got {train!r}")
    seed = checks.integer("seed", seed, minimum=0)
    plan = tuning_plan(epsilon, delta, sample_rate, steps, len(grid), protocol, accountant=accountant,
                       epsilon_tolerance=epsilon_tolerance, delta2=delta2, distribution=distribution)
    runs: list[Run] = []
    for order, index, run_seed in search_schedule(plan, seed):
        hp = dict(grid[index])
        output = train(dict(hp), plan.sigma, run_seed)
        value = _metric_of(output, metric, order)
        _check_history(output, plan, order)
        runs.append(Run(order, index, hp, run_seed, value, output))

    key = (lambda r: r.metric) if maximize else (lambda r: -r.metric)
    best = max(runs, key=key, default=None)  # max returns the first maximal element
    composed = accounting.epsilon(plan.sigma, plan.sample_rate, len(runs) * plan.steps, plan.delta, plan.accountant)
    if plan.charged_protocol == "rdp" and composed > plan.epsilon:  # the accountant's own check of the charge
        raise RuntimeError(f"the {len(runs)} runs composed spend epsilon={composed!r} > budget {plan.epsilon!r}")
    return GridSearchResult(plan, grid, runs, best, composed, maximize)
