r"""DC-SGD (Wei, Li, Gong, Chen, arXiv 2503.22988): dynamic clipping from a DP histogram of per-sample norms.

Algorithm 1 (one step :math:`t`, with the ids of the book's Readings chapter in brackets):

.. math::

    \tilde g_t &= \frac1B\Big(\sum_{i\in\mathcal B_t}\mathrm{Clip}(g_{t,i}, C_t)
        + \mathcal N(0, \sigma_T^2C_t^2I_d)\Big)
        \qquad\text{(l.8, } \sigma_T \text{ and } C_t \text{ [DCSGD-3])},\\
    \tilde H_t &= \mathrm{BuildHistogram}\big(\{\lVert g_{t,i}\rVert\}, R_t, b, \sigma_H\big)
        \qquad\text{(l.10, unclipped norms [DCSGD-2])},\\
    (C_{t+1}, R_{t+1}) &= \mathrm{Adaptive}(\tilde H_t, C_t, R_t, \ldots)
        \qquad\text{(l.11: Alg. 3 "P" or Alg. 4 "E")},\\
    \sigma_T &= \big(\sigma^{-2} - \sigma_H^{-2}\big)^{-1/2}
        \qquad\text{(Eq. 5, needs } \sigma_H > \sigma\text{)}.

The gradient and the histogram are released on the same Poisson batch: one Gaussian mechanism on the rescaled
pair, with noise multiplier exactly :math:`\sigma` (Theorem 2). So the step declares two releases (``releases()``:
the gradient at :math:`\sigma_T`, noise std :math:`\sigma_T C_t`, and the histogram at :math:`\sigma_H`), and the
accountant sees their composition :math:`\sigma_{\mathrm{eff}}(\sigma_T, \sigma_H) = \sigma`
(``noise_multiplier()``, up to rounding). The new threshold and range are computed in ``release`` from the NOISY
histogram only (post-processing) and take effect at the next step (``advance``): re-clipping the current batch
would break Theorem 2 and micro-batching (Sec. III-A).

The threshold rules are plain functions of a histogram, so that the notebooks call exactly what the methods
call, on synthetic norms and without a model:

- :func:`percentile_threshold` (Algorithm 3, DC-SGD-P), with :math:`R_{t+1} = 2C_{t+1}`;
- :func:`expected_errors` (Eq. 4 estimated from the histogram), :func:`expected_error_threshold` (Algorithm 4
  l.1-13, DC-SGD-E) and :func:`expected_error_range` (Algorithm 4 l.14-16);
- :func:`expected_errors_from_norms` (Eq. 4 with the raw norms of a batch: non-private, for analysis only).

Readings of the paper's gaps (ids of the book's Readings chapter, ``book/readings_dcsgd.md``):

- [DCSGD-7] bin index :math:`\min(b-1, \lfloor b\lVert g_i\rVert/R_t\rfloor)`, overflow in the last bin
  (:mod:`dpbook.histogram`).
- [DCSGD-9] a bin is represented by its midpoint :math:`(k + 1/2)R_t/b`.
- [DCSGD-18] the noisy counts are used raw (they may be negative); the noisy total is guarded,
  :math:`S' = \max(S', 1)`. In Algorithm 3, when the running sum never reaches :math:`pS'` (possible only when the
  raw total is below one example), the loop ends at the last bin, as the pseudo-code's loop does.
- [DCSGD-17] Algorithm 4's "while True" re-centring stops after ``max_repeats`` (20) re-centrings, or when the
  threshold reaches the positive floor ``min_threshold``; the step's diagnostics report ``E_capped = 1`` then
  (and the module logs it at INFO level). The floor also bounds :math:`C_t` and :math:`R_t` of both rules from
  below. A capped search means the noisy histogram is degenerate: its counts are dominated by noise (small
  :math:`B`, large :math:`\sigma_H`), the estimated error keeps falling as :math:`C'` shrinks, and the boundary
  candidate would be a threshold of about ``min_threshold`` that zeroes every gradient for the rest of training.
  DC-SGD-E then keeps its previous threshold, :math:`C_{t+1} = C_t` (our fallback: it depends on nothing but the
  released histogram, so it is post-processing like the rule itself).
- [DCSGD-13], [DCSGD-14] the range rules use the noisy :math:`S'` and :math:`b` (not the private
  :math:`|\mathcal B_t|`) as if/elif/else; with an odd :math:`b` the right half starts at :math:`\lfloor b/2\rfloor`;
  [DCSGD-15] E's range follows Algorithm 4 (no :math:`R = 2C`).
- [DCSGD-16] P keeps the paper's :math:`R_0 = 1` (it caps :math:`C_1` at :math:`(b - 1/2)/b`); E uses
  :math:`R_0 = b`.
- [DCSGD-11] Eq. 4's variance uses :math:`\sigma_T`, the expected batch size :math:`B` and :math:`d`, the number of
  trainable parameters.

Example (one step of DC-SGD-E through the engine):

    >>> import torch
    >>> from torch import nn
    >>> from dpbook.optim import DPOptimizer
    >>> torch.manual_seed(0) and None
    >>> model = nn.Linear(4, 3)
    >>> engine = DPOptimizer(model, torch.optim.Adam(model.parameters()), DCSGDE(sigma=1.0), sample_rate=0.1,
    ...                      expected_batch_size=16)
    >>> info = engine.step(torch.randn(16, 4), torch.randint(0, 3, (16,)))
    >>> info["C"], info["noise_multiplier"]      # step 0 clips at C_0 = 1; the accountant sees sigma
    (1.0, 1.0)
    >>> engine.method.C == info["C_next"]        # the threshold computed at step 0 is used from step 1 on
    True
"""

from __future__ import annotations

__all__ = [
    "DCSGD", "DCSGDE", "DCSGDP", "N_CANDIDATES", "ThresholdSearch", "candidate_thresholds", "expected_error_range",
    "expected_error_threshold", "expected_errors", "expected_errors_from_norms", "paper_sigma_H",
    "percentile_threshold", "SIGMA_T_GROWTH", "run_sigma_H"
]

import abc
import logging
from typing import NamedTuple, Sequence

import numpy as np
import torch

from dpbook import accounting, checks
from dpbook.histogram import HISTOGRAM_SENSITIVITY, build_histogram, midpoints, noisy_total
from dpbook.methods.base import MicroBatch, Release, ScaledSum
from dpbook.methods.declaration import Declaration
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads, clip_factors

_logger = logging.getLogger(__name__)

N_CANDIDATES = 20  # Algorithm 4 l.5: {i C / 10 : i = 1..20} = 0.1 C, 0.2 C, ..., 2.0 C


# --------------------------------------------------------------------------------------------------------------
# Algorithm 3: the percentile rule (DC-SGD-P)
# --------------------------------------------------------------------------------------------------------------

def percentile_threshold(H, R: float, p: float) -> float:
    r"""Algorithm 3 l.1-6: the midpoint of the first bin where the running noisy count reaches :math:`pS'`.

    ``H`` is the (noisy) histogram over :math:`[0, R)` with overflow in the last bin; ``p`` in :math:`(0, 1)` is the
    fraction of examples to leave unclipped [DCSGD-8]. The caller sets :math:`R_{t+1} = 2C_{t+1}` (l.7).

        >>> percentile_threshold([1, 1, 1, 1], R=4.0, p=0.5)   # S reaches 0.5 * 4 in bin 1, midpoint 1.5
        1.5
        >>> percentile_threshold([0, 0, 0, 10], R=4.0, p=0.1)  # everything overflows: the last midpoint
        3.5
    """
    H = np.asarray(H, dtype=np.float64)
    p = checks.open_unit("p (fraction of examples left unclipped)", p)
    b = len(H)
    S_prime = noisy_total(H)  # l.2, guarded S' = max(S', 1) [DCSGD-18]
    S = np.cumsum(H)  # l.4: the running sum of the raw noisy counts
    reached = np.flatnonzero(S >= p * S_prime)  # l.6: the break test
    k = int(reached[0]) if reached.size else b - 1  # no break: the loop ends at the last bin
    return (k + 0.5) * R / b  # l.5: the bin's midpoint [DCSGD-9]


# --------------------------------------------------------------------------------------------------------------
# Algorithm 4: the expected-squared-error rule (DC-SGD-E)
# --------------------------------------------------------------------------------------------------------------

def candidate_thresholds(C: float) -> np.ndarray:
    r"""Algorithm 4 l.5: the 20 candidates :math:`\{iC/10 : i = 1, \ldots, 20\} = \{0.1C, \ldots, 2.0C\}`.

        >>> candidate_thresholds(1.0)[[0, 9, 19]].tolist()
        [0.1, 1.0, 2.0]
    """
    return np.arange(1, N_CANDIDATES + 1) * C / 10


def expected_errors(H, R: float, C, *, sigma_T: float, B: float, d: int) -> np.ndarray:
    r"""Eq. 4 estimated from the histogram (Algorithm 4 l.7-9) at each threshold :math:`C'` of ``C``:

    .. math::

        E(C') = \underbrace{\frac{\sigma_T^2C'^2d}{B^2}}_{\text{variance (l.8) [DCSGD-11]}}
            + \underbrace{\frac1{S'}\sum_k\tilde H[k]\max(m_k - C', 0)^2}_{
                \text{clipping bias (l.7, the paper's "B" [DCSGD-10])}}

    with the bin midpoints :math:`m_k`. With non-negative counts this is a convex function of :math:`C'` (a sum of
    convex functions).

        >>> expected_errors([0, 0, 4, 0], R=4.0, C=[1.0, 2.5, 3.0], sigma_T=1.0, B=2.0, d=4).tolist()
        [3.25, 6.25, 9.0]
    """
    H = np.asarray(H, dtype=np.float64)
    C = np.atleast_1d(np.asarray(C, dtype=np.float64))
    m = midpoints(R, len(H))
    variance = sigma_T ** 2 * d / B ** 2 * C ** 2
    bias = np.maximum(m[None, :] - C[:, None], 0.0) ** 2 @ H / noisy_total(H)
    return variance + bias


def expected_errors_from_norms(norms, C, *, sigma_T: float, B: float, d: int) -> np.ndarray:
    r"""Eq. 4 with the raw norms of one batch (non-private: for plots and tests, never for training):

    .. math::

        E(C') = \frac{\sigma_T^2C'^2d}{B^2} + \frac1{|\mathcal B_t|}\sum_j\max(\lVert g_j\rVert - C', 0)^2

    The paper's "true" curves of Figs. 3 and 4. An empty batch has no bias term.
    """
    G = np.asarray(norms, dtype=np.float64).ravel()
    C = np.atleast_1d(np.asarray(C, dtype=np.float64))
    variance = sigma_T ** 2 * d / B ** 2 * C ** 2
    bias = (np.maximum(G[None, :] - C[:, None], 0.0) ** 2).mean(1) if G.size else np.zeros_like(C)
    return variance + bias


class ThresholdSearch(NamedTuple):
    """Result of :func:`expected_error_threshold`."""

    C: float  # C_{t+1}
    repeats: int  # number of re-centrings (l.11)
    capped: bool  # stopped at the repeat cap or at the floor with the argmin still on the boundary [DCSGD-17]
    centre: float  # the centre of the last candidate grid (its spacing is centre / 10)


def expected_error_threshold(H, C: float, R: float, *, sigma_T: float, B: float, d: int, max_repeats: int = 20,
                             min_threshold: float = 1e-8) -> ThresholdSearch:
    r"""Algorithm 4 l.1-13: the argmin of :func:`expected_errors` over the candidates around ``C``, re-centred.

    When the argmin is a boundary candidate (:math:`0.1C` or :math:`2C`) it becomes the new centre and the search
    repeats (l.11): :math:`\times 10` down or :math:`\times 2` up per repeat. The paper's loop has no exit other than
    an interior argmin; with negative noisy counts it can shrink forever, so it stops after ``max_repeats``
    re-centrings or once the threshold reaches the positive floor ``min_threshold`` [DCSGD-17]. Ties go to the
    smallest candidate.

        >>> H = [0, 0, 0, 0, 0, 0, 0, 0, 256, 0]     # 256 norms in [8, 9): E(C') is least near 8.37
        >>> expected_error_threshold(H, C=1.0, R=10.0, sigma_T=1.0, B=256, d=1000)  # 1 -> 2 -> 4 -> 8, then 8.8
        ThresholdSearch(C=8.8, repeats=3, capped=False, centre=8.0)
        >>> expected_error_threshold([0, 0], C=1.0, R=1.0, sigma_T=1.0, B=1, d=1, max_repeats=3)  # no data
        ThresholdSearch(C=0.0001, repeats=3, capped=True, centre=0.001)
    """
    H = np.asarray(H, dtype=np.float64)
    C = checks.positive("C (current clipping threshold)", C)
    max_repeats = checks.integer("max_repeats", max_repeats, minimum=0)
    repeats = 0
    while True:
        S = candidate_thresholds(C)  # l.5
        k = int(np.argmin(expected_errors(H, R, S, sigma_T=sigma_T, B=B, d=d)))  # l.6-10
        C_new = max(float(S[k]), min_threshold)
        if 0 < k < N_CANDIDATES - 1:  # l.12: an interior argmin ends the search
            return ThresholdSearch(C_new, repeats, False, C)
        if repeats == max_repeats or C_new == C:  # [DCSGD-17]: the cap, or stuck at the floor
            _logger.info("DC-SGD-E: re-centring stopped after %d repeats at C = %g [DCSGD-17]", repeats, C_new)
            return ThresholdSearch(C_new, repeats, True, C)
        C, repeats = C_new, repeats + 1  # l.11: boundary, re-centre and repeat


def expected_error_range(H, R: float) -> float:
    r"""Algorithm 4 l.14-16, the "cautious" range update, on the noisy histogram only [DCSGD-13, DCSGD-14]:

        .. math::

            R_{t+1} = \begin{cases}
                2R_t & \text{if } \tilde H[b-1] \ge S'/2 \quad\text{(too many outliers)},\\
                R_t/2 & \text{else if } \sum_{k\ge\lfloor b/2\rfloor}\tilde H[k] \le S'/b
                    \quad\text{(right half almost empty)},\\
                R_t & \text{otherwise}.
            \end{cases}

        >>> expected_error_range([0, 0, 1, 9], R=4.0), expected_error_range([9, 1, 0, 0], R=4.0)
        (8.0, 2.0)
    """
    H = np.asarray(H, dtype=np.float64)
    b = len(H)
    S_prime = noisy_total(H)  # [DCSGD-18]
    if H[b - 1] >= 0.5 * S_prime:
        return 2.0 * R
    if H[b // 2:].sum() <= S_prime / b:
        return 0.5 * R
    return R


def paper_sigma_H(sigma: float) -> float:
    r"""The paper's histogram noise multiplier :math:`\sigma_H` for a total multiplier ``sigma`` (Sec. V-C, VI-B;
    [DCSGD-38]).

    5 (the default, for the usual :math:`\sigma < 1.2` and, by our reading, up to :math:`\sigma < 2`), 8 for
    :math:`2 \le \sigma \le 3` and 12 for :math:`\sigma > 3`. The paper states the 8/12 override for DC-SGD-P; we read
    it for E as well. Beyond :math:`\sigma = 12` there is no rule (:math:`\sigma_H` must exceed :math:`\sigma`).

        >>> [paper_sigma_H(s) for s in (1.0, 2.5, 4.0)]
        [5.0, 8.0, 12.0]
    """
    sigma = checks.positive("sigma", sigma)
    return 5.0 if sigma < 2 else 8.0 if sigma <= 3 else 12.0


#: The largest growth of :math:`\sigma_T` over :math:`\sigma` that :func:`run_sigma_H` accepts from the paper's rule.
SIGMA_T_GROWTH = 1.1


def run_sigma_H(sigma: float) -> float:
    r""":math:`\sigma_H` for a run at total multiplier :math:`\sigma`: the paper's rule, extended where it stops making
    sense [DCSGD-38].

    :func:`paper_sigma_H` keeps :math:`\sigma_T` within 10% of :math:`\sigma` for every :math:`\sigma` up to about 5
    (its largest value, 12, gives :math:`\sigma_T = 1.10\,\sigma` at :math:`\sigma = 5`), which covers the paper's
    experiments. Above, the rule would let :math:`\sigma_T` grow without bound (at :math:`\sigma = 11`,
    :math:`\sigma_H = 12` gives :math:`\sigma_T = 2.5\,\sigma`) and fails for :math:`\sigma \ge 12`. There we follow the
    paper's own principle (Sec. VI-C, on Fig. 7: "one only needs to choose :math:`\sigma_H` by ensuring that it won't
    cause a large increase in :math:`\sigma_T`"), and take the :math:`\sigma_H` that makes
    :math:`\sigma_T = 1.1\,\sigma` exactly: :math:`\sigma/\sqrt{1 - 1/1.1^2}`, about :math:`2.4\,\sigma` (our choice).

        >>> [round(run_sigma_H(s), 3) for s in (1.0, 2.5, 4.0, 8.0)]
        [5.0, 8.0, 12.0, 19.203]
        >>> round(accounting.sigma_T(8.0, run_sigma_H(8.0)) / 8.0, 6)
        1.1
    """
    paper = paper_sigma_H(sigma)
    if paper > sigma and accounting.sigma_T(sigma, paper) <= SIGMA_T_GROWTH * sigma:
        return paper
    return sigma / (1 - SIGMA_T_GROWTH ** -2) ** 0.5


# --------------------------------------------------------------------------------------------------------------
# The methods
# --------------------------------------------------------------------------------------------------------------

class DCSGD(ScaledSum):
    r"""Algorithm 1, shared by DC-SGD-P and DC-SGD-E; a subclass defines the threshold rule :meth:`adapt` only.

    Weight :math:`\min(1, C_t/\lVert g\rVert)`, sensitivity :math:`C_t`, noise std :math:`\sigma_T C_t` on the
    gradient; the histogram has sensitivity 1 and noise std :math:`\sigma_H`. Together they cost DP-SGD at
    :math:`\sigma`.

    Args:
        sigma: the total noise multiplier :math:`\sigma` (what the accountant sees), > 0.
        sigma_H: the histogram's noise multiplier :math:`\sigma_H > \sigma` (default 5, the paper's; see
            :func:`paper_sigma_H`).
        b: number :math:`b` of histogram bins, >= 2 (default 20).
        C_0: initial clipping threshold :math:`C_0` (default 1).
        R_0: initial histogram range :math:`R_0` (default: the rule's, 1 for P and :math:`b` for E).
        min_threshold: positive floor of :math:`C_t` and :math:`R_t` (post-processing, privacy-neutral) [DCSGD-17].

    State (all in :meth:`state_dict`): the step :math:`t`, the threshold :math:`C_t` and range :math:`R_t` of the
    coming step, and the last released noisy histogram with the :math:`C` and :math:`R` it was built at
    (``last_release``).
    """

    @classmethod
    def from_plan(cls, plan, **hyperparameters) -> "DCSGD":
        r"""At the plan's :math:`\sigma`; :math:`\sigma_H`, unless given, follows :func:`run_sigma_H` (the paper's rule
        [DCSGD-38])."""
        hyperparameters.setdefault("sigma_H", run_sigma_H(plan.sigma))
        return cls(sigma=plan.sigma, **hyperparameters)

    def __init__(self, *, sigma: float, sigma_H: float = 5.0, b: int = 20, C_0: float = 1.0,
                 R_0: float | None = None, min_threshold: float = 1e-8):
        super().__init__()
        self.sigma = checks.positive("sigma (total noise multiplier)", sigma)
        self.sigma_H = checks.positive("sigma_H (histogram noise multiplier)", sigma_H)
        if not self.sigma_H > self.sigma:
            raise ValueError(
                f"sigma_H must exceed sigma: sigma_T = (sigma^-2 - sigma_H^-2)^(-1/2) (DC-SGD Eq. (5)) is undefined "
                f"otherwise, got sigma_H={sigma_H!r}, sigma={sigma!r} (the paper uses sigma_H = 5, 8 or 12: "
                f"paper_sigma_H(sigma) = {paper_sigma_H(self.sigma)})")
        self.b = checks.integer("b (number of histogram bins)", b, minimum=2)
        self.C = checks.positive("C_0 (initial clipping threshold)", C_0)
        self.R = checks.positive("R_0 (initial histogram range)", self.default_R_0() if R_0 is None else R_0)
        self.min_threshold = checks.positive("min_threshold (floor of C_t and R_t)", min_threshold)
        self.sigma_T = accounting.sigma_T(self.sigma, self.sigma_H)  # Alg. 1 l.2, Eq. (5)
        self.last_release: dict | None = None  # {"H": noisy histogram, "C": C_t, "R": R_t} of the last step
        self._next: tuple[float, float] | None = None  # (C_{t+1}, R_{t+1}), computed in release
        self._step_info: dict[str, float] = {}

    @abc.abstractmethod
    def default_R_0(self) -> float:
        """The paper's initial range :math:`R_0` of the rule."""

    @abc.abstractmethod
    def adapt(self, H: np.ndarray) -> tuple[float, float, dict[str, float]]:
        """``(C_next, R_next, diagnostics)``: :math:`C_{t+1}` and :math:`R_{t+1}` from the noisy histogram ``H`` built
        over :math:`[0, R_t)`, both at least ``min_threshold`` [DCSGD-17]."""

    # --- declarations -------------------------------------------------------------------------------
    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        return clip_factors(norms, self.C)  # Clip(g, C_t)

    def sensitivity(self) -> float:
        return self.C  # of the gradient sum

    def releases(self) -> tuple[Release, ...]:
        r"""The clipped sum at :math:`\sigma_T` (Alg. 1 l.8 [DCSGD-3]) and the histogram at :math:`\sigma_H` (Alg. 2
        l.5; one example moves one count by one). Together they cost exactly DP-SGD at :math:`\sigma` (Theorem 2):
        :math:`\sigma_{\mathrm{eff}}(\sigma_T, \sigma_H) = \sigma`, up to rounding."""
        return (Release("gradient", self.C, self.sigma_T),
                Release("histogram", HISTOGRAM_SENSITIVITY, self.sigma_H, in_gradient=False))

    # --- the step -----------------------------------------------------------------------------------
    def start(self, params: Sequence[torch.Tensor]) -> dict:
        acc = super().start(params)
        device = params[0].device if len(params) else torch.device("cpu")
        acc["H"] = torch.zeros(self.b, dtype=torch.float64, device=device)  # exact counts, summed over micro-batches
        acc["unclipped"] = torch.zeros((), dtype=torch.int64, device=device)  # non-private diagnostic only
        return acc

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        super().accumulate(acc, mb)  # sum_i Clip(g_i, C_t)
        acc["H"] += build_histogram(mb.norms, self.R, self.b)  # Alg. 2 l.1-4 on the unclipped norms [DCSGD-2]
        acc["unclipped"] += (mb.norms <= self.C).sum()

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        noisy_sum = super().release(acc, noise)  # Alg. 1 l.8: + N(0, sigma_T^2 C_t^2 I_d), drawn first
        exact = acc["H"].to(device=noise.generator.device, dtype=torch.float64, copy=True)
        H = noise.add_(acc["releases"][1], exact).cpu()  # Alg. 2 l.5: + N(0, sigma_H^2 I_b), drawn second
        C_next, R_next, info = self.adapt(H.numpy())  # Alg. 1 l.11: post-processing of H~ only
        self.last_release = {"H": H, "C": self.C, "R": self.R}
        self._next = (C_next, R_next)
        self._step_info = {"C_next": C_next, "R_next": R_next, **info}
        self._nonprivate = {"nonprivate/unclipped_count": float(acc["unclipped"])}
        return noisy_sum

    def advance(self) -> None:
        super().advance()
        if self._next is not None:  # C_{t+1}, R_{t+1} take effect now, at the next step
            self.C, self.R = self._next
        self._next, self._step_info = None, {}

    # --- state and diagnostics ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        last = None if self.last_release is None else {
            "H": self.last_release["H"].clone(),
            "C": torch.tensor(self.last_release["C"], dtype=torch.float64),
            "R": torch.tensor(self.last_release["R"], dtype=torch.float64),
        }
        return {"t": self.t, "C": torch.tensor(self.C, dtype=torch.float64),
                "R": torch.tensor(self.R, dtype=torch.float64), "last_release": last}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.C, self.R = float(state["C"]), float(state["R"])
        last = state["last_release"]
        self.last_release = None if last is None else {
            "H": last["H"].clone().cpu(), "C": float(last["C"]), "R": float(last["R"])}
        self._next, self._step_info = None, {}

    def diagnostics(self) -> dict[str, float]:
        """``C`` and ``R`` (during a step: the ones used by it), the last noisy histogram's total :math:`S'` and
        overflow count (public), and during a step ``C_next``, ``R_next`` and the rule's own numbers;
        :meth:`nonprivate_diagnostics` gives the exact (non-private) count of unclipped examples."""
        out = {"C": self.C, "R": self.R, "sigma_T": self.sigma_T}
        if self.last_release is not None:
            H = self.last_release["H"]
            out["histogram_total"] = float(H.sum())
            out["histogram_overflow"] = float(H[-1])
        out.update(self._step_info)
        return out


@register("dcsgd-p")
class DCSGDP(DCSGD):
    r"""DC-SGD-P (Algorithm 3): :math:`C_{t+1}` = the noisy histogram's :math:`p`-quantile bin midpoint,
    :math:`R_{t+1} = 2C_{t+1}`.

    One hyperparameter, ``p`` in :math:`(0, 1)`, the fraction of examples left unclipped (paper grid 0.1, ..., 0.9)
    [DCSGD-8]. Defaults from the paper: ``C_0 = 1``, ``sigma_H = 5``, ``b = 20``, ``R_0 = 1`` [DCSGD-16]. Once
    :math:`R_t = 2C_t`, each step multiplies :math:`C` by one of :math:`(2k + 1)/b`, i.e. between 0.05 and 1.95 for
    :math:`b = 20`.

    Example:
        >>> m = DCSGDP(sigma=1.0, p=0.5)
        >>> [(r.name, r.sensitivity, round(r.noise_std, 4)) for r in m.releases()]   # sigma_T * C_0, sigma_H
        [('gradient', 1.0, 1.0206), ('histogram', 1.0, 5.0)]
        >>> m.noise_multiplier(), m.R   # the accountant sees sigma_eff(sigma_T, sigma_H) = sigma
        (1.0, 1.0)
        >>> m.adapt(np.array([0.0, 3, 5, 2] + [0] * 16))[:2]       # the median lies in bin 2 of [0, 1)
        (0.125, 0.25)
    """

    declaration = Declaration(
        label="DC-SGD-P",
        audit=Scenario(dict(sigma=1.0, p=0.5), "C_0 = 1, R_0 = 1: the canary lands in the overflow bin, whose count is "
                       "released with the gradient"),
        run={"p": 0.5})

    def __init__(self, *, sigma: float, p: float, sigma_H: float = 5.0, b: int = 20, C_0: float = 1.0,
                 R_0: float | None = None, min_threshold: float = 1e-8):
        self.p = checks.open_unit("p (fraction of examples left unclipped)", p)
        super().__init__(sigma=sigma, sigma_H=sigma_H, b=b, C_0=C_0, R_0=R_0, min_threshold=min_threshold)

    def default_R_0(self) -> float:
        return 1.0

    def adapt(self, H: np.ndarray) -> tuple[float, float, dict[str, float]]:
        C_next = max(percentile_threshold(H, self.R, self.p), self.min_threshold)  # Alg. 3 l.1-6, floored [DCSGD-17]
        return C_next, 2.0 * C_next, {}  # Alg. 3 l.7: R_{t+1} = 2 C_{t+1}


@register("dcsgd-e")
class DCSGDE(DCSGD):
    r"""DC-SGD-E (Algorithm 4): :math:`C_{t+1}` minimises the expected squared error (Eq. 4) estimated from the
    histogram.

    No hyperparameter to tune. Defaults from the paper: ``C_0 = 1``, ``sigma_H = 5``, ``b = 20``, ``R_0 = b``.
    The variance term uses :math:`\sigma_T`, the expected batch size :math:`B` and the number :math:`d` of trainable
    parameters, all set by :meth:`bind`. ``max_repeats`` caps the re-centring loop [DCSGD-17].

    Example:
        >>> m = DCSGDE(sigma=1.0)
        >>> m.bind([torch.zeros(1000)], expected_batch_size=256)
        >>> H = np.zeros(20); H[8] = 256                     # 256 norms in [8, 9) of the range [0, 20)
        >>> C_next, R_next, info = m.adapt(H)
        >>> round(C_next, 6), R_next, info                   # the right half is almost empty: R halves
        (8.8, 10.0, {'E_repeats': 3.0, 'E_capped': 0.0})
    """

    declaration = Declaration(
        label="DC-SGD-E",
        audit=Scenario(dict(sigma=1.0), "C_0 = 1, R_0 = b = 20: the canary lands in the overflow bin"),
        run={})

    def __init__(self, *, sigma: float, sigma_H: float = 5.0, b: int = 20, C_0: float = 1.0,
                 R_0: float | None = None, max_repeats: int = 20, min_threshold: float = 1e-8):
        self.max_repeats = checks.integer("max_repeats (cap of the re-centring loop)", max_repeats, minimum=0)
        super().__init__(sigma=sigma, sigma_H=sigma_H, b=b, C_0=C_0, R_0=R_0, min_threshold=min_threshold)

    def default_R_0(self) -> float:
        return float(self.b)

    def adapt(self, H: np.ndarray) -> tuple[float, float, dict[str, float]]:
        search = expected_error_threshold(H, self.C, self.R, sigma_T=self.sigma_T, B=self.B, d=self.d,
                                          max_repeats=self.max_repeats, min_threshold=self.min_threshold)
        C_next = self.C if search.capped else search.C  # a degenerate noisy histogram: keep C_t [DCSGD-17]
        R_next = max(expected_error_range(H, self.R), self.min_threshold)  # Alg. 4 l.14-16, floored [DCSGD-17]
        return C_next, R_next, {"E_repeats": float(search.repeats), "E_capped": float(search.capped)}
