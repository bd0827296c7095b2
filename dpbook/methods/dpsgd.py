r"""DP-SGD (Abadi et al. 2016): flat L2 clipping and Gaussian noise (the DC-SGD paper, Eqs. 1-2):

.. math::

    \tilde g_t &= \frac1B\Big(\sum_{i\in\mathcal B_t}\mathrm{Clip}(g_{t,i}, C)
        + \mathcal N(0, \sigma^2C^2I_d)\Big),\\
    \mathrm{Clip}(g, C) &= \frac{g}{\max(1, \lVert g\rVert_2/C)} = g\,\min\Big(1, \frac{C}{\lVert g\rVert_2}\Big).

:math:`B` is the expected batch size (:math:`q = B/N`); the accountant sees :math:`\sigma` at every step.
"""

from __future__ import annotations

__all__ = ["DPSGD"]

import torch

from dpbook import checks
from dpbook.methods.base import ScaledSum
from dpbook.methods.declaration import Declaration
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario
from dpbook.per_sample import clip_factors


@register("dpsgd")
class DPSGD(ScaledSum):
    r"""DP-SGD with clipping threshold ``C`` and noise multiplier ``sigma``.

    Weight :math:`\min(1, C/\lVert g\rVert)` (i.e. :math:`\mathrm{Clip}(g, C)`), sensitivity :math:`C`, noise std
    :math:`\sigma C`.

    Example:
        >>> m = DPSGD(C=1.0, sigma=1.1)
        >>> m.releases(), m.noise_multiplier()
        ((Release(name='gradient', sensitivity=1.0, noise_multiplier=1.1, in_gradient=True),), 1.1)
        >>> m.weights(torch.tensor([0.0, 0.5, 4.0]))
        tensor([1.0000, 1.0000, 0.2500])
    """

    declaration = Declaration(
        label="DP-SGD",
        audit=Scenario(dict(C=1.0, sigma=1.0), "stateless"),
        run={"C": 1.0})

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
