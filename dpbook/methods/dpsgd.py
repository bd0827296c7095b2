"""DP-SGD (Abadi et al. 2016): flat L2 clipping and Gaussian noise.

    g~_t = ( sum_{i in B_t} Clip(g_{t,i}, C) + N(0, sigma^2 C^2 I_d) ) / B          (DC-SGD paper, Eqs. 1-2)
    Clip(g, C) = g / max(1, ||g||_2 / C) = g * min(1, C / ||g||_2)

B is the expected batch size (q = B/N); the accountant sees sigma at every step.
"""

from __future__ import annotations

__all__ = ["DPSGD"]

import torch

from dpbook import checks
from dpbook.methods.base import ScaledSum
from dpbook.methods.declaration import C_GRIDS, DIGITS, MNIST5K, Declaration
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario
from dpbook.per_sample import clip_factors
from dpbook.tuning import grid_product


@register("dpsgd")
class DPSGD(ScaledSum):
    """DP-SGD with clipping threshold ``C`` and noise multiplier ``sigma``.

    Example:
        >>> m = DPSGD(C=1.0, sigma=1.1)
        >>> m.releases(), m.noise_multiplier()
        ((Release(name='gradient', sensitivity=1.0, noise_multiplier=1.1, in_gradient=True),), 1.1)
        >>> m.weights(torch.tensor([0.0, 0.5, 4.0]))
        tensor([1.0000, 1.0000, 0.2500])
    """

    declaration = Declaration(
        label="DP-SGD", colour="#1f77b4", position=0,
        audit=Scenario(dict(C=1.0, sigma=1.0), "stateless"),
        run={"C": 1.0},
        grids={study: grid_product(C=C_GRIDS[study]) for study in (DIGITS, MNIST5K)})

    def __init__(self, *, C: float, sigma: float):
        super().__init__()
        self.C = checks.positive("C (clipping threshold)", C)
        self.sigma = checks.non_negative("sigma (noise multiplier)", sigma)

    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        return clip_factors(norms, self.C)

    def sensitivity(self) -> float:
        return self.C

    def diagnostics(self) -> dict[str, float]:
        return {"C": self.C}
