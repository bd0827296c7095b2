r"""DP-PSASC with momentum, GD version (Huang et al., arXiv 2411.03059, Algorithm 2): full-batch gradient descent
whose scaled quantity is a per-sample exponential moving average (EMA) of each example's gradients.

Algorithm 2 as printed (input: :math:`w_0`, :math:`\eta`, :math:`D = \{d_1, \ldots, d_N\}`,
:math:`(\varepsilon, \delta)`, :math:`C`, momentum parameter :math:`\gamma`, :math:`T`, :math:`s`), quoted with its
line numbers::

    1  Compute the noise scale sigma
    2  Initialize m_{0,i} = g_{0,i}
    3  for k = 1; k < T; k++:
    4      Compute the gradient {g_{k,i}}_{i=1}^N                        (every example: full batch)
    5      g~_{k,i} = C m_{k,i} / (s ||m_{k,i}|| + r / (||m_{k,i}|| + r))  (Eq. (6) applied to m_{k,i})
    6      g_k = sum_{i=1}^N g~_{k,i}
    7      g^_k = g_k + N(0, C^2 sigma^2 / s^2)
    8      w_{k+1} <- w_k - (eta / B) g^_k
    9      for i = 1; i < N; i++:
    10         m_{k,i} = gamma g_{k,i} + (1 - gamma) m_{k-1,i}

What is implemented, with :math:`k = 0, \ldots, T-1` and :math:`g_{k,i} = \nabla f(w_k, d_i)`:

.. math::

    m_{0,i} &= g_{0,i} \qquad\text{(line 2)},\\
    m_{k,i} &= \gamma\,g_{k,i} + (1 - \gamma)\,m_{k-1,i} \quad (k \ge 1)
        \qquad\text{(line 10: } \gamma \text{ weighs the NEW gradient)},\\
    \text{release}\quad &\sum_{i=1}^N\frac{C\,m_{k,i}}{s\lVert m_{k,i}\rVert + r/(\lVert m_{k,i}\rVert + r)}
        + \mathcal N\big(0, (\sigma C/s)^2I_d\big)

(the engine divides by :math:`B = N` and any torch optimizer steps; plain SGD is line 8).

The EMA is per example and runs across the full-batch steps: example :math:`i`'s :math:`m_i` is a state of the
method that lives from step to step, :math:`N` tensors of the model's size in all (:math:`Nd` numbers, in
:meth:`state_dict`). It sits *before* the scaling, and the noise is added once per step *after* the sum, so no
noise enters the EMA. Theorem 3 states Algorithm 2's parameters: one :math:`\gamma = O(T^{-1/4})` (with
:math:`s = O(T^{-1/4})`, :math:`r = O(T^{-1/2})`, :math:`\eta = O(T^{-3/4})`).

Readings of the paper (ids of the book's Readings chapter, ``book/readings_psasc.md``):

- [PSASC-9]: the loop runs :math:`T` iterations, :math:`k = 0, \ldots, T-1` (the printed ``k = 1; k < T`` runs
  :math:`T - 1` and never defines :math:`w_1`).
- [PSASC-10]: line 5 scales :math:`m_{k,i}` before line 10 computes it. ``reading="update-then-scale"`` (the
  default) updates the EMA with the current gradient first and scales the updated :math:`m_{k,i}`, so the gradient
  computed at :math:`w_k` (line 4) moves :math:`w_k`. ``reading="scale-then-update"`` keeps the printed line order:
  step :math:`k` scales :math:`m_{k-1,i}`, the EMA up to the previous iterate, and then folds :math:`g_{k,i}` in for
  the next step (steps 0 and 1 both scale :math:`m_{0,i} = g_{0,i}`). Both readings have the same sensitivity and
  the same accounting.
- [PSASC-11]: the :math:`\eta/B` of line 8 is :math:`\eta/N`: with sample rate :math:`q = 1` the expected batch
  size :math:`B` *is* :math:`N`, so the engine's division by :math:`B` is the paper's. [PSASC-12]: line 9's
  ``i < N`` means every :math:`i = 1, \ldots, N`.
- [PSASC-7], [PSASC-8]: :math:`r` is an input; the noise is isotropic, :math:`\mathcal N\big(0, (C\sigma/s)^2I_d\big)`.
- [PSASC-13], [PSASC-16]: Theorem 3's single :math:`\gamma` is this algorithm's; the minibatch Algorithm 3
  (``psasc-momentum`` in ``psac.py``) has :math:`(\gamma_0, \gamma_1, K_0)`. Which of the two Table III's DP-PSASC*
  used is discussed in the chapter's page ``notebooks/psasc_in_training_momentum.ipynb``.

Privacy (add/remove-one adjacency, [PSASC-5]). Every :math:`m_i` depends only on :math:`d_i` and on the already
released iterates :math:`w_0, \ldots, w_k`, and its scaled version has norm :math:`< C/s` (Eq. (6):
:math:`\big\lVert C\,m/\big(s\lVert m\rVert + r/(\lVert m\rVert + r)\big)\big\rVert < C/s` for every :math:`m`), so
adding or removing one example changes the step's sum by less than :math:`C/s`: each step is a Gaussian mechanism
with noise multiplier :math:`\sigma`, and :math:`T` steps compose adaptively. Nothing is subsampled: the accountant
records :math:`(\sigma, q = 1)` per step, i.e. :math:`T`-fold composition of the Gaussian mechanism with no
amplification ([PSASC-36]: Theorem 1's :math:`B/N` does not apply). :meth:`from_plan` takes a plan calibrated at
sample rate 1 and refuses any other.

Example identities: the EMA is indexed by example, so the method needs each example's index in the training set.
The engine hands it ``MicroBatch.index`` (``DPOptimizer.step(x, y, index=...)``; :class:`dpbook.train.Trainer`
passes its sampler's indices). At :math:`q = 1` (``Trainer(..., expected_batch_size=N)``) every step is the whole
training set. Each step must hold every index :math:`0, \ldots, N-1` exactly once, with :math:`N` = the engine's
expected batch size :math:`B`; anything else (a subsampled batch, a missing or repeated index, no indices) is an
error, never a silent mix-up of two examples' states (which would break the sensitivity bound).

    >>> import torch
    >>> from torch import nn
    >>> from dpbook.optim import DPOptimizer
    >>> torch.manual_seed(0) and None
    >>> model = nn.Linear(3, 2)
    >>> method = PSASCMomentumGD(C=0.3, r=1e-3, s=0.5, sigma=2.0, gamma=0.25)
    >>> round(method.sensitivity(), 6), round(method.releases()[0].noise_std, 6), method.noise_multiplier()
    (0.6, 1.2, 2.0)
    >>> N = 6  # full batch: sample rate 1, expected batch size N
    >>> engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), method, sample_rate=1.0,
    ...                      expected_batch_size=N)
    >>> x, y = torch.randn(N, 3), torch.randint(0, 2, (N,))
    >>> for _ in range(3):
    ...     info = engine.step(x, y, index=torch.arange(N))
    >>> engine.ledger.history, [tuple(m.shape) for m in method.m]
    ([(2.0, 1.0, 3)], [(6, 2, 3), (6, 2)])
    >>> engine.step(x[:4], y[:4], index=torch.arange(4))  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    ValueError: Algorithm 2 is full-batch: every step must hold each of the N = 6 training examples once,
    this one held 4 of them; run it at sample rate q = 1 with expected_batch_size = N
    (e.g. Trainer(..., expected_batch_size=len(x_train)))
"""

from __future__ import annotations

__all__ = ["READINGS", "PSASCMomentumGD"]

from typing import ClassVar, Sequence

import torch

from dpbook import checks
from dpbook.methods.base import MicroBatch, restored
from dpbook.methods.declaration import Declaration
from dpbook.methods.psac import PSASC
from dpbook.methods.registry import register
from dpbook.methods.scenario import Scenario
from dpbook.noise import GaussianNoise
from dpbook.per_sample import FormedView, Grads, check_finite, flat_norms, no_other_values
from dpbook.tuning import TuningPlan

READINGS = ("update-then-scale", "scale-then-update")
"""The two readings of Algorithm 2's line order ([PSASC-10]); the first is the default."""


def _prepare_audit(method: "PSASCMomentumGD", grads: Grads) -> None:
    """The audited state: step 1 of the full-batch run, every example's EMA m_i its gradient of step 0 (line 2)."""
    method.load_state_dict({**method.state_dict(), "t": 1, "m": [g.clone() for g in grads]})


@register("psasc-momentum-gd")
class PSASCMomentumGD(PSASC):
    r"""DP-PSASC with momentum, GD version (Algorithm 2): full batch, per-sample EMA, sensitivity :math:`C/s`, noise
    std :math:`\sigma C/s`.

    Weight :math:`C/\big(s\lVert m_i\rVert + r/(\lVert m_i\rVert + r)\big)` applied to each example's EMA
    :math:`m_i`.

    Args:
        C, r, s, sigma: as in :class:`~dpbook.methods.psac.PSASC` (Eq. (6)).
        gamma: momentum parameter :math:`\gamma` in (0, 1], the weight of the *new* gradient in
            :math:`m \leftarrow \gamma g + (1 - \gamma)m` (Algorithm 2, line 10). 1: no momentum, full-batch DP-PSASC
            exactly. Theorem 3 takes :math:`\gamma = O(T^{-1/4})`, a long memory. 0 would freeze every :math:`m_i` at
            its gradient at :math:`w_0` and is refused.
        reading: ``"update-then-scale"`` (default) or ``"scale-then-update"`` ([PSASC-10], module docstring).

    Memory: :math:`Nd` numbers of state (one EMA per example and parameter), besides the engine's per-sample
    gradients.
    """

    declaration = Declaration(
        label="DP-PSASC* (full batch)",
        audit=Scenario(dict(C=1.0, r=1e-3, s=0.5, sigma=1.0, gamma=0.5),
                       "full batch (q = 1), step 1: each example's EMA holds its gradient of step 0, the canary's "
                       "included; the training-set size N is treated as public (the engine divides the sum by it; the "
                       "audit checks the sum)", prepare=_prepare_audit),
        run={"C": 1.0, "r": 0.01, "s": 0.5, "gamma": 0.5})

    full_batch: ClassVar[bool] = True
    """Algorithm 2 runs only at sample rate :math:`q = 1`: the batch of every step is the whole training set."""
    per_sample_vectors: ClassVar[bool] = True  # each example's EMA m_i is a vector kept across steps
    per_example_state: ClassVar[bool] = True  # m_i, found by the example's index in the training set

    def __init__(self, *, C: float, r: float, s: float, sigma: float, gamma: float,
                 reading: str = "update-then-scale"):
        super().__init__(C=C, r=r, s=s, sigma=sigma)
        self.gamma = checks.rate("gamma (momentum parameter)", gamma,
                                 "the weight of the new gradient in m = gamma g + (1 - gamma) m; 1: no momentum")
        checks.one_of("reading", reading, READINGS, "reading PSASC-10")
        self.reading = reading
        self.N = 0  # training-set size, the expected batch size B at q = 1 (set by bind)
        self.m: list[torch.Tensor] = []  # per-sample EMA, one tensor (N, *shape) per parameter (allocated by bind)

    @classmethod
    def from_plan(cls, plan: TuningPlan, **hyperparameters) -> "PSASCMomentumGD":
        r"""The method at the plan's :math:`\sigma`, for a plan calibrated at sample rate 1 (:math:`T` full-batch
        Gaussian steps).

        >>> from dpbook.tuning import tuning_plan
        >>> plan = tuning_plan(4.0, 1e-5, sample_rate=1.0, steps=50)
        >>> PSASCMomentumGD.from_plan(plan, C=1.0, r=1e-3, s=0.5, gamma=0.1).sigma == plan.sigma
        True
        """
        if plan.sample_rate != 1:
            raise ValueError(
                f"psasc-momentum-gd (Algorithm 2) is full-batch: its steps are Gaussian mechanisms on the whole "
                f"training set, accounted at sample rate 1, but the plan was calibrated at sample rate "
                f"{plan.sample_rate!r}; plan with batch size = N (sample_rate=1.0), or use 'psasc-momentum' "
                "(Algorithm 3) for minibatches")
        return cls(sigma=plan.sigma, **hyperparameters)

    def bind(self, params: Sequence[torch.Tensor], *, expected_batch_size: float) -> None:
        super().bind(params, expected_batch_size=expected_batch_size)
        if not float(expected_batch_size).is_integer():
            raise ValueError(f"Algorithm 2 is full-batch: the expected batch size B is the training-set size N, an "
                             f"integer, got {expected_batch_size!r}")
        self.N = int(expected_batch_size)
        self.m = [torch.zeros((self.N, *p.shape), dtype=p.dtype, device=p.device) for p in params]

    def start(self, params: Sequence[torch.Tensor]) -> dict:
        acc = super().start(params)
        acc["seen"] = torch.zeros(self.N, dtype=torch.bool, device=self.m[0].device if self.m else None)
        return acc

    def _indices(self, acc: dict, mb: MicroBatch) -> torch.Tensor:
        """The micro-batch's example indices, checked: given, in 0 .. N-1, none seen before in this step."""
        index = mb.index.to(device=acc["seen"].device, dtype=torch.long)
        if len(index) != mb.n:
            raise ValueError(f"the micro-batch has {mb.n} examples but {len(index)} indices")
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= self.N):
            raise ValueError(f"example indices must lie in 0 .. N-1 = {self.N - 1} (N = the expected batch size), "
                             f"got indices from {int(index.min())} to {int(index.max())}")
        if bool(acc["seen"][index].any()) or len(torch.unique(index)) != len(index):
            raise ValueError("an example appears twice in one step: Algorithm 2's batch is the training set, each "
                             "example once")
        acc["seen"][index] = True
        return index

    def momentum(self, index: torch.Tensor, grads: Grads) -> Grads:
        """Advance the EMA of the examples ``index`` with their gradients; return what this step scales.

        Line 2 at the first step (m = g), line 10 after it; ``"update-then-scale"`` scales the updated m,
        ``"scale-then-update"`` the m of the previous step (g itself at the first step).
        """
        if self.t == 0:
            old = list(grads)  # m_{0,i} = g_{0,i}
            new = list(grads)
        else:
            old = [m[index] for m in self.m]  # m_{k-1,i}
            new = [self.gamma * g + (1.0 - self.gamma) * o for g, o in zip(grads, old)]  # line 10
        for m, v in zip(self.m, new):
            m[index] = v
        return new if self.reading == "update-then-scale" else old

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        index = self._indices(acc, mb)
        m = self.momentum(index, mb.grads)
        norms = flat_norms(m)
        check_finite(m, norms, [f"#{j} (per-sample momentum)" for j in range(len(m))])
        # The per-sample EMA takes the place of the per-sample gradient in DP-PSASC's scaled sum (line 5).
        super().accumulate(acc, MicroBatch(FormedView(m, norms, no_other_values), mb.index))

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        seen = int(acc["seen"].sum())
        if seen != self.N:
            raise ValueError(
                f"Algorithm 2 is full-batch: every step must hold each of the N = {self.N} training examples once, "
                f"this one held {seen} of them; run it at sample rate q = 1 with expected_batch_size = N "
                "(e.g. Trainer(..., expected_batch_size=len(x_train)))")
        return super().release(acc, noise)  # lines 6-7: sum_i g~_{k,i} + N(0, (sigma C / s)^2 I)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "m": [m.clone() for m in self.m]}

    def load_state_dict(self, state: dict) -> None:
        shapes = [tuple(m.shape) for m in state["m"]]
        if self.m and shapes != [tuple(m.shape) for m in self.m]:
            raise ValueError(f"the state holds per-sample momenta of shapes {shapes} but this method keeps "
                             f"{[tuple(m.shape) for m in self.m]} (N = {self.N}): it was saved by a run on another "
                             "training set or model")
        super().load_state_dict(state)
        self.m = restored(self.m, state["m"])
        self.N = len(self.m[0]) if self.m else 0

    def diagnostics(self) -> dict[str, float]:
        return {**super().diagnostics(), "gamma": self.gamma}
