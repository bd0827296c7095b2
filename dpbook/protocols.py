r"""Tuning protocols: what a hyperparameter search over :math:`G` grid points is charged, one class per protocol.

A grid search trains :math:`G` candidate models on the private data and releases the best one. The selection looks
at every candidate, so the released model is only as private as the *whole search*. DC-SGD (Wei et al., arXiv
2503.22988, Sec. II-C and VI-B, Tables II and III) charges the search to the budget in two ways, and compares with
tuning for free (Tables IV and V). Each way is a :class:`Protocol`, registered under the name the paper's tables and
the result files use (:data:`PROTOCOLS`):

``"none"`` (:class:`FreeTuning`)
    One run, no tuning cost: every run gets the whole :math:`(\varepsilon, \delta)`. This is the protocol of Tables
    IV and V. For :math:`G > 1` the selection of the best run is *not* covered by the guarantee.
``"rdp"`` (:class:`Composition`)
    Sequential composition (Sec. VI-B): "the grid search involves repeatedly training G models, the privacy cost
    for a single training can be obtained through G-composition". Every run has the same :math:`(\sigma, q, T)`, so
    the Renyi divergences of the :math:`G` runs add up order by order. The :math:`G` runs are one history of
    :math:`GT` subsampled Gaussian steps, and :math:`\sigma` is calibrated so that
    :math:`\varepsilon(\sigma, q, GT, \delta) \le \varepsilon`. Picking the best run is post-processing of the
    :math:`G` outputs. This is the protocol of Table III.
``"lt"`` (:class:`LiuTalwar`)
    Liu & Talwar's random stopping (Theorem 1 of the paper, quoted below), as the paper applies it following
    Mohapatra et al.: :math:`\delta_2 = 10^{-20}` and :math:`\gamma = 1/(2G)`. Theorem 1 is inverted to get the
    per-run budget :math:`(\varepsilon_1, \delta_1)` of :meth:`LiuTalwar.per_run_budget`, and :math:`\sigma` is
    calibrated for one run at :math:`(\varepsilon_1, \delta_1)`. This is the protocol of Table II.
``"ps"`` (:class:`RandomSearch`)
    Papernot & Steinke's random search (ICLR 2022, :mod:`dpbook.repeat_select`), which postdates the paper: the number
    :math:`K` of runs is random with mean :math:`G` (logarithmic by default; Poisson or geometric on request), each run
    trains a grid point drawn uniformly with replacement, and the best is released. The search's Renyi DP is a
    single run's plus terms that grow like :math:`\log G` (Theorems 2 and 6 of that paper); :math:`\sigma` is
    calibrated so that it converts to at most :math:`(\varepsilon, \delta)`.

A protocol object is the protocol applied to a grid of :math:`G` points (``LiuTalwar(G=10)``). It holds its
calibration (:meth:`~Protocol.calibrate`), what it charges a search (:meth:`~Protocol.charge`), the runs it makes
(:meth:`~Protocol.schedule`) and its re-run rule (:attr:`~Protocol.free`). A grid with one point (DC-SGD-E: nothing
to tune) involves no selection: :func:`make_protocol` then gives :class:`FreeTuning`, a single run with the whole
budget, whatever was asked, as the paper does: "DC-SGD-E ... will only train the model once with the total privacy
cost. Therefore, it has the same performance in both situations" (Sec. VI-B). :mod:`dpbook.tuning` turns a protocol
into a calibrated plan and runs the search.

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
   gives the paper's "expected running time of LT is :math:`2G`". The cap is then :math:`T_{LT} = 2G\ln(10^{20})`, about
   :math:`92.1\,G` runs. :math:`T_{LT}` is the real number of the theorem, not rounded; the search stops after
   :math:`\lfloor T_{LT}\rfloor` runs.
3. Inversion: set :math:`\delta' = \delta` and :math:`\varepsilon' = \varepsilon`. This gives

   .. math::

       \sqrt{2\delta_1} = \frac{\delta - \delta_2}{3T_{LT}}, \qquad
       \varepsilon_1 = \frac{\varepsilon}{3} - \sqrt{2\delta_1}.

   (:math:`\sqrt{2\delta_1}` is rounded down by :math:`10^{-12}`, relative, so that floating-point rounding never
   takes the recomputed :math:`\delta'` above :math:`\delta`.)
   That is the largest per-run budget the theorem allows (:meth:`LiuTalwar.per_run_budget`).
   For CIFAR10 at :math:`G = 10`, :math:`\delta_1` is about :math:`2.6\cdot10^{-17}` and :math:`\varepsilon_1` is
   about :math:`\varepsilon/3`.
4. The factor 3 in :math:`\delta' = 3\sqrt{2\delta_1}\,T + \delta_2` is the paper's. Liu & Talwar's own statement
   may read :math:`\sqrt{2\delta_1}\,T + \delta_2` (no 3); this could not be checked offline. The paper's version
   asks for a smaller :math:`\delta_1`, so it is the conservative one; it is also the statement the paper applies.
5. Theorem 1 covers *random stopping*, not a single pass over the grid. Releasing the best of one pass over
   :math:`G` fixed candidates, each at :math:`(\varepsilon_1, \delta_1)`, is not covered by it: composition only
   gives about :math:`G\varepsilon_1`. :class:`LiuTalwar` therefore runs the LT algorithm itself
   (:meth:`LiuTalwar.schedule`): a uniformly random grid point per iteration, a coin with probability :math:`\gamma`
   after each run, and at most :math:`\lfloor T_{LT}\rfloor` runs. The number of runs is random, :math:`2G` on
   average. The paper's time accounting (Sec. VI-A: "the product of the count of hyperparameter combinations and
   the time cost of a single training") suggests it trained each combination once. That reading is not sound under
   Theorem 1, so it is not offered.

LT's per-run :math:`\delta_1` is tiny (about :math:`10^{-17}` for :math:`G = 10` at :math:`\delta = 10^{-5}`), and
at such a :math:`\delta` the best RDP order is large (about 80 for MNIST at :math:`\varepsilon = 2` and
:math:`G = 10`, about 200 at :math:`\varepsilon = 1`): Opacus's orders (:math:`\alpha \le 63`) do not reach it, and
an accountant limited to them overstates the noise LT needs by 20-90 % at :math:`\varepsilon \le 2` and declares
:math:`\varepsilon = 1` unreachable. :func:`dpbook.accounting.rdp_optimum` grows the order grid until the optimum is
interior: LT at :math:`\varepsilon = 1` is reachable (MNIST, :math:`G = 10`: :math:`\sigma` about 5.1 per run). PRV
cannot work at such a small :math:`\delta`; its error says so.

>>> lt = make_protocol("lt", G=10)
>>> lt, lt.gamma, lt.free
(LiuTalwar(G=10, delta2=1e-20), 0.05, False)
>>> round(lt.calibrate(4.0, 1e-5, 0.01, 1000), 3)      # sigma of each run, LT with gamma = 1/20
2.266
>>> make_protocol("rdp", G=1)                              # one point: nothing is selected
FreeTuning(G=1)
"""

from __future__ import annotations

__all__ = [
    "Protocol", "FreeTuning", "Composition", "LiuTalwar", "RandomSearch", "PROTOCOLS", "protocol_label",
    "make_protocol", "LT_DELTA2", "lt_gamma", "lt_max_runs", "lt_expected_runs", "lt_theorem", "RUN_COUNTS",
    "run_count",
]

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from dpbook import accounting, checks
from dpbook.repeat_select import RunCount, search_epsilon

#: The paper's :math:`\delta_2` for Theorem 1 (Sec. VI-B, following Mohapatra et al. [50]).
LT_DELTA2 = 1e-20

#: The distributions of the number of runs under ``"ps"``, each given its mean :math:`G`
#: (:class:`dpbook.repeat_select.RunCount`); the first is the default.
RUN_COUNTS = {"logarithmic": RunCount.logarithmic, "poisson": RunCount.poisson, "geometric": RunCount.geometric}


def _check_G(G) -> int:
    return checks.integer("G (the number of hyperparameter combinations)", G)


def _check_delta2(delta2) -> float:
    return checks.open_unit("delta2", delta2, "Theorem 1's delta_2; the paper uses 1e-20")


# --------------------------------------------------------------------------------------------------------------
# The protocols
# --------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Protocol:
    r"""A tuning protocol applied to a search over ``G`` grid points: how it calibrates the :math:`\sigma` of each
    run, what it charges the search, which runs it makes, and how a reproduction repeats it.

    A subclass sets :attr:`name` (as the paper's tables and the result files write it), :attr:`label` (as the book
    writes it) and :attr:`summary`, and is
    registered in :data:`PROTOCOLS`. The arguments of :meth:`calibrate` are checked by its callers
    (:func:`dpbook.tuning.calibrate_sigma`).
    """

    G: int

    #: The protocol's name in the paper's tables, the result files and the command lines.
    name: ClassVar[str]
    #: The protocol's name in the book's text, tables and legends (:func:`protocol_label`).
    label: ClassVar[str]
    #: What it charges, in one line.
    summary: ClassVar[str]
    #: The re-run rule of a reproduction: True when tuning is free, so that the grid is trained once and its best
    #: point re-trained with every seed; False when each repetition is a whole new search, charged.
    free: ClassVar[bool] = False

    def __post_init__(self):
        object.__setattr__(self, "G", _check_G(self.G))

    @classmethod
    def tag(cls, G: int) -> str:
        """How a result file's name writes a search under this protocol over ``G`` points (``rdp10``)."""
        return f"{cls.name}{G}"

    @classmethod
    def check_accountant(cls, accountant: str) -> str:
        """``accountant``, refused where the protocol's theorem needs another."""
        return accounting.check_accountant(accountant)

    @property
    def selection_charged(self) -> bool:
        """Whether the guarantee covers releasing the best of the runs."""
        return True

    def per_run_budget(self, epsilon: float, delta: float) -> tuple[float, float]:
        r"""The :math:`(\varepsilon_1, \delta_1)` each run may spend so that the search is
        :math:`(\varepsilon, \delta)`-DP; a ValueError where the protocol charges the runs' Renyi DP instead."""
        raise ValueError(
            f"protocol={self.name!r} charges the search through the runs' Renyi DP ({self.summary}) before the "
            f"conversion to (epsilon, delta), so it has no per-run (epsilon, delta) budget; use "
            f"calibrate_sigma(..., protocol={self.name!r}) for the per-run noise multiplier")

    def calibrate(self, epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str = "rdp",
                  epsilon_tolerance: float = 0.01) -> float:
        r"""The :math:`\sigma` of each run of ``steps`` steps at ``sample_rate`` that keeps the search within
        :math:`(\varepsilon, \delta)`."""
        raise NotImplementedError

    def per_run_delta(self, delta: float) -> float:
        r"""The :math:`\delta` at which one run's :math:`\varepsilon` is reported and charged: :math:`\delta`."""
        return delta

    def totals(self, sigma: float, per_run_epsilon: float, sample_rate: float, steps: int, delta: float,
               accountant: str) -> tuple[float, float]:
        r"""What the whole search spends, :math:`(\varepsilon, \delta)`, when each run spends ``per_run_epsilon``."""
        raise NotImplementedError

    def runs(self) -> tuple[int | None, float]:
        """The most runs the search makes (None: no cap) and their expected number."""
        return self.G, float(self.G)

    def charge(self, history: list[accounting.Segment], delta: float, accountant: str) -> float:
        """What the protocol charges a search at the total ``delta`` whose every run has the (validated) ledger
        ``history``."""
        raise NotImplementedError

    def charge_limit(self, per_run_epsilon: float, total_epsilon: float) -> float:
        """The most :meth:`charge` may give a run of a search that spends ``total_epsilon`` in all, each run
        ``per_run_epsilon``: ``total_epsilon``."""
        return total_epsilon

    def schedule(self, seed: int) -> list[tuple[int, int, int]]:
        """The runs, as ``(order, grid_index, run_seed)``: every grid point once, in order, run k with seed
        ``seed + k``."""
        return [(order, order, seed + order) for order in range(self.G)]

    def check_search(self, composed_epsilon: float, runs: int, epsilon: float) -> None:
        """A check of the ``runs`` a search made, composed by the accountant at the total delta: nothing to check
        where the composition is not the charge."""

    def record(self) -> dict:
        """What a result file's plan holds of the protocol besides its name."""
        return {}


def _composed(history: list[accounting.Segment], copies: int, delta: float, accountant: str) -> float:
    return accounting.epsilon_of_history([(s, q, t * copies) for s, q, t in history], delta, accountant)


@dataclass(frozen=True)
class FreeTuning(Protocol):
    """``"none"``: every run at the whole budget; the selection of the best of ``G > 1`` runs is not covered."""

    name: ClassVar[str] = "none"
    label: ClassVar[str] = "free tuning"
    summary: ClassVar[str] = "one run at the whole budget; tuning is free (Tables IV and V)"
    free: ClassVar[bool] = True

    @classmethod
    def tag(cls, G: int) -> str:
        return cls.name

    @property
    def selection_charged(self) -> bool:
        return self.G == 1

    def per_run_budget(self, epsilon, delta):
        return epsilon, delta

    def calibrate(self, epsilon, delta, sample_rate, steps, accountant="rdp", epsilon_tolerance=0.01):
        return accounting.noise_multiplier(epsilon, delta, sample_rate, steps, accountant, epsilon_tolerance)

    def totals(self, sigma, per_run_epsilon, sample_rate, steps, delta, accountant):
        return per_run_epsilon, delta

    def runs(self):
        return (1, 1.0) if self.G == 1 else super().runs()

    def charge(self, history, delta, accountant):
        return _composed(history, 1, delta, accountant)


@dataclass(frozen=True)
class Composition(Protocol):
    """``"rdp"``: the ``G`` runs composed under RDP, as one history of ``G T`` steps (Sec. VI-B, Table III)."""

    name: ClassVar[str] = "rdp"
    label: ClassVar[str] = "RDP composition"
    summary: ClassVar[str] = "G runs composed under RDP as one history of G·T steps (Sec. VI-B, Table III)"

    def calibrate(self, epsilon, delta, sample_rate, steps, accountant="rdp", epsilon_tolerance=0.01):
        try:
            return accounting.noise_multiplier(epsilon, delta, sample_rate, self.G * steps, accountant,
                                               epsilon_tolerance)
        except ValueError as err:
            raise ValueError(f"the budget epsilon={epsilon!r}, delta={delta!r} cannot cover G={self.G} runs of "
                             f"{steps} steps composed ({self.G * steps} steps in all): {str(err).rstrip('.')}. "
                             f"Use a larger epsilon, a smaller grid or protocol='lt'.") from err

    def totals(self, sigma, per_run_epsilon, sample_rate, steps, delta, accountant):
        return accounting.epsilon(sigma, sample_rate, self.G * steps, delta, accountant), delta

    def charge(self, history, delta, accountant):
        return _composed(history, self.G, delta, accountant)

    def check_search(self, composed_epsilon, runs, epsilon):
        if composed_epsilon > epsilon:  # the accountant's own check of the charge
            raise RuntimeError(f"the {runs} runs composed spend epsilon={composed_epsilon!r} > budget {epsilon!r}")


@dataclass(frozen=True)
class LiuTalwar(Protocol):
    r"""``"lt"``: Liu and Talwar's random stopping, Theorem 1 with :math:`\gamma = 1/(2G)` and ``delta2``
    (Sec. VI-B, Table II); read as the module docstring says."""

    delta2: float = LT_DELTA2

    name: ClassVar[str] = "lt"
    label: ClassVar[str] = "Liu–Talwar"
    summary: ClassVar[str] = ("Liu–Talwar random stopping, Theorem 1 with δ₂ = 10⁻²⁰ and γ = 1/(2G) "
                              "(Sec. VI-B, Table II)")

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "delta2", _check_delta2(self.delta2))

    @property
    def gamma(self) -> float:
        r"""The stopping probability :math:`\gamma = 1/(2G)`."""
        return lt_gamma(self.G)

    def _root(self, delta: float) -> float:
        r""":math:`\sqrt{2\delta_1} = (\delta - \delta_2)/(3T_{LT})`, rounded down by :math:`10^{-12}` (relative) so
        that floating-point rounding can never push the recomputed :math:`\delta'` above :math:`\delta`."""
        if not delta > self.delta2:
            raise ValueError(f"delta must exceed Theorem 1's delta2={self.delta2!r} (delta' = 3 sqrt(2 delta_1) T + "
                             f"delta_2), got delta={delta!r}")
        return (delta - self.delta2) / (3 * lt_max_runs(self.gamma, self.delta2)) * (1 - 1e-12)

    def per_run_budget(self, epsilon, delta):
        r"""Theorem 1 inverted with :math:`\delta' = \delta` (module docstring, reading 3):
        :math:`\sqrt{2\delta_1} = (\delta - \delta_2)/(3T_{LT})` and
        :math:`\varepsilon_1 = \varepsilon/3 - \sqrt{2\delta_1}`; a ValueError if :math:`\delta \le \delta_2` or
        :math:`\varepsilon_1 \le 0`.

        >>> eps1, delta1 = LiuTalwar(G=10).per_run_budget(2.0, 1 / 50000)   # CIFAR10, DP-SGD's grid
        >>> round(eps1, 6), float(f"{delta1:.2e}")
        (0.666667, 2.62e-17)
        """
        root = self._root(delta)
        epsilon1 = epsilon / 3 - root
        if not epsilon1 > 0:
            raise ValueError(f"epsilon={epsilon!r} is too small for LT with G={self.G}: epsilon_1 = epsilon/3 - "
                             f"sqrt(2 delta_1) = {epsilon1:.3g} <= 0")
        return epsilon1, root ** 2 / 2

    def calibrate(self, epsilon, delta, sample_rate, steps, accountant="rdp", epsilon_tolerance=0.01):
        epsilon1, delta1 = self.per_run_budget(epsilon, delta)
        try:
            return accounting.noise_multiplier(epsilon1, delta1, sample_rate, steps, accountant, epsilon_tolerance)
        except ValueError as err:
            raise ValueError(
                f"the LT per-run budget (epsilon_1={epsilon1:.4g}, delta_1={delta1:.3g}) that Theorem 1 leaves for a "
                f"total epsilon={epsilon!r}, delta={delta!r} with G={self.G} (gamma = 1/(2G), "
                f"delta_2={self.delta2:g}) is unreachable for one run of {steps} steps at sample_rate={sample_rate!r} "
                f"with the {accountant!r} accountant: {str(err).rstrip('.')}. Use a larger epsilon, a smaller grid "
                f"(delta_1 shrinks as 1/G^2), fewer steps, or protocol='rdp'.") from err

    def per_run_delta(self, delta):
        return self._root(delta) ** 2 / 2

    def totals(self, sigma, per_run_epsilon, sample_rate, steps, delta, accountant):
        return lt_theorem(per_run_epsilon, self.per_run_delta(delta), self.gamma, self.delta2)

    def runs(self):
        return math.floor(lt_max_runs(self.gamma, self.delta2)), lt_expected_runs(self.gamma, self.delta2)

    def charge(self, history, delta, accountant):
        """The run's :math:`\\varepsilon` at Theorem 1's per-run :math:`\\delta_1` (the theorem's
        :math:`\\varepsilon' = 3\\varepsilon_1 + 3\\sqrt{2\\delta_1}` grows with it)."""
        return accounting.epsilon_of_history(history, self.per_run_delta(delta), accountant)

    def charge_limit(self, per_run_epsilon, total_epsilon):
        return per_run_epsilon

    def schedule(self, seed):
        r"""Theorem 1's random stopping (module docstring, reading 5): each iteration draws a uniformly random grid
        point, then stops with probability :math:`\gamma`; at most :math:`\lfloor T_{LT}\rfloor` runs. Both draws
        come from ``numpy.random.default_rng(seed)``."""
        rng = np.random.default_rng(seed)
        schedule = []
        for order in range(self.runs()[0]):
            schedule.append((order, int(rng.integers(self.G)), seed + order))
            if rng.random() < self.gamma:
                break
        return schedule

    def record(self):
        return {"gamma": self.gamma, "delta2": self.delta2}


@dataclass(frozen=True)
class RandomSearch(Protocol):
    r"""``"ps"``: Papernot and Steinke's random search, the best of :math:`K` runs, :math:`K \sim` ``distribution``
    (:data:`RUN_COUNTS`) with mean ``G``, under RDP."""

    distribution: str = "logarithmic"
    count: RunCount = field(init=False, repr=False)

    name: ClassVar[str] = "ps"
    label: ClassVar[str] = "Papernot–Steinke"
    summary: ClassVar[str] = ("Papernot–Steinke random search: the best of K runs, K random with mean G "
                              "(logarithmic), under RDP")

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "count", run_count(self.G, self.distribution))

    @classmethod
    def check_accountant(cls, accountant):
        if accounting.check_accountant(accountant) != "rdp":
            raise ValueError(f"protocol='ps' is a theorem about Renyi DP: it needs accountant='rdp', got "
                             f"{accountant!r}")
        return accountant

    def _epsilon(self, history, delta: float) -> float:
        """What the search of runs with ``history`` spends; refused where the optimal order is at the end of the
        grown grid (privacy hygiene rule 9)."""
        return accounting.check_interior(search_epsilon(history, delta, self.count),
                                         f"the Papernot-Steinke bound of history={history}, delta={delta!r}, "
                                         f"{self.count}", "Use less noise.")

    def calibrate(self, epsilon, delta, sample_rate, steps, accountant="rdp", epsilon_tolerance=0.01):
        sigma = accounting.calibrate(
            lambda sigma: search_epsilon([(sigma, sample_rate, steps)], delta, self.count).epsilon, epsilon,
            epsilon_tolerance=epsilon_tolerance, name="sigma",
            setting=f"for the best of K ~ {self.count.name}(mean {self.G}) runs of {steps} steps at "
                    f"sample_rate={sample_rate!r}, delta={delta!r}", fix="Use a larger epsilon or a smaller grid.")
        self._epsilon([(sigma, sample_rate, steps)], delta)  # an optimum at the grid's end is refused
        return sigma

    def totals(self, sigma, per_run_epsilon, sample_rate, steps, delta, accountant):
        return self._epsilon([(sigma, sample_rate, steps)], delta), delta

    def runs(self):
        return None, self.count.actual_mean

    def charge(self, history, delta, accountant):
        """Papernot and Steinke's bound on the search, at :math:`\\delta`, from the history's Renyi DP curve."""
        return self._epsilon(history, delta)

    def schedule(self, seed):
        """:math:`K` drawn from ``count``, then :math:`K` grid points drawn uniformly with replacement, all from
        ``numpy.random.default_rng(seed)``; :math:`K = 0` (possible under Poisson) is an empty schedule."""
        rng = np.random.default_rng(seed)
        K = self.count.sample(rng)
        return [(order, int(index), seed + order) for order, index in enumerate(rng.integers(self.G, size=K))]

    def record(self):
        return {"count": dataclasses.asdict(self.count)}


#: The protocols by name, in the order of the book's tables.
PROTOCOLS: dict[str, type[Protocol]] = {cls.name: cls for cls in (FreeTuning, Composition, LiuTalwar, RandomSearch)}


def protocol_label(name: str) -> str:
    """The book's name of the protocol ``name`` (its :attr:`~Protocol.label`): what tables, panel titles and legends
    show, never the result files' key.

    >>> [protocol_label(p) for p in PROTOCOLS]
    ['free tuning', 'RDP composition', 'Liu–Talwar', 'Papernot–Steinke']
    """
    checks.one_of("protocol", name, PROTOCOLS)
    return PROTOCOLS[name].label


def make_protocol(name: str, G: int = 1, *, delta2: float = LT_DELTA2, distribution: str = "logarithmic") -> Protocol:
    r"""The protocol ``name`` applied to a grid of ``G`` points; :class:`FreeTuning` when ``G == 1``, whatever was
    asked (nothing is selected). ``delta2`` is Theorem 1's (``"lt"``), ``distribution`` the run count's (``"ps"``,
    :data:`RUN_COUNTS`); both are checked whatever the protocol.

    >>> make_protocol("ps", G=10)
    RandomSearch(G=10, distribution='logarithmic')
    >>> make_protocol("lr", G=10)
    Traceback (most recent call last):
    ...
    ValueError: unknown protocol 'lr'; valid: none, rdp, lt, ps
    """
    checks.one_of("protocol", name, PROTOCOLS)
    G = _check_G(G)
    delta2 = _check_delta2(delta2)
    checks.one_of("distribution", distribution, RUN_COUNTS)
    if G == 1:
        return FreeTuning(1)
    options = {LiuTalwar: {"delta2": delta2}, RandomSearch: {"distribution": distribution}}
    return PROTOCOLS[name](G, **options.get(PROTOCOLS[name], {}))


# --------------------------------------------------------------------------------------------------------------
# Theorem 1 (Liu & Talwar) as the paper states it, and the run counts of a random search
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


def run_count(G: int, distribution: str = "logarithmic") -> RunCount:
    """The distribution of the number of runs of a ``"ps"`` search over ``G`` grid points: mean ``G``.

    >>> run_count(10)
    RunCount(mean=10.0, shape=0.0)
    """
    checks.one_of("distribution", distribution, RUN_COUNTS)
    return RUN_COUNTS[distribution](_check_G(G))
