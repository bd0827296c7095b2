r"""DP-PSAC (Xia et al. 2023), DP-PSASC and DP-PSASC with inner-outer momentum (Huang et al., arXiv 2411.03059).

All three replace clipping by a non-monotone per-sample weight of the gradient norm (the DP-PSASC paper's
Eqs. (1)-(6); the weight functions and their closed-form facts are in :mod:`dpbook.weights`):

==================  =====================================================  ===========  ===========
method              weight :math:`\omega(x)`, :math:`x = \lVert g\rVert`   paper        sensitivity
==================  =====================================================  ===========  ===========
``psac``            :math:`C/\big(x + r/(x + r)\big)`                      Eq. (4)      :math:`C`
``psasc``           :math:`C/\big(sx + r/(x + r)\big)`                     Eq. (6)      :math:`C/s`
``psasc-momentum``  the ``psasc`` weight applied to a per-sample momentum  Algorithm 3  :math:`C/s`
==================  =====================================================  ===========  ===========

and release :math:`\sum_i\omega_i g_i + \mathcal N\big(0, (\sigma\cdot\text{sensitivity})^2I_d\big)` (Eqs. (5),
(8); the engine divides by the expected batch size :math:`B`). The accountant sees :math:`\sigma` at every step:
each step is exactly as private as a DP-SGD step with noise multiplier :math:`\sigma` (Theorem 1; add/remove-one
adjacency, reading PSASC-5).

Readings of the paper (ids of the book's Readings chapter, ``book/readings_psasc.md``):

- PSASC-4: batches are Poisson samples (:math:`q = B/N`) and sums are divided by the expected :math:`B`, to match
  the accountant.
- PSASC-7: :math:`r` is an input of every algorithm (Table II's "Stable Parameter").
- PSASC-8: the noise is isotropic, :math:`\mathcal N\big(0, (C\sigma/s)^2I_d\big)`.
- PSASC-9: the loops run :math:`T` iterations, :math:`k = 0, \ldots, T-1`.
- PSASC-14 (Algorithm 3): the inner momentum is
  :math:`m_{k,i} = \sum_{l=\max(0,k-K_0)}^{k}\gamma_0^{k-l}g_{l,i}`, the current gradient included, unnormalised
  (weights :math:`1, \gamma_0, \ldots, \gamma_0^{K_0}`, newest first); the first :math:`K_0` steps use the iterates
  that exist. The printed window :math:`l = k-1-K_0, \ldots, k-1` (which excludes :math:`w_k`) is not implemented.
- PSASC-13, PSASC-15, PSASC-16: Table III's DP-PSASC* is Algorithm 3 (the only minibatch version); its
  :math:`\gamma_0`, :math:`\gamma_1` and :math:`K_0` are not given in the paper, so :class:`PSASCMomentum` has no
  defaults for them.
- PSASC-17: :math:`s` changes utility, not privacy: the :math:`(\varepsilon, \delta)` of every method here depends
  on :math:`\sigma` only.
"""

from __future__ import annotations

__all__ = ["PSAC", "PSASC", "PSASCMomentum"]

from typing import ClassVar, Sequence

import torch

from dpbook import checks, weights
from dpbook.methods.base import MicroBatch, ScaledSum, restored
from dpbook.methods.declaration import Declaration
from dpbook.methods.registry import register
from dpbook.methods.scenario import DTYPE, SHAPES, Scenario, zeros
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads


@register("psac")
class PSAC(ScaledSum):
    r"""DP-PSAC (Eqs. (4)-(5)): weight :math:`C/\big(\lVert g\rVert + r/(\lVert g\rVert + r)\big)`, sensitivity
    :math:`C`, noise std :math:`\sigma C`.

    ``r_num`` (default ``r``) replaces the numerator constant only,
    :math:`C/\big(\lVert g\rVert + r_{\mathrm{num}}/(\lVert g\rVert + r)\big)`: with ``C = 1``, ``r_num = r / s`` and
    learning rate :math:`\eta C/s` this rule takes exactly the steps of DP-PSASC(:math:`\eta, C, r, s`)
    (:func:`dpbook.weights.psasc_as_psac`). Its sensitivity is :math:`C` for every ``r_num``.

    Example:
        >>> m = PSAC(C=0.3, r=1e-4, sigma=1.0)
        >>> m.sensitivity(), m.releases()[0].noise_std, m.noise_multiplier()
        (0.3, 0.3, 1.0)
        >>> m.weights(torch.tensor([0.0, 0.0099, 1e6], dtype=torch.float64))
        tensor([3.0000e-01, 1.5075e+01, 3.0000e-07], dtype=torch.float64)
    """

    declaration = Declaration(
        label="DP-PSAC",
        audit=Scenario(dict(C=1.0, r=1e-3, sigma=1.0), "stateless; the weight's sup C is approached at infinity"),
        run={"C": 1.0, "r": 0.01})

    def __init__(self, *, C: float, r: float, sigma: float, r_num: float | None = None):
        super().__init__()
        self.C = checks.positive("C (maximum norm size)", C)
        self.r = checks.positive("r (stable parameter)", r, "Table II uses 1e-4 to 1e-2")
        self.r_num = self.r if r_num is None else checks.positive("r_num (numerator constant)", r_num)
        self.sigma = checks.non_negative("sigma (noise multiplier)", sigma)

    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        return weights.psac_weight(norms, C=self.C, r=self.r, r_num=self.r_num)  # Eq. (4)

    def sensitivity(self) -> float:
        return self.C  # sup_x x * w(x), approached as ||g|| -> infinity, never attained

    def diagnostics(self) -> dict[str, float]:
        return {"C": self.C, "r": self.r}


@register("psasc")
class PSASC(PSAC):
    r"""DP-PSASC (Eq. (6), Algorithm 1): weight :math:`C/\big(s\lVert g\rVert + r/(\lVert g\rVert + r)\big)`,
    sensitivity :math:`C/s`, noise std :math:`\sigma C/s`.

    ``s = 1`` is DP-PSAC, to the bit. The paper recommends :math:`0 < s \le 1` (Table III uses 0.45 to 0.9); any
    :math:`s > 0` is valid, with the sensitivity :math:`C/s`.

    Example:
        >>> m = PSASC(C=0.2, r=1e-4, s=0.8, sigma=1.5)
        >>> m.sensitivity(), m.releases()[0].noise_std, m.noise_multiplier()
        (0.25, 0.375, 1.5)
        >>> m.weights(torch.tensor([0.0, 1e6], dtype=torch.float64))
        tensor([2.0000e-01, 2.5000e-07], dtype=torch.float64)
    """

    declaration = Declaration(
        label="DP-PSASC",
        audit=Scenario(dict(C=1.0, r=1e-3, s=0.5, sigma=1.0), "stateless; the weight's sup C/s at infinity"),
        run={"C": 1.0, "r": 0.01, "s": 0.5})

    def __init__(self, *, C: float, r: float, s: float, sigma: float):
        super().__init__(C=C, r=r, sigma=sigma)
        self.s = checks.positive("s (scaling coefficient)", s, "the paper uses 0 < s <= 1; s = 1 is DP-PSAC")

    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        return weights.psasc_weight(norms, C=self.C, r=self.r, s=self.s)  # Eq. (6)

    def sensitivity(self) -> float:
        return weights.psasc_sensitivity(C=self.C, s=self.s)  # C / s

    def diagnostics(self) -> dict[str, float]:
        return {**super().diagnostics(), "s": self.s}


def _prepare_momentum(method: "PSASCMomentum", grads: Grads) -> None:
    """The audited state: two steps in, K0 = 2 stored iterates and an outer momentum M, all public (released)."""
    M = [0.1 * torch.ones(shape, dtype=DTYPE) for shape in SHAPES]
    method.load_state_dict({**method.state_dict(), "t": 2, "M": M, "history": [zeros(), zeros()]})


@register("psasc-momentum")
class PSASCMomentum(PSASC):
    r"""DP-PSASC* (Algorithm 3, readings PSASC-14 and PSASC-16): inner per-sample and outer noisy momentum.

    At step :math:`k`, for each example :math:`i` of the Poisson batch, with the iterates :math:`w_l` of the last
    :math:`K_0` steps:

    .. math::

        m_i &= \sum_{l=\max(0, k-K_0)}^{k}\gamma_0^{k-l}\,\nabla f(w_l, d_i)
            \qquad\text{(inner momentum, per sample)},\\
        G_k &= \sum_i\frac{C\,m_i}{s\lVert m_i\rVert + r/(\lVert m_i\rVert + r)}
            \qquad\text{(Eq. (6) applied to } m_i\text{)},\\
        M &\leftarrow (1 - \gamma_1)M + G_k + \mathcal N\big(0, (\sigma C/s)^2I_d\big)
            \qquad\text{(outer momentum, noise inside)},

    and :math:`M` is released (SGD: :math:`w \leftarrow w - (\eta/B)M`).

    Privacy: each scaled :math:`m_i` depends on :math:`d_i` and on already released iterates only and has norm
    :math:`< C/s`, so :math:`G_k` + noise is the subsampled Gaussian mechanism of DP-PSASC (multiplier
    :math:`\sigma`) and :math:`M` is post-processing. Since sample :math:`i` was generally not in the earlier
    batches, its gradients at :math:`w_{k-1}, \ldots, w_{k-K_0}` are recomputed from stored parameter snapshots
    (``MicroBatch.at``).

    Cost, with :math:`d` parameters and :math:`n` examples per micro-batch:

    - memory: :math:`K_0` stored iterates and the outer momentum :math:`M`, :math:`(K_0 + 1)d` numbers kept across
      steps (all in :meth:`state_dict`), plus one copy of :math:`w_k` (:math:`d`) during a step; and the
      :math:`K_0 + 1` passes of the micro-batch while :math:`m_i` is summed: on the Book-Keeping path their layers'
      inputs and output gradients (:meth:`MicroBatch.combine`; :math:`m_i` is formed only in the layers whose
      per-sample gradients are), on the ``vmap`` path :math:`K_0 + 1` per-sample gradient tensors (:math:`nd` each);
    - compute: :math:`K_0 + 1` forward and backward passes per micro-batch (the engine's at :math:`w_k` and
      :math:`K_0` at the snapshots), about :math:`K_0 + 1` times the cost of a DP-PSASC step once :math:`K_0` steps
      have passed. That factor is inherent: example :math:`i` was generally not in the batches of those steps, so
      its gradients there exist nowhere. The ghost-norm layers add the cross terms of the passes,
      :math:`(K_0 + 1)^2` times those of one norm. ``gamma0 = 0`` stores no iterate and recomputes nothing (the
      inner momentum is then the current gradient).

    The outer momentum is not normalised: a slowly varying signal is amplified about :math:`1/\gamma_1` and the
    noise about :math:`1/\sqrt{\gamma_1(2 - \gamma_1)}`, so the learning rate must be re-tuned with :math:`\gamma_1`
    (about :math:`\eta\gamma_1` keeps the step size). ``K0 = 0, gamma1 = 1`` is DP-PSASC exactly.

    Args:
        C, r, s, sigma: as in :class:`PSASC`.
        K0: momentum length :math:`K_0`, an integer >= 0 (the inner sum has up to :math:`K_0 + 1` terms).
        gamma0: inner momentum parameter :math:`\gamma_0` in [0, 1] (weight :math:`\gamma_0^{\mathrm{age}}` of a
            gradient ``age`` steps old).
        gamma1: outer momentum parameter :math:`\gamma_1` in (0, 1] (1: no outer momentum).

    Example:
        >>> m = PSASCMomentum(C=0.3, r=1e-4, s=0.9, sigma=1.0, K0=2, gamma0=0.5, gamma1=0.1)
        >>> round(m.sensitivity(), 4), round(m.releases()[0].noise_std, 4), m.noise_multiplier()
        (0.3333, 0.3333, 1.0)
    """

    declaration = Declaration(
        label="DP-PSASC*",
        audit=Scenario(dict(C=1.0, r=1e-3, s=0.5, sigma=1.0, K0=2, gamma0=0.5, gamma1=0.5),
                       "step 2 with K0 = 2 stored iterates and a non-zero outer momentum; the canary's gradient at the "
                       "stored iterates is 0, so its inner momentum is its gradient, norm 10^6",
                       prepare=_prepare_momentum),
        run={"C": 1.0, "r": 0.01, "s": 0.5, "K0": 1, "gamma0": 0.5, "gamma1": 0.5})

    #: the inner momentum is a combination of passes at the stored iterates: Book-Keeping's norms and sums suffice
    per_sample_vectors: ClassVar[bool] = False

    def __init__(self, *, C: float, r: float, s: float, sigma: float, K0: int, gamma0: float, gamma1: float):
        super().__init__(C=C, r=r, s=s, sigma=sigma)
        self.K0 = checks.integer("K0 (momentum length)", K0, minimum=0)
        self.gamma0 = checks.closed_unit("gamma0 (inner momentum parameter)", gamma0, "0: no inner momentum")
        self.gamma1 = checks.rate("gamma1 (outer momentum parameter)", gamma1, "1: no outer momentum")
        self.M: list[torch.Tensor] = []  # outer momentum, created by bind
        self.history: list[list[torch.Tensor]] = []  # w_{k-K0}, ..., w_{k-1}, oldest first
        self.window = self.K0 if self.gamma0 > 0 else 0  # past iterates the inner momentum needs

    def bind(self, params: Sequence[torch.Tensor], *, expected_batch_size: float) -> None:
        super().bind(params, expected_batch_size=expected_batch_size)
        self.M = [torch.zeros_like(p, memory_format=torch.contiguous_format).detach() for p in params]  # M_0 = 0
        self.history = []

    def start(self, params: Sequence[torch.Tensor]) -> dict:
        acc = super().start(params)
        # The snapshot of w_k, taken once per logical step; it joins the history at the release.
        acc["iterate"] = [p.detach().clone() for p in params] if self.window > 0 else []
        return acc

    def inner_momentum(self, mb: MicroBatch) -> MicroBatch:
        r""":math:`m_i = \sum_l\gamma_0^{k-l}\,\nabla f(w_l, d_i)` over the current and stored iterates, as a
        micro-batch (:meth:`MicroBatch.combine`: formed by ``vmap``, from the passes' stored tensors by
        Book-Keeping)."""
        terms = [(1.0, mb)]  # l = k, weight gamma0^0 = 1
        for age, past in enumerate(reversed(self.history), start=1):  # w_{k-1}, w_{k-2}, ...
            terms.append((self.gamma0 ** age, mb.at(past)))
        return MicroBatch.combine(terms)

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        m = self.inner_momentum(mb)
        # The inner momentum takes the place of the per-sample gradient in the scaled sum of DP-PSASC.
        super().accumulate(acc, m)

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        noisy = super().release(acc, noise)  # G_k + N(0, (sigma C / s)^2 I)
        for M, g in zip(self.M, noisy):
            M.mul_(1.0 - self.gamma1).add_(g)
        if self.window > 0:
            self.history = (self.history + [acc["iterate"]])[-self.window:]
        return [M.clone() for M in self.M]

    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "M": [M.clone() for M in self.M],
            "history": [[p.clone() for p in w] for w in self.history],
        }

    def load_state_dict(self, state: dict) -> None:
        history = state["history"]
        if len(history) > self.window:
            raise ValueError(f"the state holds {len(history)} stored iterates but this method keeps {self.window} "
                             f"(K0 = {self.K0}, gamma0 = {self.gamma0}): it was saved by a run with other momentum "
                             "parameters")
        super().load_state_dict(state)
        self.M = restored(self.M, state["M"])
        self.history = [[p.to(M.device).clone() for p, M in zip(w, self.M)] for w in history]

    def diagnostics(self) -> dict[str, float]:
        return {**super().diagnostics(), "K0": float(self.K0), "gamma0": self.gamma0, "gamma1": self.gamma1}
