"""Dynamic DP-SGD (Du, Li, Feng & Chen, "Dynamic differential-privacy preserving SGD", arXiv 2111.00173):
the clipping-threshold schedule only.

The DC-SGD paper uses only Du et al.'s threshold schedule (not their noise schedule), with a constant noise
multiplier sigma under RDP, tuning C_0 and rho_C (extraction notes, Sec. 10.3):

    C_t = C_0 rho_C^(t / T)              t = 0, ..., T-1 (decays geometrically from C_0 towards rho_C C_0)
    g~_t = ( sum_{i in B_t} Clip(g_{t,i}, C_t) + N(0, sigma^2 C_t^2 I_d) ) / B

Why the exponent is read as +t/T, a decay, although the DC-SGD paper never writes the formula [F-43]: its grid
is rho_C in {0.1, ..., 0.9}, all below 1, and its motivation is that per-sample norms shrink during training
(its Fig. 8), so the threshold should shrink with them; the community code of the original experiments writes
``clip = C0 * decay**step`` with ``decay = exp(log(rho) / T)``, the same schedule. A JAX community port writes
rho_C^(-t/T) instead, which *grows* the threshold for rho_C < 1; we do not follow it. The notebook
``dcsgd_synthetic_norms`` plots both readings.

The schedule depends on t only, never on data, so the run costs exactly DP-SGD at (sigma, q, T). The state is the
step counter t alone; past T the decay simply continues.
"""

from __future__ import annotations

import torch

from dpbook import checks
from dpbook.methods.base import ScaledSum
from dpbook.methods.registry import register


def dynamic_threshold(t: int, *, C_0: float, rho_C: float, T: int) -> float:
    """``C_t = C_0 rho_C^(t/T)`` [F-43].

        >>> [round(dynamic_threshold(t, C_0=2.0, rho_C=0.25, T=4), 4) for t in range(5)]
        [2.0, 1.4142, 1.0, 0.7071, 0.5]
    """
    return C_0 * rho_C ** (t / T)


@register("dynamic")
class DynamicClipping(ScaledSum):
    """Du et al.'s decaying threshold ``C_t = C_0 rho_C^(t/T)`` with noise ``sigma C_t``; the accountant sees sigma.

    Args:
        sigma: noise multiplier, >= 0.
        C_0: initial threshold, > 0 (the DC-SGD paper tunes it on its C grid).
        rho_C: the threshold at step T relative to C_0, > 0 (grid 0.1, ..., 0.9; 1 is DP-SGD).
        T: total number of steps of the run, >= 1 (e.g. ``Trainer.T``).

    Example:
        >>> m = DynamicClipping(sigma=1.0, C_0=1.0, rho_C=0.5, T=100)
        >>> m.C, m.noise_std()
        (1.0, 1.0)
        >>> m.t = 50
        >>> round(m.C, 6), m.noise_multiplier()
        (0.707107, 1.0)
    """

    def __init__(self, *, sigma: float, C_0: float, rho_C: float, T: int):
        super().__init__()
        self.sigma = checks.non_negative("sigma (noise multiplier)", sigma)
        self.C_0 = checks.positive("C_0 (initial clipping threshold)", C_0)
        self.rho_C = checks.positive("rho_C (threshold decay over the run)", rho_C)
        self.T = checks.integer("T (total number of steps)", T)

    @property
    def C(self) -> float:
        """The threshold of the coming step t."""
        return dynamic_threshold(self.t, C_0=self.C_0, rho_C=self.rho_C, T=self.T)

    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        return (self.C / norms).clamp(max=1.0)

    def sensitivity(self) -> float:
        return self.C

    def noise_std(self) -> float:
        return self.sigma * self.C

    def noise_multiplier(self) -> float:
        return self.sigma

    def diagnostics(self) -> dict[str, float]:
        return {"C": self.C}
