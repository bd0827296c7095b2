r"""Adaptive quantile clipping (Andrew, Thakkar, McMahan & Ramaswamy, NeurIPS 2021), geometric update.

The DC-SGD paper's baseline "Andrew et al." (set up as the DC-SGD paper does: :math:`\sigma_b = B/20`,
:math:`C_0 = 1`), per example instead of per client. At step :math:`t`, with threshold :math:`C_t`, target
unclipped fraction :math:`p` (the paper's :math:`\gamma`) and rate :math:`\eta_C`:

.. math::

    \tilde b_t &= \frac1B\Big(\sum_{i\in\mathcal B_t}\big(\mathbf 1[\lVert g_{t,i}\rVert \le C_t] - \tfrac12\big)
        + \mathcal N(0, \sigma_b^2)\Big) + \frac12, \quad\text{clamped to } [0, 1],\\
    C_{t+1} &= C_t\exp\big(-\eta_C(\tilde b_t - p)\big) \qquad\text{(geometric update)},\\
    \tilde g_t &= \frac1B\Big(\sum_{i\in\mathcal B_t}\mathrm{Clip}(g_{t,i}, C_t)
        + \mathcal N(0, \sigma_\Delta^2C_t^2I_d)\Big),\\
    \sigma_\Delta &= \big(\sigma^{-2} - (2\sigma_b)^{-2}\big)^{-1/2} \qquad\text{(needs } 2\sigma_b > \sigma\text{)}.

Why the indicator is centred by :math:`-1/2`: each example then moves the count by exactly :math:`\pm 1/2`, so the
count has sensitivity 1/2 under add/remove adjacency, i.e. noise multiplier :math:`2\sigma_b`; that is what
:math:`\sigma_\Delta`'s :math:`(2\sigma_b)^{-2}` assumes, and with it the pair (gradient, count) costs exactly
DP-SGD at :math:`\sigma` (the same argument as DC-SGD's Theorem 2). Without the centring an added example moves the
count by 0 or 1 (sensitivity 1), and the split would have to use :math:`\sigma_b`, not :math:`2\sigma_b`.
TF-Privacy's ``QuantileEstimatorQuery`` centres the same way. The :math:`+1/2` after the division uses the
expected :math:`B`, so :math:`\tilde b_t` is unbiased when :math:`|\mathcal B_t| = B`.

Normalisation by the expected batch size :math:`B`, never the realised :math:`|\mathcal B_t|` (privacy hygiene
rule 1): Opacus's ``AdaClipDPOptimizer`` divides the noisy unclipped count by the realised number of examples,
which is private, and it counts without centring while using the :math:`2\sigma_b` split.

Defaults from the DC-SGD paper: ``sigma_b = B/20`` (set when the engine binds B), ``C_0 = 1``; ``p`` and ``eta_C``
are tuned (grids 0.1..0.9 and 0.1..0.3); Andrew et al. recommend ``p = 0.5``, ``eta_C = 0.2``. The new threshold
is computed in ``release`` from the noisy count only and used from the next step on. The accountant sees
:math:`\sigma`.
"""

from __future__ import annotations

__all__ = ["COUNT_SENSITIVITY", "unclipped_fraction", "geometric_update", "AdaClip"]

import math
from typing import Sequence

import torch

from dpbook import accounting, checks
from dpbook.methods.base import MicroBatch, Release, ScaledSum
from dpbook.methods.declaration import Declaration
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads, clip_factors

COUNT_SENSITIVITY = 0.5
r"""One example moves the centred count :math:`\sum_i(\mathbf 1[\lVert g_i\rVert \le C] - 1/2)` by at most 1/2 (added or
removed)."""


def unclipped_fraction(noisy_centred_count: float, B: float) -> float:
    r"""The private estimate :math:`\tilde b` of the unclipped fraction: ``clamp(noisy_centred_count / B + 1/2, 0, 1)``.

    ``noisy_centred_count`` is :math:`\sum_i(\mathbf 1[\lVert g_i\rVert \le C] - 1/2) + \mathcal N(0, \sigma_b^2)`;
    clamping is post-processing.

        >>> unclipped_fraction(64 - 100 / 2, B=100)     # 64 of 100 examples unclipped, no noise
        0.64
    """
    return min(1.0, max(0.0, noisy_centred_count / B + 0.5))


def geometric_update(C: float, b: float, p: float, eta_C: float) -> float:
    r""":math:`C\exp(-\eta_C(b - p))`: grow :math:`C` when fewer than a fraction :math:`p` are unclipped, shrink it
    when more are.

        >>> round(geometric_update(1.0, b=0.9, p=0.5, eta_C=0.2), 6)   # too many unclipped: shrink by e^-0.08
        0.923116
    """
    return C * math.exp(-eta_C * (b - p))


@register("adaclip")
class AdaClip(ScaledSum):
    r"""Andrew et al.'s adaptive clipping: :math:`C_t` tracks the :math:`p`-quantile of the per-sample norms
    (geometric update).

    Weight :math:`\min(1, C_t/\lVert g\rVert)`, sensitivity :math:`C_t`, noise std :math:`\sigma_\Delta C_t` on the
    gradient; the centred count has sensitivity 1/2 and noise std :math:`\sigma_b`. Together they cost DP-SGD at
    :math:`\sigma`.

    Args:
        sigma: the total noise multiplier :math:`\sigma` (what the accountant sees), > 0.
        p: target fraction :math:`p` of examples left unclipped, in [0, 1] (default 0.5).
        eta_C: rate :math:`\eta_C` of the geometric update, >= 0 (default 0.2; 0 keeps :math:`C` fixed).
        C_0: initial threshold :math:`C_0` (default 1).
        sigma_b: std :math:`\sigma_b` of the noise on the centred unclipped count; ``None`` (default) means
            :math:`B/20`, set by :meth:`bind`. Must satisfy :math:`2\sigma_b > \sigma`.

    Example:
        >>> m = AdaClip(sigma=1.0)
        >>> m.bind([torch.zeros(10)], expected_batch_size=256)   # sigma_b = 256/20 = 12.8
        >>> m.sigma_b, round(m.sigma_delta, 5), m.noise_multiplier()
        (12.8, 1.00076, 1.0)
    """

    declaration = Declaration(
        label="Andrew et al.",
        audit=Scenario(dict(sigma=1.0, sigma_b=1.0), "C_t = 1 and a canary of norm exactly C_t: it is counted "
                       "unclipped (+1/2 on the centred count, the most one example moves it) and contributes C_t to "
                       "the sum; half the background is clipped, so the released fraction sits near 1/2, far from its "
                       "clamps",
                       canary_norm=lambda method: method.C),
        run={"p": 0.5, "eta_C": 0.2})

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
        r"""The clipped sum at :math:`\sigma_\Delta`, and the centred unclipped count (sensitivity 1/2) with noise std
        :math:`\sigma_b`, i.e. multiplier :math:`2\sigma_b`: together DP-SGD at :math:`\sigma` (Andrew et al.,
        Sec. 3)."""
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
        r""":math:`\tilde b`: the centred unclipped count plus :math:`\mathcal N(0, \sigma_b^2)`, over the expected
        :math:`B`, clamped (post-processing)."""
        centred = torch.tensor([int(acc["unclipped"]) - acc["n"] / 2], dtype=torch.float64,
                               device=noise.generator.device)
        return unclipped_fraction(float(noise.add_(acc["releases"][1], centred)[0]), self.B)  # std sigma_b

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
