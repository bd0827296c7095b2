r"""Dynamic DP-SGD (Du, Li, Feng & Chen, "Dynamic differential-privacy preserving SGD", arXiv 2111.00173):
the clipping-threshold schedule only.

The DC-SGD paper uses only Du et al.'s threshold schedule (not their noise schedule), with a constant noise
multiplier :math:`\sigma` under RDP, tuning :math:`C_0` and :math:`\rho_C` (reading DCSGD-43):

.. math::

    C_t &= C_0\,\rho_C^{t/T}, \qquad t = 0, \ldots, T-1
        \quad\text{(decays geometrically from } C_0 \text{ towards } \rho_C C_0\text{)},\\
    \tilde g_t &= \frac1B\Big(\sum_{i\in\mathcal B_t}\mathrm{Clip}(g_{t,i}, C_t)
        + \mathcal N(0, \sigma^2C_t^2I_d)\Big).

Why the exponent is read as :math:`+t/T`, a decay, although the DC-SGD paper never writes the formula [DCSGD-43]:
its grid is :math:`\rho_C \in \{0.1, \ldots, 0.9\}`, all below 1, and its motivation is that per-sample norms
shrink during training (its Fig. 8), so the threshold should shrink with them. The other sign,
:math:`\rho_C^{-t/T}`, would *grow* the threshold for every :math:`\rho_C` of the grid. The notebook
``dcsgd_synthetic_norms_simulator`` plots both readings.

The schedule depends on :math:`t` only, never on data, so the run costs exactly DP-SGD at :math:`(\sigma, q, T)`.
The state is the step counter :math:`t` alone; past :math:`T` the decay simply continues.
"""

from __future__ import annotations

__all__ = ["dynamic_threshold", "DynamicClipping"]

from dpbook import checks
from dpbook.methods.declaration import Declaration
from dpbook.methods.dpsgd import DPSGD
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario, at_step


def dynamic_threshold(t: int, *, C_0: float, rho_C: float, T: int) -> float:
    r""":math:`C_t = C_0\,\rho_C^{t/T}` [DCSGD-43].

        >>> [round(dynamic_threshold(t, C_0=2.0, rho_C=0.25, T=4), 4) for t in range(5)]
        [2.0, 1.4142, 1.0, 0.7071, 0.5]
    """
    return C_0 * rho_C ** (t / T)


@register("dynamic")
class DynamicClipping(DPSGD):
    r"""Du et al.'s decaying threshold :math:`C_t = C_0\,\rho_C^{t/T}` with noise std :math:`\sigma C_t`; the
    accountant sees :math:`\sigma`.

    DP-SGD whose ``C`` follows the schedule: weight :math:`\min(1, C_t/\lVert g\rVert)`, sensitivity :math:`C_t`.
    ``C`` is set from the step counter :math:`t` at every ``advance`` (and on ``load_state_dict``), never from data.

    Args:
        sigma: noise multiplier :math:`\sigma`, >= 0.
        C_0: initial threshold :math:`C_0`, > 0 (the DC-SGD paper tunes it on its :math:`C` grid).
        rho_C: the threshold at step :math:`T` relative to :math:`C_0`, :math:`\rho_C > 0` (grid 0.1, ..., 0.9; 1 is
            DP-SGD).
        T: the total number :math:`T` of steps of the run, >= 1 (e.g. ``Trainer.T``).

    Example:
        >>> m = DynamicClipping(sigma=1.0, C_0=1.0, rho_C=0.5, T=100)
        >>> m.C, m.releases()[0].noise_std
        (1.0, 1.0)
        >>> for _ in range(50):
        ...     m.advance()
        >>> round(m.C, 6), m.noise_multiplier()
        (0.707107, 1.0)
    """

    declaration = Declaration(
        label="Du et al.",
        audit=Scenario(dict(sigma=1.0, C_0=1.0, rho_C=0.5, T=10), "step t = 5 of T = 10, C_t = 0.71 (the schedule is "
                       "public; the noise scales with C_t, so every t is alike)", prepare=at_step(5)),
        run={"C_0": 1.0, "rho_C": 0.5})

    @classmethod
    def from_plan(cls, plan, **hyperparameters) -> "DynamicClipping":
        """The schedule runs over the plan's T steps: ``from_plan(plan, C_0=..., rho_C=...)``."""
        return cls(sigma=plan.sigma, T=plan.steps, **hyperparameters)

    def __init__(self, *, sigma: float, C_0: float, rho_C: float, T: int):
        super().__init__(C=checks.positive("C_0 (initial clipping threshold)", C_0), sigma=sigma)
        self.C_0 = self.C
        self.rho_C = checks.positive("rho_C (threshold decay over the run)", rho_C)
        self.T = checks.integer("T (total number of steps)", T)

    def _follow_schedule(self) -> None:
        self.C = dynamic_threshold(self.t, C_0=self.C_0, rho_C=self.rho_C, T=self.T)

    def advance(self) -> None:
        super().advance()
        self._follow_schedule()

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._follow_schedule()
