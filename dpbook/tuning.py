r"""The privacy cost of hyperparameter tuning: the noise of each run when a whole search is charged to one
:math:`(\varepsilon, \delta)`, the plan that records what the search spends, and the search itself.

A grid search trains candidate models on the private data and releases the best one, so the released model is only
as private as the whole search. How a search is charged is its *protocol* (:mod:`dpbook.protocols`: ``"none"``,
``"rdp"``, ``"lt"``, ``"ps"``). This module calibrates :math:`\sigma` under a protocol (:func:`calibrate_sigma`),
recomputes what the search then spends (:func:`tuning_plan`, a :class:`TuningPlan`), fixes the runs before any
training (:func:`search_schedule`) and runs the search on any training function (:func:`grid_search`).

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
    "per_run_budget", "calibrate_sigma", "TuningPlan", "tuning_plan", "search_schedule", "Run", "GridSearchResult",
    "grid_search", "grid_product",
]

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from dpbook import accounting, checks
from dpbook.protocols import LT_DELTA2, PROTOCOLS, Protocol, make_protocol


def grid_product(**axes) -> list[dict]:
    """Every combination of the axes' values, one dict per grid point, the first axis varying slowest: the one
    grid builder of the library, the benchmarks, the chapters and the notebook sweeps.

    >>> grid_product(C=(0.1, 1.0), s=(5,))
    [{'C': 0.1, 's': 5}, {'C': 1.0, 's': 5}]
    """
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


def _check_budget(epsilon, delta) -> tuple[float, float]:
    return (checks.positive("epsilon", epsilon, "the total budget of the whole search"),
            checks.open_unit("delta", delta, "the total delta of the whole search, e.g. 1/N"))


def per_run_budget(epsilon: float, delta: float, G: int, protocol: str = "lt", *,
                   delta2: float = LT_DELTA2) -> tuple[float, float]:
    r"""The :math:`(\varepsilon_1, \delta_1)` each run may spend so that the whole search is
    :math:`(\varepsilon, \delta)`-DP.

    - ``"lt"``: Theorem 1 inverted with :math:`\gamma = 1/(2G)` and :math:`\delta' = \delta`
      (:meth:`dpbook.protocols.LiuTalwar.per_run_budget`).
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
    return make_protocol(protocol, G, delta2=delta2).per_run_budget(epsilon, delta)


# --------------------------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------------------------

def _calibrated(epsilon, delta, sample_rate, steps, G, protocol, accountant, epsilon_tolerance, delta2,
                distribution) -> tuple[Protocol, float]:
    """The protocol that charges the search (every input checked) and the sigma of each run."""
    epsilon, delta = _check_budget(epsilon, delta)
    sample_rate = checks.rate("sample_rate", sample_rate, "q = B/N")
    steps = checks.integer("steps", steps, minimum=1)
    charged = make_protocol(protocol, G, delta2=delta2, distribution=distribution)
    PROTOCOLS[protocol].check_accountant(accountant)  # the asked protocol's: "ps" takes "rdp" only, even at G = 1
    epsilon_tolerance = checks.positive("epsilon_tolerance", epsilon_tolerance)
    return charged, charged.calibrate(epsilon, delta, sample_rate, steps, accountant, epsilon_tolerance)


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
            ``"ps"`` (the best of :math:`K` runs, :math:`\mathbb E[K] = G`). See :mod:`dpbook.protocols`.
        accountant: ``"rdp"`` (the paper's) or ``"prv"``. Under ``"lt"`` PRV fails at
            :math:`\delta_1 \approx 10^{-17}`; ``"ps"`` is a theorem about Renyi DP and takes ``"rdp"`` only.
        delta2: Theorem 1's :math:`\delta_2` under ``"lt"``.
        distribution: under ``"ps"``, the distribution of :math:`K` (:data:`dpbook.protocols.RUN_COUNTS`).
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
    return _calibrated(epsilon, delta, sample_rate, steps, G, protocol, accountant, epsilon_tolerance, delta2,
                       distribution)[1]


@dataclass(frozen=True)
class TuningPlan:
    r"""A calibrated search: the :math:`\sigma` of every run and what the whole search spends, recomputed by the
    accountant.

    ``protocol`` is the protocol asked for, ``charged`` the :class:`~dpbook.protocols.Protocol` that charges the
    search (:class:`~dpbook.protocols.FreeTuning` when :math:`G = 1`, whatever was asked; its name is
    ``charged_protocol``). ``per_run_epsilon`` is what one run at ``sigma`` spends at ``per_run_delta``, recomputed by
    the accountant. ``per_run_delta`` is :math:`\delta` itself, or :math:`\delta_1` under LT. ``total_epsilon`` and
    ``total_delta`` are what the protocol charges for the whole search:

    - "none": one run;
    - "rdp": the accountant on :math:`GT` steps at :math:`\sigma`;
    - "lt": Theorem 1 applied to the recomputed per-run :math:`\varepsilon`;
    - "ps": Papernot and Steinke's theorem for the plan's run count
      (:func:`dpbook.repeat_select.search_epsilon`).

    Each is <= the target. ``max_runs`` and ``expected_runs`` count training runs. Under LT they are
    :math:`\lfloor T_{LT}\rfloor` and about :math:`2G`; under "ps" there is no cap (``None``) and the mean is
    :math:`G`.
    """

    protocol: str
    charged: Protocol
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

    @property
    def charged_protocol(self) -> str:
        """The name of the protocol that charges the search ("none" when :math:`G = 1`)."""
        return self.charged.name

    @property
    def selection_charged(self) -> bool:
        """Whether the guarantee covers releasing the best of the runs (False only for "none" with G > 1)."""
        return self.charged.selection_charged

    def charge(self, history) -> float:
        r"""What the protocol charges for a search whose every run has the ledger ``history`` (``(sigma, q, steps)``
        segments), to be kept at most :attr:`charge_limit`: the one charge rule, which every method's ``from_plan``
        calibrates to and every recorded run is checked against (:meth:`dpbook.protocols.Protocol.charge`).

        >>> plan = tuning_plan(4.0, 1e-5, 0.01, 1000, G=10, protocol="ps")
        >>> plan.charge([(plan.sigma, 0.01, 1000)]) == plan.charge_limit == plan.total_epsilon
        True
        """
        history = [accounting.check_segment(seg, i) for i, seg in enumerate(history)]
        return self.charged.charge(history, self.delta, self.accountant)

    @property
    def charge_limit(self) -> float:
        """What :meth:`charge` gives a DP-SGD run at ``sigma``, the most any run of the search may be charged: the
        recomputed per-run epsilon under "lt", the recomputed total epsilon otherwise."""
        return self.charged.charge_limit(self.per_run_epsilon, self.total_epsilon)

    def record(self) -> dict:
        """The plan as a result file holds it: its numbers, the protocols' names and the charged protocol's own
        fields (LT's ``gamma`` and ``delta2``, the run count of "ps"); no ``None``.

        >>> sorted(tuning_plan(4.0, 1e-5, 0.01, 1000, G=10, protocol="lt").record())[:6]
        ['G', 'accountant', 'charged_protocol', 'delta', 'delta2', 'epsilon']
        """
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "charged"}
        values |= {"charged_protocol": self.charged_protocol, **self.charged.record()}
        return {k: v for k, v in values.items() if v is not None}


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
    >>> round(ps.sigma, 3), round(ps.per_run_epsilon, 3), 3.99 <= ps.total_epsilon <= 4.0, ps.max_runs
    (0.942, 2.415, True, None)
    >>> ps.charged.count.name
    'logarithmic'
    """
    charged, sigma = _calibrated(epsilon, delta, sample_rate, steps, G, protocol, accountant, epsilon_tolerance,
                                 delta2, distribution)
    per_run_delta = charged.per_run_delta(delta)
    per_run = accounting.epsilon(sigma, sample_rate, steps, per_run_delta, accountant)
    total_epsilon, total_delta = charged.totals(sigma, per_run, sample_rate, steps, delta, accountant)
    max_runs, expected_runs = charged.runs()
    return TuningPlan(str(protocol), charged, int(G), sigma, sample_rate, steps, epsilon, delta, per_run,
                      per_run_delta, total_epsilon, total_delta, max_runs, expected_runs, accountant)


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
    - ``"lt"``: Theorem 1's random stopping (:mod:`dpbook.protocols`, reading 5): each iteration draws a uniformly
      random grid point, then stops with probability :math:`\gamma = 1/(2G)`; at most :math:`\lfloor T_{LT}\rfloor`
      runs. Both draws come from ``numpy.random.default_rng(seed)`` and never look at the data or at any result, so
      the whole schedule is known in advance: a sweep can run its trainings in parallel, and an interrupted search
      resumes exactly.
    - ``"ps"``: Papernot and Steinke's random search: :math:`K` drawn from the plan's run count, then :math:`K` grid
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
    return plan.charged.schedule(seed)


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
    - ``"lt"``: the LT algorithm of Theorem 1 (:mod:`dpbook.protocols`, reading 5). Each iteration trains a uniformly
      random grid point with seed ``seed + k``, then stops with probability :math:`\gamma = 1/(2G)`. There are at most
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
    plan.charged.check_search(composed, len(runs), plan.epsilon)
    return GridSearchResult(plan, grid, runs, best, composed, maximize)
