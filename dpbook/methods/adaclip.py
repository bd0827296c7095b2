"""Adaptive quantile clipping (Andrew, Thakkar, McMahan & Ramaswamy, NeurIPS 2021), geometric update.

The DC-SGD paper's baseline "Andrew et al." (set up as the DC-SGD paper does: sigma_b = B/20, C_0 = 1), per
example instead of per client. At step t, with threshold C_t, target unclipped fraction p (the paper's gamma)
and rate eta_C:

    b~_t    = ( sum_{i in B_t} (1[||g_{t,i}|| <= C_t] - 1/2) + N(0, sigma_b^2) ) / B + 1/2,  clamped to [0, 1]
    C_{t+1} = C_t exp(-eta_C (b~_t - p))                                                   (geometric update)
    g~_t    = ( sum_{i in B_t} Clip(g_{t,i}, C_t) + N(0, sigma_Delta^2 C_t^2 I_d) ) / B
    sigma_Delta = (sigma^-2 - (2 sigma_b)^-2)^(-1/2)                                       (needs 2 sigma_b > sigma)

Why the indicator is centred by -1/2: each example then moves the count by exactly +-1/2, so the count has
sensitivity 1/2 under add/remove adjacency, i.e. noise multiplier 2 sigma_b; that is what sigma_Delta's
``(2 sigma_b)^-2`` assumes, and with it the pair (gradient, count) costs exactly DP-SGD at sigma (the same
argument as DC-SGD's Theorem 2). Without the centring an added example moves the count by 0 or 1 (sensitivity 1),
and the split would have to use sigma_b, not 2 sigma_b. TF-Privacy's ``QuantileEstimatorQuery`` centres the same
way. The ``+ 1/2`` after the division uses the expected B, so b~_t is unbiased when ``|B_t| = B``.

Normalisation by the expected batch size B, never the realised ``|B_t|`` (privacy hygiene rule 1): Opacus's
``AdaClipDPOptimizer`` divides the noisy unclipped count by the realised number of examples, which is private,
and it counts without centring while using the ``2 sigma_b`` split.

Defaults from the DC-SGD paper: ``sigma_b = B/20`` (set when the engine binds B), ``C_0 = 1``; ``p`` and ``eta_C``
are tuned (grids 0.1..0.9 and 0.1..0.3); Andrew et al. recommend ``p = 0.5``, ``eta_C = 0.2``. The new threshold
is computed in ``release`` from the noisy count only and used from the next step on. The accountant sees sigma.
"""

from __future__ import annotations

__all__ = ["COUNT_SENSITIVITY", "unclipped_fraction", "geometric_update", "AdaClip"]

import math
from typing import Sequence

import torch

from dpbook import accounting, checks
from dpbook.methods.base import MicroBatch, Release, ScaledSum
from dpbook.methods.declaration import DIGITS, MNIST5K, Declaration
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads, clip_factors
from dpbook.tuning import grid_product

COUNT_SENSITIVITY = 0.5
"""One example moves the centred count ``sum_i (1[||g_i|| <= C] - 1/2)`` by at most 1/2 (added or removed)."""


def unclipped_fraction(noisy_centred_count: float, B: float) -> float:
    """``b~ = clamp(noisy_centred_count / B + 1/2, 0, 1)``: the private estimate of the unclipped fraction.

    ``noisy_centred_count`` is ``sum_i (1[||g_i|| <= C] - 1/2) + N(0, sigma_b^2)``; clamping is post-processing.

        >>> unclipped_fraction(64 - 100 / 2, B=100)     # 64 of 100 examples unclipped, no noise
        0.64
    """
    return min(1.0, max(0.0, noisy_centred_count / B + 0.5))


def geometric_update(C: float, b: float, p: float, eta_C: float) -> float:
    """``C exp(-eta_C (b - p))``: grow C when fewer than a fraction p are unclipped, shrink it when more are.

        >>> round(geometric_update(1.0, b=0.9, p=0.5, eta_C=0.2), 6)   # too many unclipped: shrink by e^-0.08
        0.923116
    """
    return C * math.exp(-eta_C * (b - p))


@register("adaclip")
class AdaClip(ScaledSum):
    """Andrew et al.'s adaptive clipping: C_t tracks the p-quantile of the per-sample norms (geometric update).

    Args:
        sigma: the total noise multiplier (what the accountant sees), > 0.
        p: target fraction of examples left unclipped, in [0, 1] (default 0.5).
        eta_C: rate of the geometric update, >= 0 (default 0.2; 0 keeps C fixed).
        C_0: initial threshold (default 1).
        sigma_b: std of the noise on the centred unclipped count; ``None`` (default) means B/20, set by
            :meth:`bind`. Must satisfy ``2 sigma_b > sigma``.

    Example:
        >>> m = AdaClip(sigma=1.0)
        >>> m.bind([torch.zeros(10)], expected_batch_size=256)   # sigma_b = 256/20 = 12.8
        >>> m.sigma_b, round(m.sigma_delta, 5), m.noise_multiplier()
        (12.8, 1.00076, 1.0)
    """

    declaration = Declaration(
        label="Andrew et al.", colour="#2ca02c", position=30,
        audit=Scenario(dict(sigma=1.0, sigma_b=1.0), "C_t = 1 and a canary of norm exactly C_t: it is counted "
                       "unclipped (+1/2 on the centred count, the most one example moves it) and contributes C_t to "
                       "the sum; half the background is clipped, so the released fraction sits near 1/2, far from its "
                       "clamps",
                       canary_norm=lambda method: method.C),
        run={"p": 0.5, "eta_C": 0.2},
        grids={DIGITS: grid_product(p=(0.2, 0.4, 0.5, 0.6, 0.8, 0.9), eta_C=(0.1, 0.2, 0.3)),
               MNIST5K: grid_product(p=(0.2, 0.5, 0.8), eta_C=(0.1, 0.2, 0.3))})

    def __init__(self, *, sigma: float, p: float = 0.5, eta_C: float = 0.2, C_0: float = 1.0,
                 sigma_b: float | None = None):
        super().__init__()
        self.sigma = checks.positive("sigma (total noise multiplier)", sigma)
        self.p = checks.closed_unit("p (target unclipped fraction)", p)
        self.eta_C = checks.non_negative("eta_C (threshold learning rate)", eta_C)
        self.C = checks.positive("C_0 (initial clipping threshold)", C_0)
        self.sigma_b_arg = None if sigma_b is None else checks.positive("sigma_b (unclipped-count noise std)", sigma_b)
        self.sigma_b: float | None = None
        self.sigma_delta: float | None = None
        if sigma_b is not None:
            self._split(self.sigma_b_arg)
        self.last_fraction: float | None = None  # the released b~ of the last step (public)
        self._next: float | None = None
        self._step_info: dict[str, float] = {}

    def _split(self, sigma_b: float) -> None:
        self.sigma_b = sigma_b
        self.sigma_delta = accounting.sigma_delta(self.sigma, sigma_b)  # raises unless 2 sigma_b > sigma

    def bind(self, params: Sequence[torch.Tensor], *, expected_batch_size: float) -> None:
        super().bind(params, expected_batch_size=expected_batch_size)
        if self.sigma_b_arg is None:
            self._split(self.B / 20)  # the DC-SGD paper's setting sigma_b = B/20

    # --- declarations -------------------------------------------------------------------------------
    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        return clip_factors(norms, self.C)  # Clip(g, C_t)

    def sensitivity(self) -> float:
        return self.C  # of the gradient sum

    def releases(self) -> tuple[Release, ...]:
        """The clipped sum at sigma_Delta, and the centred unclipped count (sensitivity 1/2) with noise std sigma_b,
        i.e. multiplier 2 sigma_b: together DP-SGD at sigma (Andrew et al., Sec. 3)."""
        if self.sigma_delta is None:
            raise RuntimeError("AdaClip: sigma_b defaults to B/20, so bind() (done by the engine) must come first")
        return (Release("gradient", self.C, self.sigma_delta),
                Release("unclipped count", COUNT_SENSITIVITY, self.sigma_b / COUNT_SENSITIVITY, in_gradient=False))

    # --- the step -----------------------------------------------------------------------------------
    def start(self, params: Sequence[torch.Tensor]) -> dict:
        acc = super().start(params)
        device = params[0].device if len(params) else torch.device("cpu")
        acc["unclipped"] = torch.zeros((), dtype=torch.int64, device=device)
        return acc

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        super().accumulate(acc, mb)
        acc["unclipped"] += (mb.norms <= self.C).sum()  # 1[||g_i|| <= C_t]

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        noisy_sum = super().release(acc, noise)  # + N(0, sigma_Delta^2 C_t^2 I_d), drawn first
        b = self.released_fraction(acc, noise)  # drawn second
        self._next = geometric_update(self.C, b, self.p, self.eta_C)
        self.last_fraction = b
        self._step_info = {"C_next": self._next, "unclipped_fraction": b}
        self._nonprivate = {"nonprivate/unclipped_count": float(acc["unclipped"])}
        return noisy_sum

    def released_fraction(self, acc: dict, noise: GaussianNoise) -> float:
        """b~: the centred unclipped count plus N(0, sigma_b^2), over the expected B, clamped (post-processing)."""
        centred = torch.tensor([int(acc["unclipped"]) - acc["n"] / 2], dtype=torch.float64,
                               device=noise.generator.device)
        std = self.releases()[1].noise_std  # sigma_b
        return unclipped_fraction(float((centred + noise.like(centred, std))[0]), self.B)

    def advance(self) -> None:
        super().advance()
        if self._next is not None:
            self.C = self._next
        self._next, self._step_info = None, {}

    # --- state and diagnostics ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"t": self.t, "C": torch.tensor(self.C, dtype=torch.float64),
                "last_fraction": None if self.last_fraction is None else torch.tensor(self.last_fraction,
                                                                                      dtype=torch.float64)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.C = float(state["C"])
        self.last_fraction = None if state["last_fraction"] is None else float(state["last_fraction"])
        self._next, self._step_info = None, {}

    def diagnostics(self) -> dict[str, float]:
        """``C`` (during a step: the one it used), the last released unclipped fraction, and during a step
        ``C_next``; :meth:`nonprivate_diagnostics` gives the exact (non-private) count of unclipped examples."""
        out = {"C": self.C}
        if self.last_fraction is not None:
            out["unclipped_fraction"] = self.last_fraction
        out.update(self._step_info)
        return out
