r"""DPDR (Liu et al., 2024): gradient Decomposition against the previous noisy gradient, and Reconstruction.

Algorithm 1 of the paper, as read by this book (ids ``DPDR-n`` of ``book/readings_dpdr.md``). The
"layers" are the model's parameter tensors (weight and bias apart) [DPDR-10]; :math:`m` is their number,
:math:`b^{(l)}` the unit direction of layer :math:`l` of the previous *released* gradient, and the engine divides
the release by the expected batch size :math:`B` [DPDR-5]. The pseudo-code::

    for t = 1..T:
        if 2 <= t <= s:                                           # a GDR step (s - 1 of them) [DPDR-9]
            a_i^(l) = <g_i^(l), b^(l)>                              Eq. (2), ||b^(l)|| = 1 [DPDR-11]
            p_i^(l) = g_i^(l) - a_i^(l) b^(l)                       Eq. (2): the orthogonal (incremental) part
            P = sum_i p_i min(1, C_perp / ||p_i||)                  one flat L2 clip over all layers [DPDR-10]
            A = sum_i a_i min(1, C_alpha / ||a_i||)                 a_i in R^m, one joint L2 clip [DPDR-4]
            g~_perp = P + N(0, sigma_perp^2 C_perp^2 I_d)
            alpha~  = A + N(0, sigma_alpha^2 C_alpha^2 I_m)
            g~^(l)  = alpha~^(l) b^(l) + g~_perp^(l)                 reconstruction
        else:                                                     # DP-SGD: t = 1 and t > s
            g~ = sum_i g_i min(1, C_g / ||g_i||) + N(0, sigma_g^2 C_g^2 I_d)
        w <- optimizer(w, g~ / B)                                  (the engine)
        if t < s: b^(l) = g~^(l) / ||g~^(l)||                      post-processing; also after step 1 [DPDR-8]

**Efficient implementation** (derived here). Because :math:`\lVert b^{(l)}\rVert = 1`, only per-sample layer
norms and inner products with :math:`b` are needed; no per-sample orthogonal tensor is ever formed:

.. math::

    \lVert p_i\rVert^2 &= \sum_l\big(\lVert g_i^{(l)}\rVert^2 - (a_i^{(l)})^2\big),\\
    \sum_i c_ip_i^{(l)} &= \sum_i c_ig_i^{(l)} - \Big(\sum_i c_ia_i^{(l)}\Big)b^{(l)}.

The subtraction :math:`\lVert g\rVert^2 - a^2` cancels when a gradient is nearly parallel to :math:`b`: in float32
rounding could then *under*-estimate :math:`\lVert p_i\rVert` and let a contribution exceed :math:`C_\perp`. The
norm used for clipping is therefore :math:`\sqrt{\lVert p_i\rVert^2 + \tau\lVert g_i\rVert^2}` with
:math:`\tau = 4(\log_2 d_{\max} + 1)\,\mathrm{eps}`, eps the machine epsilon of the dtype (:func:`rounding_slack`:
about 6e-6 in float32 for the digits CNN, 1e-14 in float64), which bounds the rounding of both formulas above.
In float32 it changes the clip factor by less than 0.04% for any gradient whose orthogonal part exceeds 10% of
its norm (by 3% at 1%); it is what makes :math:`\lVert\text{contribution}\rVert \le C_\perp` hold on adversarial
inputs (``tests/test_dpdr.py``).

**Accounting** (privacy hygiene rule 4). The two releases of a GDR step see the same Poisson batch: they are one
Gaussian mechanism with noise multiplier
:math:`\sigma_{\mathrm{eff}} = (\sigma_\perp^{-2} + \sigma_\alpha^{-2})^{-1/2}`, not two independent ones (Theorem
1's :math:`\varepsilon_\perp + \varepsilon_\alpha` composes them as if they were independent [DPDR-13]). The run's
history is :math:`[(\sigma_g, q, 1), (\sigma_{\mathrm{eff}}, q, s - 1), (\sigma_g, q, T - s)]`;
:func:`calibrate_sigma_g` finds the :math:`\sigma_g` that makes it cost exactly a target :math:`\varepsilon`.
"""

from __future__ import annotations

__all__ = [
    "DPDR", "calibrate_sigma_g", "difference_sq_norms", "dpdr_history", "gdr_release_mu", "layer_coefficients",
    "orthogonal_sq_norms", "project", "rounding_slack", "unit_directions"
]

import functools
import math
from typing import Callable, ClassVar, Sequence

import torch

from dpbook import checks
from dpbook.accounting import calibrate, epsilon_of_history, sigma_eff
from dpbook.methods.base import Method, MicroBatch, Release
from dpbook.methods.declaration import Declaration
from dpbook.methods.registry import register
from dpbook.methods.scenario import DTYPE, SHAPES, Scenario, dirac, zeros
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads, clip_factors, inner_products, layer_sq_norms

# --------------------------------------------------------------------------------------------------------------
# The decomposition (Eq. (2)), per layer, on per-sample gradients and on single vectors
# --------------------------------------------------------------------------------------------------------------

def unit_directions(g: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    r""":math:`b^{(l)} = g^{(l)}/\lVert g^{(l)}\rVert` for each layer (parameter tensor) of one gradient; 0 where
    :math:`g^{(l)} = 0`.

    A zero layer has no direction: its :math:`b^{(l)} = 0` makes :math:`a^{(l)} = 0` and :math:`p^{(l)} = g^{(l)}`
    (that layer is not decomposed). With noise on, a released layer is zero with probability 0.

    >>> [b.tolist() for b in unit_directions([torch.tensor([3.0, 4.0]), torch.zeros(2)])]
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    out = []
    for layer in g:
        norm = layer.norm()  # torch.where, not an if: no device synchronisation
        out.append(torch.where(norm > 0, layer / norm, torch.zeros_like(layer)))
    return out


def project(g: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    r"""Decompose ONE gradient against ``b``, layer by layer (Eq. (2)): ``(alpha, g_perp)``.

    :math:`\alpha^{(l)} = \langle g^{(l)}, b^{(l)}\rangle` (shape ``(m,)``) and
    :math:`g_\perp^{(l)} = g^{(l)} - \alpha^{(l)}b^{(l)}`, so that :math:`g^{(l)} = \alpha^{(l)}b^{(l)} + g_\perp^{(l)}`
    with :math:`g_\perp^{(l)}` orthogonal to :math:`b^{(l)}`. For teaching and tests; :class:`DPDR` never forms
    :math:`g_\perp` per sample.

    >>> alpha, g_perp = project([torch.tensor([1.0, 2.0])], [torch.tensor([1.0, 0.0])])
    >>> alpha.tolist(), g_perp[0].tolist()
    ([1.0], [0.0, 2.0])
    """
    alpha = torch.stack([(gl * bl).sum() for gl, bl in zip(g, b)])
    return alpha, [gl - al * bl for gl, al, bl in zip(g, alpha, b)]


def layer_coefficients(grads: Grads, b: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Per-sample parallel coefficients and squared layer norms: ``(a, sq)``, both of shape ``(n, m)``.

    ``a[i, l]`` = :math:`\langle g_i^{(l)}, b^{(l)}\rangle` and ``sq[i, l]`` = :math:`\lVert g_i^{(l)}\rVert^2`: the
    only per-sample quantities the decomposition needs (:math:`O(nd)` work, :math:`O(nm)` memory).

    >>> grads = [torch.tensor([[3.0, 4.0], [0.0, 1.0]])]          # two examples, one layer of size 2
    >>> a, sq = layer_coefficients(grads, [torch.tensor([1.0, 0.0])])
    >>> a.tolist(), sq.tolist()
    ([[3.0], [0.0]], [[25.0], [1.0]])
    """
    return inner_products(grads, b), layer_sq_norms(grads)


def orthogonal_sq_norms(a: torch.Tensor, sq: torch.Tensor) -> torch.Tensor:
    r""":math:`\lVert p_i\rVert^2 = \sum_l\big(\lVert g_i^{(l)}\rVert^2 - (a_i^{(l)})^2\big)` (Pythagoras per layer),
    shape ``(n,)``, clamped at 0.

    >>> orthogonal_sq_norms(torch.tensor([[3.0]]), torch.tensor([[25.0]])).tolist()
    [16.0]
    """
    return (sq - a.pow(2)).clamp(min=0).sum(1)


def difference_sq_norms(a: torch.Tensor, sq: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    r""":math:`\lVert g_i - \tilde g\rVert^2` for a previous gradient :math:`\tilde g^{(l)} = r_lb^{(l)}`: the DIFF
    residual (Eq. (1)), shape ``(n,)``.

    :math:`\lVert g_i - \tilde g\rVert^2 = \lVert g_i\rVert^2 - 2\sum_l r_la_i^{(l)} + \sum_l r_l^2`; ``r`` (shape
    ``(m,)``) holds the layer norms :math:`r_l` of :math:`\tilde g`. Always >= :func:`orthogonal_sq_norms`
    ([DPDR-7]): the orthogonal part is the shortest residual :math:`g - cb` over all :math:`c`, and DIFF subtracts
    one particular :math:`c`.

    >>> difference_sq_norms(torch.tensor([[3.0]]), torch.tensor([[25.0]]), torch.tensor([5.0])).tolist()
    [20.0]
    """
    return (sq.sum(1) - 2 * (a * r).sum(1) + r.pow(2).sum()).clamp(min=0)


def rounding_slack(dtype: torch.dtype, d_max: int) -> float:
    r""":math:`\tau = 4(\log_2 d_{\max} + 1)\,\mathrm{eps}`, eps the machine epsilon of ``dtype``: the relative slack
    added to squared norms computed by cancellation.

    A dot product of length :math:`d` summed pairwise has a rounding error of at most about
    :math:`\log_2(d)\,\mathrm{eps}\,\lVert x\rVert\,\lVert y\rVert`; :math:`\lVert g\rVert^2 - a^2` therefore errs by
    at most about :math:`3\log_2(d)\,\mathrm{eps}\,\lVert g\rVert^2`, which :math:`\tau\lVert g\rVert^2` covers.

    >>> f"{rounding_slack(torch.float32, 4608):.1e}", f"{rounding_slack(torch.float64, 4608):.1e}"
    ('6.3e-06', '1.2e-14')
    """
    return 4 * (math.log2(max(d_max, 1)) + 1) * torch.finfo(dtype).eps


# --------------------------------------------------------------------------------------------------------------
# The method
# --------------------------------------------------------------------------------------------------------------

def _audit_base() -> Grads:
    """The audited base b: a unit direction per layer, orthogonal to the canary u = e_0 in the first (e_1), e_0 in
    the second."""
    b = zeros()
    b[0][1], b[1][0] = 1.0, 1.0
    return b


def _prepare_audit(method: "DPDR", grads: Grads) -> None:
    method.load_state_dict({"t": 1, "b": _audit_base(), "released_norms": torch.ones(len(SHAPES), dtype=DTYPE)})


def _audit_canary(method: "DPDR") -> Grads:
    """u + b (both layers' base vectors): huge parallel coefficients and a huge orthogonal part (u), so both clips
    saturate."""
    return [d + b for d, b in zip(dirac(), _audit_base())]


@register("dpdr")
class DPDR(Method):
    r"""DPDR: GDR steps :math:`t = 2, \ldots, s` (decompose against :math:`b`, clip and noise :math:`g_\perp` and
    :math:`\alpha`, reconstruct), DP-SGD at :math:`t = 1` and :math:`t > s`. Names follow the paper (Algorithm 1,
    Table 2).

    Args:
        C_perp, sigma_perp: clipping bound :math:`C_\perp` and noise multiplier :math:`\sigma_\perp` of the orthogonal
            parts (flat L2 over all layers).
        C_alpha, sigma_alpha: clipping bound :math:`C_\alpha` and noise multiplier :math:`\sigma_\alpha` of the vector
            of per-layer coefficients :math:`\alpha_i \in \mathbb R^m` (joint L2 clip, [DPDR-4]; clipping each
            :math:`|\alpha^{(l)}|` instead would multiply the sensitivity by :math:`\sqrt m`).
        C_g, sigma_g: DP-SGD's clipping bound :math:`C_g` and noise multiplier :math:`\sigma_g` for step 1 and the
            steps after :math:`s`.
        s: the last GDR step :math:`s` (default 50, the paper's best, Fig. 6); ``s = 1`` is plain DP-SGD.

    What a step releases (:meth:`releases`): DP-SGD's sum (sensitivity :math:`C_g`, noise std :math:`\sigma_gC_g`) on
    DP-SGD steps; on GDR steps the orthogonal parts (sensitivity :math:`C_\perp`, isotropic noise std
    :math:`\sigma_\perp C_\perp`) and the coefficients (sensitivity :math:`C_\alpha`, noise std
    :math:`\sigma_\alpha C_\alpha` along each :math:`b^{(l)}` only). One example contributes
    :math:`e_ia_i^{(l)}b^{(l)} + c_ip_i^{(l)}` per layer, two orthogonal parts of norms at most :math:`C_\alpha` and
    :math:`C_\perp`. The accountant sees :math:`\sigma_g`, and
    :math:`\sigma_{\mathrm{eff}}(\sigma_\perp, \sigma_\alpha)` on GDR steps (privacy hygiene rule 4).

    State (:meth:`state_dict`): ``t``, the base ``b`` (one unit tensor per layer) and ``released_norms`` (the layer
    norms of the previous released gradient, divided by :math:`B`; for the DIFF-residual diagnostic).

    Example (noise on; step 1 is DP-SGD, steps 2..3 are GDR steps, then DP-SGD):

    >>> from torch import nn
    >>> from dpbook.optim import DPOptimizer
    >>> torch.manual_seed(0) and None
    >>> model = nn.Linear(3, 2)
    >>> method = DPDR(C_perp=1.0, C_alpha=1.0, sigma_perp=1.0, sigma_alpha=2.0, C_g=1.0, sigma_g=1.1, s=3)
    >>> opt = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), method, sample_rate=0.1,
    ...                   expected_batch_size=4)
    >>> for _ in range(5):
    ...     _ = opt.step(torch.randn(4, 3), torch.randint(0, 2, (4,)))
    >>> [(round(sigma, 4), steps) for sigma, _, steps in opt.ledger.history]
    [(1.1, 1), (0.8944, 2), (1.1, 2)]
    >>> method.releases(), method.noise_multiplier()
    ((Release(name='gradient', sensitivity=1.0, noise_multiplier=1.1, in_gradient=True),), 1.1)
    """

    per_sample_vectors: ClassVar[bool] = False  # inner products with b, layer norms and a re-weighted sum

    declaration = Declaration(
        label="DPDR",
        audit=Scenario(dict(C_perp=1.0, C_alpha=1.0, sigma_perp=1.5, sigma_alpha=1.5, C_g=1.0, sigma_g=1.0, s=50),
                       "step 2 (the first GDR step) with the base b = (e_1, e_0) orthogonal to u; the canary u + b "
                       "has a huge orthogonal part and huge parallel coefficients, so both of its clips saturate",
                       prepare=_prepare_audit, canary_direction=_audit_canary),
        run={"C_perp": 1.0, "C_alpha": 0.3, "C_g": 1.0, "s": 3})

    @classmethod
    def from_plan(cls, plan, *, sigma_alpha_ratio: float = 3.0, **hyperparameters) -> "DPDR":
        r"""DPDR spending what ``plan`` charges one run: ``sigma_perp = plan.sigma``,
        ``sigma_alpha = sigma_alpha_ratio * sigma_perp`` (Table 2's ratios are 2.4 to 3.6 at :math:`\varepsilon = 3`
        and 1.3 to 1.6 at :math:`\varepsilon = 8`), and :math:`\sigma_g` calibrated (:func:`calibrate_sigma_g`) so
        that the run's exact history spends no more than the plan charges it:

        the plan's one charge rule (:meth:`~dpbook.tuning.TuningPlan.charge`: the run itself, :math:`G` copies
        composed, Theorem 1's per-run budget, or Papernot and Steinke's bound) at most what a DP-SGD run at
        ``plan.sigma`` is charged.

        >>> from dpbook.tuning import tuning_plan
        >>> plan = tuning_plan(4.0, 1e-5, sample_rate=0.01, steps=1000)
        >>> m = DPDR.from_plan(plan, C_perp=1.0, C_alpha=0.3, C_g=1.0, s=50)
        >>> m.sigma_perp == plan.sigma, round(m.sigma_alpha / m.sigma_perp, 6), m.sigma_g > plan.sigma
        (True, 3.0, True)
        """
        ratio = checks.positive("sigma_alpha_ratio (sigma_alpha / sigma_perp)", sigma_alpha_ratio)
        sigma_g = _sigma_g(plan, ratio, hyperparameters.get("s", 50))
        return cls(sigma_perp=plan.sigma, sigma_alpha=ratio * plan.sigma, sigma_g=sigma_g, **hyperparameters)

    def __init__(self, *, C_perp: float, C_alpha: float, sigma_perp: float, sigma_alpha: float, C_g: float,
                 sigma_g: float, s: int = 50):
        super().__init__()
        self.C_perp = checks.positive("C_perp (clipping bound of the orthogonal parts)", C_perp)
        self.C_alpha = checks.positive("C_alpha (clipping bound of the parallel coefficients)", C_alpha)
        self.C_g = checks.positive("C_g (DP-SGD clipping bound)", C_g)
        self.sigma_perp = checks.non_negative("sigma_perp (noise multiplier)", sigma_perp)
        self.sigma_alpha = checks.non_negative("sigma_alpha (noise multiplier)", sigma_alpha)
        self.sigma_g = checks.non_negative("sigma_g (noise multiplier)", sigma_g)
        self.s = checks.integer("s (last GDR step; GDR runs on steps 2..s, s = 1 is DP-SGD)", s, minimum=1)
        self.b: list[torch.Tensor] = []  # the base b^(l), set by bind, then after each release before step s
        self.released_norms = torch.zeros(0)  # ||g~^(l)_{t-1}|| / B, for the DIFF-residual diagnostic
        self._tau = 0.0
        self._diagnostics: dict[str, float] = {}

    # --- the schedule -----------------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """The paper's 1-based index of the coming step (``t`` of Algorithm 1)."""
        return self.t + 1

    def is_gdr_step(self) -> bool:
        r"""Is the coming step a decomposition (GDR) step, :math:`2 \le t \le s`?"""
        return 2 <= self.step <= self.s

    def bind(self, params: Sequence[torch.Tensor], *, expected_batch_size: float) -> None:
        super().bind(params, expected_batch_size=expected_batch_size)
        self.b = [torch.zeros_like(p, memory_format=torch.contiguous_format).detach() for p in params]
        self.released_norms = torch.zeros(len(params), dtype=params[0].dtype, device=params[0].device)
        self._tau = rounding_slack(params[0].dtype, max(p.numel() for p in params))

    # --- declarations -------------------------------------------------------------------------------------------
    def releases(self) -> tuple[Release, ...]:
        r"""DP-SGD's clipped sum on steps 1 and :math:`> s`; on a GDR step the orthogonal parts
        (:math:`C_\perp`, :math:`\sigma_\perp`) and the coefficients :math:`\alpha` (:math:`C_\alpha`,
        :math:`\sigma_\alpha`), accounted together at :math:`\sigma_{\mathrm{eff}}` (privacy hygiene rule 4)."""
        if self.is_gdr_step():
            return (Release("orthogonal", self.C_perp, self.sigma_perp),
                    Release("alpha", self.C_alpha, self.sigma_alpha))
        return (Release("gradient", self.C_g, self.sigma_g),)

    # --- the step -----------------------------------------------------------------------------------------------
    def start(self, params: Sequence[torch.Tensor]) -> dict:
        acc = super().start(params) | {"norm": 0.0, "clipped": 0}
        if self.is_gdr_step():
            zeros = self.released_norms.new_zeros(len(params))
            acc.update(ca=zeros.clone(), A=zeros.clone(), orthogonal=0.0, difference=0.0, clipped_alpha=0)
        return acc

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        # diagnostics are summed as tensors (no device synchronisation per micro-batch) and read in release
        acc["n"] += mb.n
        acc["norm"] = acc["norm"] + mb.norms.sum()
        if not self.is_gdr_step():  # DP-SGD: sum_i g_i min(1, C_g / ||g_i||)
            c = clip_factors(mb.norms, self.C_g)
            acc["clipped"] = acc["clipped"] + (c < 1).sum()
        else:
            a, sq = mb.inner(self.b), mb.layer_sq_norms()                      # a_i^(l) = <g_i^(l), b^(l)>
            p_sq = orthogonal_sq_norms(a, sq)                                  # ||p_i||^2, Pythagoras per layer
            c = clip_factors((p_sq + self._tau * sq.sum(1)).sqrt(), self.C_perp)   # min(1, C_perp/||p_i||)
            e = clip_factors(a.norm(dim=1), self.C_alpha)                 # min(1, C_alpha/||a_i||)
            acc["ca"] += c @ a                                                 # sum_i c_i a_i^(l)
            acc["A"] += e @ a                                                  # sum_i e_i a_i
            acc["clipped"] = acc["clipped"] + (c < 1).sum()
            acc["clipped_alpha"] = acc["clipped_alpha"] + (e < 1).sum()
            acc["orthogonal"] = acc["orthogonal"] + p_sq.sqrt().sum()
            acc["difference"] = acc["difference"] + difference_sq_norms(a, sq, self.released_norms).sqrt().sum()
        for total, part in zip(acc["sum"], mb.weighted_sum(c)):            # sum_i c_i g_i^(l)
            total.add_(part)

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        declared = acc["releases"]
        if self.is_gdr_step():
            P = [s - ca * b for s, ca, b in zip(acc["sum"], acc["ca"], self.b)]   # sum_i c_i p_i^(l)
            g_perp = [noise.add_(declared[0], p) for p in P]                    # sigma_perp C_perp
            alpha = noise.add_(declared[1], acc["A"])                           # sigma_alpha C_alpha
            released = [al * b + gp for al, b, gp in zip(alpha, self.b, g_perp)]  # g~ = alpha~ b + g~_perp
        else:
            released = [noise.add_(declared[0], s) for s in acc["sum"]]         # sigma_g C_g
        self._record_diagnostics(acc, released)
        if self.step < self.s:  # the next step is a GDR step: its base is this release (post-processing) [DPDR-8]
            self.b = unit_directions(released)
            self.released_norms = torch.stack([g.norm() for g in released]) / self.B
        return released

    # --- state and diagnostics ------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"t": self.t, "b": [b.clone() for b in self.b], "released_norms": self.released_norms.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.t = int(state["t"])
        self.b = [b.clone() for b in state["b"]]
        self.released_norms = state["released_norms"].clone()

    def _record_diagnostics(self, acc: dict, released: Grads) -> None:
        n = acc["n"]
        mean = (lambda total: float(total) / n) if n else (lambda total: math.nan)
        gdr = self.is_gdr_step()
        self._diagnostics = {"gdr": float(gdr),
                             "released_norm": float(torch.sqrt(sum(g.pow(2).sum() for g in released))) / self.B}
        self._nonprivate = {"nonprivate/norm": mean(acc["norm"]), "nonprivate/clipped_fraction": mean(acc["clipped"])}
        if gdr:
            self._nonprivate.update({"nonprivate/orthogonal_norm": mean(acc["orthogonal"]),
                                     "nonprivate/difference_norm": mean(acc["difference"]),
                                     "nonprivate/clipped_fraction_alpha": mean(acc["clipped_alpha"])})

    def diagnostics(self) -> dict[str, float]:
        r"""The bounds, and of the last step ``gdr`` (1.0 on GDR steps) and ``released_norm``
        (:math:`\lVert\tilde g\rVert/B`).

        :meth:`nonprivate_diagnostics` gives, of the last step's raw batch (not private), the means of
        :math:`\lVert g_i\rVert`, :math:`\lVert p_i\rVert` and of the DIFF residual
        :math:`\lVert g_i - \tilde g_{t-1}\rVert`, and the fractions of examples clipped.
        """
        return {"C_perp": self.C_perp, "C_alpha": self.C_alpha, "C_g": self.C_g, **self._diagnostics}


# --------------------------------------------------------------------------------------------------------------
# Accounting: the schedule's history and the exact calibration of sigma_g
# --------------------------------------------------------------------------------------------------------------

def dpdr_history(*, sigma_g: float, sigma_perp: float, sigma_alpha: float, s: int, sample_rate: float,
                 steps: int) -> list[tuple[float, float, int]]:
    r"""The accountant's history of a DPDR run of ``steps`` = :math:`T` steps: 1 DP-SGD step at :math:`\sigma_g`,
    :math:`s - 1` GDR steps at :math:`\sigma_{\mathrm{eff}}(\sigma_\perp, \sigma_\alpha)`, :math:`T - s` DP-SGD steps
    at :math:`\sigma_g` (truncated to :math:`T`; empty segments dropped).

    :math:`s \ge T` is GDR on all steps after the first.

    >>> history = dpdr_history(sigma_g=0.803, sigma_perp=0.81, sigma_alpha=2.0, s=50, sample_rate=0.01, steps=4700)
    >>> [(round(sigma, 4), q, steps) for sigma, q, steps in history]
    [(0.803, 0.01, 1), (0.7508, 0.01, 49), (0.803, 0.01, 4650)]
    >>> dpdr_history(sigma_g=1.0, sigma_perp=3.0, sigma_alpha=4.0, s=50, sample_rate=0.01, steps=3)  # T < s
    [(1.0, 0.01, 1), (2.4, 0.01, 2)]
    """
    s = checks.integer("s", s, minimum=1)
    steps = checks.integer("steps", steps, minimum=0)
    q = checks.rate("sample_rate", sample_rate)
    eff = sigma_eff(sigma_perp, sigma_alpha)
    gdr = max(0, min(s, steps) - 1)
    segments = [(float(sigma_g), q, min(1, steps)), (eff, q, gdr), (float(sigma_g), q, max(0, steps - s))]
    return [seg for seg in segments if seg[2] > 0]


def gdr_release_mu(*, C_perp: float, C_alpha: float, sigma_perp: float, sigma_alpha: float) -> float:
    r"""The Gaussian-DP :math:`\mu` that one GDR release actually has, for an example that saturates both clips.

    The accountant charges a GDR step as one Gaussian mechanism of multiplier
    :math:`\sigma_{\mathrm{eff}}(\sigma_\perp, \sigma_\alpha)`, i.e.
    :math:`\mu = (\sigma_\perp^{-2} + \sigma_\alpha^{-2})^{1/2}`, as if :math:`\tilde\alpha` were seen alone. But the
    release is :math:`\tilde\alpha b + \tilde g_\perp` and the isotropic noise of :math:`\tilde g_\perp` also lies
    along each :math:`b^{(l)}`: the parallel part of the example's contribution (norm at most :math:`C_\alpha`) is
    seen through noise of std :math:`(\sigma_\alpha^2C_\alpha^2 + \sigma_\perp^2C_\perp^2)^{1/2}`, the orthogonal
    part (:math:`C_\perp`) through :math:`\sigma_\perp C_\perp`. With independent coordinates the two leaks compose as

    .. math::

        \mu^2 = \frac{C_\alpha^2}{\sigma_\alpha^2C_\alpha^2 + \sigma_\perp^2C_\perp^2} + \frac1{\sigma_\perp^2}

    (the worst case; an example that does not saturate both clips leaks less), never more than what is charged.

    >>> round(gdr_release_mu(C_perp=1.0, C_alpha=1.0, sigma_perp=1.5, sigma_alpha=1.5), 4)   # charged: 0.9428
    0.8165
    """
    C_perp, C_alpha = checks.positive("C_perp", C_perp), checks.positive("C_alpha", C_alpha)
    sigma_perp = checks.positive("sigma_perp", sigma_perp, "without noise the release is not private")
    sigma_alpha = checks.non_negative("sigma_alpha", sigma_alpha)
    parallel = C_alpha ** 2 / ((sigma_alpha * C_alpha) ** 2 + (sigma_perp * C_perp) ** 2)
    return math.sqrt(parallel + 1 / sigma_perp ** 2)


@functools.lru_cache(maxsize=1024)  # a grid repeats each s across its clipping bounds
def _sigma_g(plan, ratio: float, s: int) -> float:
    """The sigma_g of :meth:`DPDR.from_plan`: the run's exact history charged as ``plan`` charges it, at most what
    a DP-SGD run at ``plan.sigma`` is charged."""
    return calibrate_sigma_g(plan.charge_limit, sigma_perp=plan.sigma, sigma_alpha=ratio * plan.sigma, s=s,
                             sample_rate=plan.sample_rate, steps=plan.steps, delta=plan.delta,
                             accountant=plan.accountant, charge=plan.charge)


def calibrate_sigma_g(target_epsilon: float, *, sigma_perp: float, sigma_alpha: float, s: int, sample_rate: float,
                      steps: int, delta: float, accountant: str = "rdp", epsilon_tolerance: float = 1e-4,
                      charge: Callable[[list], float] | None = None) -> float:
    r"""The :math:`\sigma_g` that makes a DPDR run cost ``target_epsilon`` for its exact heterogeneous history.

    Given the GDR noise :math:`(\sigma_\perp, \sigma_\alpha)`, the schedule (:math:`s`, :math:`T` = ``steps``) and
    :math:`q`, search :math:`\sigma_g` until
    ``target_epsilon - epsilon_tolerance <= epsilon(dpdr_history(...)) <= target_epsilon``, with the library's one
    calibration (:func:`dpbook.accounting.calibrate`). :math:`\varepsilon` decreases as :math:`\sigma_g` grows,
    towards the cost of the :math:`s - 1` GDR steps alone (:math:`\sigma_g = \infty`); if that cost already reaches
    the target, no :math:`\sigma_g` can work and a ValueError says so.

    ``charge(history)``, when given, replaces the run's own epsilon at ``delta``: what a tuning plan charges a search
    whose runs have this history (:meth:`dpbook.tuning.TuningPlan.charge`).

    Example: the paper's MNIST row at :math:`\varepsilon = 3` (:math:`\sigma_\perp = 0.81`,
    :math:`\sigma_\alpha = 2.0`, :math:`s = 50`, :math:`B = 256`, 20 epochs); Table 2 prints :math:`\sigma_g = 0.803`,
    which overspends slightly once the 49 GDR steps are counted at :math:`\sigma_{\mathrm{eff}}`.

    >>> from dpbook.accounting import epsilon_of_history
    >>> q, T = 256 / 60000, 4700
    >>> sigma_g = calibrate_sigma_g(3.0, sigma_perp=0.81, sigma_alpha=2.0, s=50, sample_rate=q, steps=T, delta=1e-5)
    >>> round(sigma_g, 3)
    0.805
    >>> history = dpdr_history(sigma_g=sigma_g, sigma_perp=0.81, sigma_alpha=2.0, s=50, sample_rate=q, steps=T)
    >>> round(epsilon_of_history(history, delta=1e-5), 3)
    3.0
    """
    target = checks.positive("target_epsilon", target_epsilon)
    tol = checks.positive("epsilon_tolerance", epsilon_tolerance)
    checks.integer("steps", steps, minimum=1)

    def eps(sigma_g: float) -> float:
        history = dpdr_history(sigma_g=sigma_g, sigma_perp=sigma_perp, sigma_alpha=sigma_alpha, s=s,
                               sample_rate=sample_rate, steps=steps)
        return epsilon_of_history(history, delta, accountant=accountant) if charge is None else charge(history)

    floor = eps(math.inf)  # the GDR steps alone
    if floor >= target:
        raise ValueError(
            f"target_epsilon={target!r} is unreachable: the s - 1 = {max(0, min(s, steps) - 1)} GDR steps at "
            f"sigma_eff(sigma_perp={sigma_perp!r}, sigma_alpha={sigma_alpha!r}) "
            f"= {sigma_eff(sigma_perp, sigma_alpha):.4g} "
            f"alone already cost epsilon = {floor:.4g} (q={sample_rate!r}, delta={delta!r}, {accountant!r}). "
            f"Use larger sigma_perp or sigma_alpha, a smaller s, or a larger target_epsilon.")

    return calibrate(eps, target, epsilon_tolerance=tol, name="sigma_g",
                     fix="Use larger sigma_perp or sigma_alpha, a smaller s, or a larger target_epsilon.")
