r"""Privatising gradient *differences*: DIFF (the DPDR paper's strawman, Eq. (1)) and DIFF2 (Murata & Suzuki, 2023).

Both release, at most steps, a clipped and noised *difference* and add back an estimate that was already released
(post-processing), so the sensitivity is the difference's clipping bound :math:`C_d`. Both keep that estimate as
state. They differ in *what* is subtracted.

**DIFF** (DPDR paper, Sec. 4.1, Eq. (1), with the noise inside the :math:`1/B` and the sum over the Poisson batch
[DPDR-6]): subtract the previous *released* gradient from each per-sample gradient:

.. math::

    t = 1&: \quad \tilde g_1 = \frac1B\Big(\sum_i\mathrm{Clip}(g_i, C_g) + \mathcal N(0, \sigma^2C_g^2I)\Big)
        \qquad\text{(DP-SGD; no } \tilde g_0 \text{ exists)},\\
    t \ge 2&: \quad \tilde g_t = \frac1B\Big(\sum_i\mathrm{Clip}(g_i - \tilde g_{t-1}, C_d)
        + \mathcal N(0, \sigma^2C_d^2I)\Big) + \tilde g_{t-1} \qquad\text{(Eq. (1))}.

The paper says neither how step 1 is done nor whether DIFF runs on every step. Our reading: step 1 is DP-SGD
with :math:`C_g` (default :math:`C_g = C_d`), and DIFF runs on every later step, at one :math:`\sigma`. Per-sample
residual norms come from inner products, as in DPDR:
:math:`\lVert g_i - v\rVert^2 = \lVert g_i\rVert^2 - 2\langle g_i, v\rangle + \lVert v\rVert^2` and
:math:`\sum_i c_i(g_i - v) = \sum_i c_ig_i - (\sum_i c_i)v` (no per-sample residual tensor; the same rounding slack
as :mod:`dpbook.methods.dpdr` guards the cancellation).

**DIFF2** (Murata & Suzuki, ICML 2023). The DPDR paper gives no formula for it. It says only (Sec. 2) that this
work "proposes adding noises to the difference of consecutive sanitize[d] gradients on the same batch", that it
"performs well on low dimension datasets", and that "the calculation cost doubles for gradient recomputing". We
implement a running estimator refreshed by DP-SGD every ``restart_every`` steps, our reading of Murata & Suzuki
(whose paper we could not consult offline). On restart steps :math:`t = 1, 1 + R, 1 + 2R, \ldots`:

.. math::

    v_t = \frac1B\Big(\sum_i\mathrm{Clip}\big(\nabla\ell(w_t; x_i), C_g\big)
        + \mathcal N(0, \sigma_{\mathrm{restart}}^2C_g^2I)\Big),

on the other steps:

.. math::

    v_t = v_{t-1} + \frac1B\Big(\sum_i\mathrm{Clip}\big(\nabla\ell(w_t; x_i) - \nabla\ell(w_{t-1}; x_i), C_d\big)
        + \mathcal N(0, \sigma^2C_d^2I)\Big),

and :math:`w_{t+1} = \mathrm{optimizer}(w_t, v_t)`.

Both gradients of a difference are taken on the *same* Poisson batch of step :math:`t` (one release, sensitivity
:math:`C_d`), at the current and at the previous iterate (``MicroBatch.at``): twice the gradient work of
DP-SGD, as the DPDR paper says. What is left open, and made a hyperparameter here [DPDR-25]: the restart period
:math:`R` (``restart_every``), the noise of the restarts against that of the differences (``sigma_restart``;
:meth:`DIFF2.from_plan` takes their ratio and calibrates both to the budget for the run's exact heterogeneous
history) and the clipping bound at restarts (``C_g``, default ``C_d``). DIFF2 was designed for full-batch
distributed learning; this is its single-machine, Poisson-minibatch form.
"""

from __future__ import annotations

__all__ = ["DIFF", "DIFF2", "diff2_history"]

import abc
import functools
import math
from typing import ClassVar, Sequence

import torch

from dpbook import checks
from dpbook.accounting import calibrate
from dpbook.methods.base import Method, MicroBatch, Release
from dpbook.methods.declaration import Declaration
from dpbook.methods.dpdr import rounding_slack
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario, zeros
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads, clip_factors


class _DifferenceMethod(Method):
    """What DIFF and DIFF2 share: DP-SGD on "restart" steps, a clipped difference plus the carried estimate otherwise.

    The carried estimate ``previous`` (``g~_{t-1}`` for DIFF, ``v_{t-1}`` for DIFF2) is kept divided by B, as the
    engine's optimizer sees it; the released *sum* is ``noisy sum of differences + B * previous``.
    """

    #: norms, inner products with the carried estimate (DIFF), differences between two passes (DIFF2) and
    #: re-weighted sums: the engine's Book-Keeping path gives them all
    per_sample_vectors: ClassVar[bool] = False

    def __init__(self, *, C_d: float, sigma: float, C_g: float | None):
        super().__init__()
        self.C_d = checks.positive("C_d (clipping bound of the differences)", C_d)
        self.C_g = self.C_d if C_g is None else checks.positive("C_g (DP-SGD clipping bound)", C_g)
        self.sigma = checks.non_negative("sigma (noise multiplier)", sigma)
        self.sigma_restart = self.sigma  # the restart steps' multiplier (DIFF2 may set its own)
        self.previous: list[torch.Tensor] = []
        self._diagnostics: dict[str, float] = {}

    @property
    def step(self) -> int:
        """The 1-based index of the coming step."""
        return self.t + 1

    @abc.abstractmethod
    def is_restart(self) -> bool:
        """Is the coming step a DP-SGD step (no difference)?"""

    def bind(self, params: Sequence[torch.Tensor], *, expected_batch_size: float) -> None:
        super().bind(params, expected_batch_size=expected_batch_size)
        self.previous = [torch.zeros_like(p, memory_format=torch.contiguous_format).detach() for p in params]

    def releases(self) -> tuple[Release, ...]:
        """One release: DP-SGD's clipped sum (C_g, at ``sigma_restart``) on a restart step, the clipped differences
        (C_d, at ``sigma``) otherwise."""
        if self.is_restart():
            return (Release("gradient", self.C_g, self.sigma_restart),)
        return (Release("difference", self.C_d, self.sigma),)

    def start(self, params: Sequence[torch.Tensor]) -> dict:
        return super().start(params) | {"norm": 0.0, "difference": 0.0, "clipped": 0}

    def _add(self, acc: dict, mb: MicroBatch, c: torch.Tensor, diff_norms: torch.Tensor | None,
             contributions: MicroBatch | None = None):
        r"""Diagnostics of ``mb``, and :math:`\sum_ic_ix_i` of ``contributions`` (default ``mb``) into the sum."""
        acc["n"] += mb.n  # diagnostics are summed as tensors (no device synchronisation) and read in release
        acc["norm"] = acc["norm"] + mb.norms.sum()
        acc["clipped"] = acc["clipped"] + (c < 1).sum()
        if diff_norms is not None:
            acc["difference"] = acc["difference"] + diff_norms.sum()
        for total, part in zip(acc["sum"], (contributions or mb).weighted_sum(c)):
            total.add_(part)

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        restart = self.is_restart()
        noisy = [noise.add_(acc["releases"][0], s) for s in acc["sum"]]
        released = noisy if restart else [s + self.B * v for s, v in zip(noisy, self.previous)]  # + B g~_{t-1}
        self.previous = [r / self.B for r in released]  # the released gradient, as the optimizer sees it
        n = acc["n"]
        mean = (lambda total: float(total) / n) if n else (lambda total: math.nan)
        self._diagnostics = {
            "restart": float(restart),
            "released_norm": float(torch.sqrt(sum(v.pow(2).sum() for v in self.previous))),
        }
        self._nonprivate = {
            "nonprivate/norm": mean(acc["norm"]),
            "nonprivate/clipped_fraction": mean(acc["clipped"]),
            **({} if restart else {"nonprivate/difference_norm": mean(acc["difference"])}),
        }
        return released

    def diagnostics(self) -> dict[str, float]:
        """The bounds, and of the last step ``restart`` (1.0 on DP-SGD steps) and ``released_norm``.

        :meth:`nonprivate_diagnostics` gives, of the last step's raw batch (not private), the means of ``||g_i||``
        and of the (unclipped) difference's norm, and the fraction of examples clipped.
        """
        return {"C_d": self.C_d, "C_g": self.C_g, **self._diagnostics}

    def state_dict(self) -> dict:
        return {"t": self.t, "previous": [v.clone() for v in self.previous]}

    def load_state_dict(self, state: dict) -> None:
        self.t = int(state["t"])
        self.previous = [v.clone() for v in state["previous"]]


def _previous() -> Grads:
    """The audited previous release (divided by B) of DIFF and DIFF2, orthogonal to the canary u = e_0."""
    v = zeros()
    v[1] += 0.1
    return v


def _prepare_diff(method: "DIFF", grads: Grads) -> None:
    method.load_state_dict({"t": 1, "previous": _previous()})


def _prepare_diff2(method: "DIFF2", grads: Grads) -> None:
    method.load_state_dict({"t": 1, "previous": _previous(), "w_previous": zeros()})


@register("diff")
class DIFF(_DifferenceMethod):
    r"""DIFF, the DPDR paper's strawman (Eq. (1)): clip and noise :math:`g_i - \tilde g_{t-1}`, then add
    :math:`\tilde g_{t-1}` back.

    Sensitivity :math:`C_d`, noise std :math:`\sigma C_d` (at step 1, DP-SGD's: :math:`C_g` and :math:`\sigma C_g`).

    Args:
        C_d: clipping bound :math:`C_d` of the residuals :math:`g_i - \tilde g_{t-1}` (the paper tunes it in
            [0.001, 1]).
        sigma: noise multiplier :math:`\sigma`, the same at every step.
        C_g: clipping bound :math:`C_g` of step 1 (DP-SGD; default ``C_d``).

    State: ``t`` and ``previous`` = :math:`\tilde g_{t-1}` (the released gradient, divided by :math:`B`).

    >>> from torch import nn
    >>> from dpbook.optim import DPOptimizer
    >>> torch.manual_seed(0) and None
    >>> model = nn.Linear(3, 2)
    >>> method = DIFF(C_d=0.5, sigma=1.0, C_g=1.0)
    >>> opt = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), method, sample_rate=0.1,
    ...                   expected_batch_size=4)
    >>> method.releases()  # step 1 is DP-SGD
    (Release(name='gradient', sensitivity=1.0, noise_multiplier=1.0, in_gradient=True),)
    >>> _ = opt.step(torch.randn(4, 3), torch.randint(0, 2, (4,)))
    >>> method.releases(), opt.ledger.history
    ((Release(name='difference', sensitivity=0.5, noise_multiplier=1.0, in_gradient=True),), [(1.0, 0.1, 1)])
    """

    declaration = Declaration(
        label="DIFF",
        audit=Scenario(dict(C_d=1.0, sigma=1.0), "step 2 with a previous release orthogonal to u: the canary's "
                       "difference has norm about 10^6", prepare=_prepare_diff),
        run={"C_d": 0.5, "C_g": 1.0})

    def __init__(self, *, C_d: float, sigma: float, C_g: float | None = None):
        super().__init__(C_d=C_d, sigma=sigma, C_g=C_g)
        self._tau = 0.0

    def bind(self, params: Sequence[torch.Tensor], *, expected_batch_size: float) -> None:
        super().bind(params, expected_batch_size=expected_batch_size)
        self._tau = rounding_slack(params[0].dtype, self.d)

    def is_restart(self) -> bool:
        return self.step == 1

    def start(self, params: Sequence[torch.Tensor]) -> dict:
        acc = super().start(params)
        acc["c_total"] = params[0].new_zeros(())  # sum_i c_i, for the correction - (sum_i c_i) g~_{t-1}
        return acc

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        if self.is_restart():  # DP-SGD: sum_i g_i min(1, C_g / ||g_i||)
            self._add(acc, mb, clip_factors(mb.norms, self.C_g), None)
            return
        v = self.previous                                                            # g~_{t-1}
        v_sq = sum(x.pow(2).sum() for x in v)
        inner = mb.inner(v).sum(1)                                                   # <g_i, g~_{t-1}>
        diff_sq = (mb.norms.pow(2) - 2 * inner + v_sq).clamp(min=0)                  # ||g_i - g~_{t-1}||^2
        slack = self._tau * (mb.norms + v_sq.sqrt()).pow(2)                          # rounding guard (dpdr docs)
        c = clip_factors((diff_sq + slack).sqrt(), self.C_d)                     # min(1, C_d/||g_i - g~||)
        acc["c_total"] += c.sum()                                                    # sum_i c_i
        self._add(acc, mb, c, diff_sq.sqrt())

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        if not self.is_restart():  # sum_i c_i (g_i - g~_{t-1}) = sum_i c_i g_i - (sum_i c_i) g~_{t-1}
            acc["sum"] = [s - acc["c_total"] * v for s, v in zip(acc["sum"], self.previous)]
        return super().release(acc, noise)


@functools.lru_cache(maxsize=1024)  # a chapter builds DIFF2 for every C_d of its grid at the same plan
def _difference_sigma(plan, ratio: float, restart_every: int | None) -> float:
    """The sigma of DIFF2's difference steps (restarts at ``ratio * sigma``) whose run, composed as ``plan``
    charges it, spends at most the plan's budget (:meth:`DIFF2.from_plan`)."""

    def epsilon_at(sigma: float) -> float:
        return plan.charge(diff2_history(sigma=sigma, sigma_restart=ratio * sigma, restart_every=restart_every,
                                         sample_rate=plan.sample_rate, steps=plan.steps))

    return calibrate(epsilon_at, plan.charge_limit, epsilon_tolerance=1e-4, name="sigma (DIFF2's difference steps)",
                     fix="Use a larger restart_noise_ratio or a larger target_epsilon.")

@register("diff2")
class DIFF2(_DifferenceMethod):
    r"""DIFF2 (Murata & Suzuki, 2023): a running estimator of the gradient, updated by privatised differences of
    per-sample gradients at consecutive iterates on the same batch, and reset by DP-SGD every ``restart_every`` steps.

    Sensitivity :math:`C_d` and noise std :math:`\sigma C_d` on difference steps; :math:`C_g` and
    :math:`\sigma_{\mathrm{restart}}C_g` on restart steps.

    Args:
        C_d: clipping bound :math:`C_d` of :math:`\nabla\ell(w_t; x_i) - \nabla\ell(w_{t-1}; x_i)` (the paper tunes
            it in [0.001, 1]).
        sigma: noise multiplier :math:`\sigma` of the difference steps.
        C_g: clipping bound :math:`C_g` of the restart (DP-SGD) steps (default ``C_d``).
        restart_every: :math:`R`, steps between restarts (:math:`1, 1 + R, 1 + 2R, \ldots`); default 50; ``None``:
            only step 1 [DPDR-25].
        sigma_restart: noise multiplier :math:`\sigma_{\mathrm{restart}}` of the restart steps (default ``sigma``:
            every step costs the same) [DPDR-25].

    Each step is accounted at its own multiplier. :meth:`from_plan` sets both for a budget.

    State: ``t``, ``previous`` = :math:`v_{t-1}` (the released estimate, divided by :math:`B`) and ``w_previous``
    (the parameters at which the previous step's gradients were taken).

    >>> from torch import nn
    >>> from dpbook.optim import DPOptimizer
    >>> torch.manual_seed(0) and None
    >>> model = nn.Linear(3, 2)
    >>> method = DIFF2(C_d=0.1, sigma=1.0, C_g=1.0, restart_every=2, sigma_restart=0.8)
    >>> opt = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), method, sample_rate=0.1,
    ...                   expected_batch_size=4)
    >>> restarts = []
    >>> for _ in range(4):
    ...     restarts.append(opt.step(torch.randn(4, 3), torch.randint(0, 2, (4,)))["restart"])
    >>> restarts, opt.ledger.history
    ([1.0, 0.0, 1.0, 0.0], [(0.8, 0.1, 1), (1.0, 0.1, 1), (0.8, 0.1, 1), (1.0, 0.1, 1)])
    >>> from dpbook.accounting import epsilon_of_history
    >>> opt.ledger.epsilon(1e-5) == epsilon_of_history(diff2_history(sigma=1.0, sigma_restart=0.8, restart_every=2,
    ...                                                                sample_rate=0.1, steps=4), 1e-5)
    True
    """

    declaration = Declaration(
        label="DIFF2",
        audit=Scenario(dict(C_d=1.0, sigma=1.0), "step 2 (a difference step): the canary's gradient at the previous "
                       "iterate is 0, so its difference is its gradient", prepare=_prepare_diff2),
        run={"C_d": 0.5, "C_g": 1.0, "restart_every": 2, "restart_noise_ratio": 0.5})

    @classmethod
    def from_plan(cls, plan, *, restart_noise_ratio: float = 1.0, **hyperparameters) -> "DIFF2":
        r"""DIFF2 spending what ``plan`` charges one run, with ``sigma_restart = restart_noise_ratio * sigma``.

        A ratio of 1 is DP-SGD's history: ``sigma = plan.sigma``. Otherwise :math:`\sigma` is calibrated
        (:func:`dpbook.accounting.calibrate`) so that the run's exact history (:func:`diff2_history`), composed
        as the plan's protocol charges it, spends at most the plan's budget. A ratio below 1 gives the restarts,
        which carry the whole gradient, less noise and the differences more.

        >>> from dpbook.tuning import tuning_plan
        >>> plan = tuning_plan(4.0, 1e-5, sample_rate=0.01, steps=1000)
        >>> m = DIFF2.from_plan(plan, restart_noise_ratio=0.5, C_d=0.1, restart_every=5)
        >>> m.sigma_restart < plan.sigma < m.sigma, round(m.sigma_restart / m.sigma, 6)
        (True, 0.5)
        """
        ratio = checks.positive("restart_noise_ratio (sigma_restart / sigma)", restart_noise_ratio)
        if ratio == 1.0:
            return cls(sigma=plan.sigma, **hyperparameters)
        sigma = _difference_sigma(plan, ratio, hyperparameters.get("restart_every", 50))
        return cls(sigma=sigma, sigma_restart=ratio * sigma, **hyperparameters)

    def __init__(self, *, C_d: float, sigma: float, C_g: float | None = None, restart_every: int | None = 50,
                 sigma_restart: float | None = None):
        super().__init__(C_d=C_d, sigma=sigma, C_g=C_g)
        self.restart_every = None if restart_every is None else checks.integer("restart_every", restart_every)
        self.sigma_restart = self.sigma if sigma_restart is None else checks.non_negative(
            "sigma_restart (noise multiplier of the restart steps)", sigma_restart)
        self.w_previous: list[torch.Tensor] = []

    def bind(self, params: Sequence[torch.Tensor], *, expected_batch_size: float) -> None:
        super().bind(params, expected_batch_size=expected_batch_size)
        self.w_previous = [p.detach().clone() for p in params]

    def is_restart(self) -> bool:
        if self.restart_every is None:
            return self.step == 1
        return (self.step - 1) % self.restart_every == 0

    def start(self, params: Sequence[torch.Tensor]) -> dict:
        acc = super().start(params)
        acc["w"] = [p.detach().clone() for p in params]  # w_t, the w_{t-1} of the next step
        return acc

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        if self.is_restart():
            self._add(acc, mb, clip_factors(mb.norms, self.C_g), None)
            return
        before = mb.at(self.w_previous)                                         # grad l(w_{t-1}; x_i), same batch
        delta = MicroBatch.combine([(1.0, mb), (-1.0, before)])                 # delta_i, formed only by vmap
        self._add(acc, mb, clip_factors(delta.norms, self.C_d), delta.norms, delta)  # sum_i Clip(delta_i, C_d)

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        released = super().release(acc, noise)
        self.w_previous = acc["w"]
        return released

    def state_dict(self) -> dict:
        return {**super().state_dict(), "w_previous": [w.clone() for w in self.w_previous]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.w_previous = [w.clone() for w in state["w_previous"]]


def diff2_history(*, sigma: float, sigma_restart: float, restart_every: int | None, sample_rate: float,
                  steps: int) -> list[tuple[float, float, int]]:
    r"""The accountant's history of a DIFF2 run of ``steps`` = :math:`T` steps: its restarts (steps
    :math:`1, 1 + R, \ldots`) at ``sigma_restart`` and its difference steps at ``sigma`` (empty segments dropped; the
    order of the steps does not change what they cost).

    >>> diff2_history(sigma=1.2, sigma_restart=0.6, restart_every=5, sample_rate=0.01, steps=12)
    [(0.6, 0.01, 3), (1.2, 0.01, 9)]
    """
    steps = checks.integer("steps", steps, minimum=0)
    q = checks.rate("sample_rate", sample_rate)
    restarts = min(1, steps) if restart_every is None else -(-steps // checks.integer("restart_every", restart_every))
    segments = [(float(sigma_restart), q, restarts), (float(sigma), q, steps - restarts)]
    return [seg for seg in segments if seg[2] > 0]
