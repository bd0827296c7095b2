r"""Auto-S / NSGD (Bu et al. 2023; Yang et al. 2022): per-sample normalisation instead of clipping.

.. math::

    w \leftarrow w - \frac{\eta}{B}\Big(\sum_{i\in\mathcal B_t}\frac{g_i}{\lVert g_i\rVert + \gamma}
        + \sigma\,\mathcal N(0, I_d)\Big) \qquad\text{(DP-PSASC paper, Eqs. 2-3)}

Every scaled gradient has norm :math:`\lVert g\rVert/(\lVert g\rVert + \gamma) < 1`, so the sensitivity is 1 and
the noise std is :math:`\sigma`. The clipping threshold :math:`C` disappears into the learning rate (the
"automatic" in Auto-S). Small gradients get weights up to :math:`1/\gamma`: this is what DP-PSAC and DP-PSASC set
out to temper (``psac.py``). Bu et al. call the stability constant :math:`\gamma` (default 0.01); the DP-PSASC
paper calls it :math:`r` and uses Table II's "Stable Parameter" :math:`r`. The weight itself is
:func:`dpbook.weights.autos_weight`.
"""

from __future__ import annotations

__all__ = ["AutoS"]

import torch

from dpbook import checks, weights
from dpbook.methods.base import ScaledSum
from dpbook.methods.declaration import Declaration
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario


@register("autos")
class AutoS(ScaledSum):
    r"""Auto-S with stability constant ``gamma`` and noise multiplier ``sigma``.

    Weight :math:`1/(\lVert g\rVert + \gamma)`, sensitivity 1 (the scaled norm
    :math:`\lVert g\rVert/(\lVert g\rVert + \gamma)` stays below it), noise std :math:`\sigma`.

    Example:
        >>> m = AutoS(sigma=1.1)
        >>> m.gamma, m.sensitivity(), m.releases()[0].noise_std, m.noise_multiplier()
        (0.01, 1.0, 1.1, 1.1)
        >>> m.weights(torch.tensor([0.0, 0.99, 9.99]))
        tensor([100.0000,   1.0000,   0.1000])
    """

    declaration = Declaration(
        label="Auto-S/NSGD",
        audit=Scenario(dict(sigma=1.0), "stateless; the canary's weight 1/(10^6 + gamma) gives it norm 1 - 1e-8"),
        run={})

    def __init__(self, *, sigma: float, gamma: float = 0.01):
        super().__init__()
        self.sigma = checks.non_negative("sigma (noise multiplier)", sigma)
        self.gamma = checks.positive("gamma (Auto-S stability constant)", gamma, "Bu et al. use 0.01")

    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        return weights.autos_weight(norms, gamma=self.gamma)  # Eq. (2)

    def sensitivity(self) -> float:
        return 1.0

    def diagnostics(self) -> dict[str, float]:
        return {"gamma": self.gamma}
