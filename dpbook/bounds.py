r"""Convergence bounds of the three papers as code: every term of every theorem, kept apart.

Each function evaluates one theorem (or one numbered equation) at its named quantities and returns a
:class:`BoundTerms` whose fields are the theorem's terms and whose ``total`` is their sum:

- ``optimisation``: the term of plain SGD, :math:`(\mathcal L(\theta_1) - \mathcal L^*)/(T\eta)`;
- ``second_moment``: the step-size term :math:`L\eta\,\mathbb E\lVert\bar g\rVert^2` of the smoothness step (0 where
  a paper has none);
- ``noise``: the term of the DP Gaussian noise;
- ``clipping_bias``: the term that does not vanish with :math:`T` (clipping, or in DP-PSASC the sampling bias).

The papers leave constants unspecified (:math:`L`, :math:`G_{\max}`, :math:`c_1`, :math:`c_2`, the loss gap, the
constants hidden in :math:`\mathcal O(\cdot)`); here they are explicit keyword arguments, never defaults hidden
inside a formula. Inputs outside a theorem's conditions raise a ``ValueError`` (via :mod:`dpbook.checks`).

Ids in brackets (``[DCSGD-n]``, ``[DPDR-n]``, ``[PSASC-n]``) cite the book's chapter *Readings of the papers*
(``book/readings_*.md``); every docstring says which reading is implemented.

Covered: DC-SGD Theorem 3 (Eqs. 9, 22, 23) for DC-SGD-P, DC-SGD-E (Eqs. 10/24, 25); DPDR Lemma 2 and
Theorem 2; DP-PSASC Theorem 2 (step size, inferred leading term, rate) and Theorem 3 (schedules, rate) and the
crossover of their rates.
"""

from __future__ import annotations

__all__ = [
    "BoundTerms", "dcsgd_sigma", "dcsgd_p_theorem3", "dcsgd_theorem3_eq22", "dcsgd_balanced", "dcsgd_e_eq10",
    "dpdr_lemma2", "dpdr_theorem2", "dpdr_clip_probability", "psasc_theorem2_step_size",
    "psasc_theorem2_leading_term", "psasc_theorem2_rate", "PSASCSchedules", "psasc_theorem3_schedules",
    "psasc_theorem3_rate", "psasc_crossover_T", "Balanced"
]

import math
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from dpbook import checks


@dataclass(frozen=True)
class BoundTerms:
    """The terms of one convergence bound; ``total`` is their sum. :attr:`TERMS` names them and the total, in order:
    the columns of a table of bounds.

    >>> BoundTerms(optimisation=1.0, noise=0.5, clipping_bias=0.25).total
    1.75
    >>> [getattr(BoundTerms(1.0), t) for t in BoundTerms.TERMS]
    [1.0, 0.0, 0.0, 0.0, 1.0]
    """

    TERMS: ClassVar[tuple[str, ...]] = ("optimisation", "second_moment", "noise", "clipping_bias", "total")

    optimisation: float
    second_moment: float = 0.0
    noise: float = 0.0
    clipping_bias: float = 0.0

    @property
    def total(self) -> float:
        return self.optimisation + self.second_moment + self.noise + self.clipping_bias


# ----------------------------------------------------------------------------------------------- helpers
def _per_step(name: str, value, T: int, *, upper: float = math.inf) -> np.ndarray | float:
    """A number (the same at every step) or a sequence of length T, each in [0, upper] and finite."""
    if np.ndim(value) == 0:
        v = checks.non_negative(name, value)
        if v > upper:
            raise ValueError(f"{name} must be <= {upper:g}, got {value!r}")
        return v
    arr = np.asarray(value, dtype=float)
    if arr.ndim != 1 or arr.shape[0] != T:
        raise ValueError(f"{name} must be a number or a sequence of length T={T}, got shape {arr.shape}")
    if not (np.all(np.isfinite(arr)) and np.all(arr >= 0) and np.all(arr <= upper)):
        raise ValueError(f"{name} must hold finite numbers in [0, {upper:g}], got {value!r}")
    return arr


def _mean(value) -> float:
    """Mean over steps of a per-step quantity (a scalar is constant over steps)."""
    return float(np.mean(value)) if np.ndim(value) else float(value)


# ------------------------------------------------------------------------------------------------ DC-SGD
def dcsgd_sigma(T: int, *, q: float, epsilon: float, delta: float, c1: float, c2: float) -> float:
    r"""The noise multiplier of DC-SGD's Theorem 3: :math:`\sigma = c_2q\sqrt{T\ln(1/\delta)}/\varepsilon`.

    The theorem holds "for any :math:`\varepsilon < c_1\gamma^2T`"; we read :math:`\gamma` as the sampling rate
    :math:`q` [DCSGD-21], so :math:`\varepsilon \ge c_1q^2T` is an error. :math:`c_1` and :math:`c_2` (``c1``,
    ``c2``) are the unspecified constants of the moments accountant (Abadi et al.); pass them explicitly.

    >>> round(dcsgd_sigma(1000, q=0.01, epsilon=0.05, delta=1e-5, c1=1.0, c2=1.0), 4)  # 0.01*sqrt(1000 ln 1e5)/0.05
    21.4597
    >>> dcsgd_sigma(10, q=0.01, epsilon=1.0, delta=1e-5, c1=1.0, c2=1.0)
    Traceback (most recent call last):
    ...
    ValueError: epsilon must be < c1 q^2 T = 0.001 (Theorem 3's condition [DCSGD-21]), got 1.0
    """
    T = checks.integer("T", T)
    q = checks.rate("q", q, "the sampling rate B/N")
    epsilon = checks.positive("epsilon", epsilon)
    delta = checks.open_unit("delta", delta)
    c1 = checks.positive("c1", c1)
    c2 = checks.positive("c2", c2)
    limit = c1 * q * q * T
    if not epsilon < limit:
        raise ValueError(f"epsilon must be < c1 q^2 T = {limit:g} (Theorem 3's condition [DCSGD-21]), got {epsilon!r}")
    return c2 * q * math.sqrt(T * math.log(1 / delta)) / epsilon


def _dcsgd_common(T, eta, C, sigma, d, B, L, G_max, loss_gap, grad_second_moments, sigma_H):
    T = checks.integer("T", T)
    eta = checks.positive("eta", eta, "the constant step size")
    sigma = checks.positive("sigma", sigma, "the noise multiplier the accountant sees")
    if sigma_H is not None:
        sigma_H = checks.real("sigma_H", sigma_H)
        if not sigma_H > sigma:
            raise ValueError(f"sigma_H must be > sigma = {sigma!r} (sigma_T = (sigma^-2 - sigma_H^-2)^-1/2), "
                             f"got {sigma_H!r}")
        sigma = 1.0 / math.sqrt(sigma ** -2 - (0.0 if sigma_H == math.inf else sigma_H ** -2))
    d = checks.integer("d", d)
    B = checks.positive("B", B, "the expected batch size")
    L = checks.positive("L", L, "the smoothness constant")
    G_max = checks.positive("G_max", G_max, "the bound on per-sample gradient norms")
    loss_gap = checks.non_negative("loss_gap", loss_gap, "E L(theta_1) - E L(theta_{T+1}) <= L(theta_1) - L_*")
    C = _per_step("C", C, T)
    m2 = G_max * G_max if grad_second_moments is None else _per_step("grad_second_moments", grad_second_moments, T)
    optimisation = loss_gap / (T * eta)
    second_moment = L * eta * _mean(m2)
    noise = L * eta * sigma ** 2 * d / B ** 2 * _mean(np.square(C))
    return T, G_max, optimisation, second_moment, noise


def dcsgd_p_theorem3(T: int, eta: float, C, *, p: float, sigma: float, d: int, B: float, L: float, G_max: float,
                     loss_gap: float, full_grad_norms=None, grad_second_moments=None,
                     sigma_H: float | None = None) -> BoundTerms:
    r"""DC-SGD-P, Theorem 3, first line (Eq. 9 = Eq. 20 of Appendix B), at a given noise multiplier.

    .. math:: \frac1T\mathbb E\sum_t\lVert\nabla\mathcal L(\theta_t)\rVert^2\le
       \frac{\Delta_{\mathcal L}}{T\eta}+\frac{L\eta}{T}\sum_t\mathbb E\lVert\bar g_t\rVert^2
       +\frac{L\eta\sigma^2d}{B^2T}\sum_tC_t^2+\frac1T\sum_t\lVert g_t\rVert\,(1-p)\,G_{\max}

    - ``C``: the thresholds :math:`C_t` (a number, constant over steps, or a sequence of length :math:`T`).
    - ``loss_gap``: :math:`\Delta_{\mathcal L} = \mathbb E\,\mathcal L(\theta_1) - \mathbb E\,\mathcal L(\theta_{T+1})`
      (at most :math:`\mathcal L(\theta_1) - \mathcal L^*`, Assumption 3).
    - ``full_grad_norms``: :math:`\lVert g_t\rVert = \lVert\nabla\mathcal L(\theta_t)\rVert` per step; default
      :math:`G_{\max}` (Eq. 22's bound).
    - ``grad_second_moments``: :math:`\mathbb E\lVert\bar g_t\rVert^2` per step; default :math:`G_{\max}^2`
      (Eq. 22's bound).
    - ``sigma_H``: ``None`` (default) is the paper's reading, an exact histogram whose privacy cost is
      ignored, so the gradient's multiplier is :math:`\sigma` (Appendix B; the theorem's text says
      ":math:`\sigma_H = \sigma`" [DCSGD-20]). A number uses the library's split
      :math:`\sigma_T = (\sigma^{-2} - \sigma_H^{-2})^{-1/2}` and requires :math:`\sigma_H > \sigma`.

    The noise is divided by :math:`B` (Eq. 14; the definition in Appendix B omits it [DCSGD-24]); the clipped
    fraction is :math:`P(C_t) = 1 - p` (exact histogram, Eq. 18); :math:`\sum_{i=1}^N` [DCSGD-27].

    >>> b = dcsgd_p_theorem3(100, 0.1, 0.5, p=0.9, sigma=1.0, d=10, B=10, L=1.0, G_max=1.0, loss_gap=2.0)
    >>> [round(x, 6) for x in (b.optimisation, b.second_moment, b.noise, b.clipping_bias)]
    [0.2, 0.1, 0.0025, 0.1]
    >>> round(b.total, 6)
    0.4025
    >>> dcsgd_p_theorem3(100, 0.1, 0.5, p=0.9, sigma=1.0, d=10, B=10, L=1.0, G_max=1.0, loss_gap=2.0, sigma_H=0.5)
    Traceback (most recent call last):
    ...
    ValueError: sigma_H must be > sigma = 1.0 (sigma_T = (sigma^-2 - sigma_H^-2)^-1/2), got 0.5
    """
    p = checks.open_unit("p", p, "the target percentile of DC-SGD-P")
    T, G_max, optimisation, second_moment, noise = _dcsgd_common(T, eta, C, sigma, d, B, L, G_max, loss_gap,
                                                                 grad_second_moments, sigma_H)
    g = G_max if full_grad_norms is None else _per_step("full_grad_norms", full_grad_norms, T)
    return BoundTerms(optimisation, second_moment, noise, _mean(g) * (1 - p) * G_max)


def dcsgd_theorem3_eq22(T: int, eta: float, *, N: int, B: float, epsilon: float, delta: float, d: int, L: float,
                        G_max: float, loss_gap: float, c1: float, c2: float, p: float | None = None) -> BoundTerms:
    r"""Theorem 3's worst case in terms of the privacy budget (Eq. 22 for DC-SGD-P, Eq. 25 for DC-SGD-E).

    .. math::

       \le\frac{\Delta_{\mathcal L}}{T\eta}+L\eta G_{\max}^2
       +\frac{L\,T\eta\,d\ln(1/\delta)\,c_2^2G_{\max}^2}{N^2\varepsilon^2}+\text{bias}

    with :math:`\sigma = c_2q\sqrt{T\ln(1/\delta)}/\varepsilon`, :math:`q = B/N` (so
    :math:`\sigma^2/B^2 = c_2^2T\ln(1/\delta)/(N^2\varepsilon^2)`) and :math:`C_t \le G_{\max}`. The paper prints
    :math:`v^2` for :math:`c_2^2` [DCSGD-23]. Bias: :math:`(1-p)G_{\max}^2` for P (give ``p``),
    :math:`G_{\max}^2` for E (``p=None``, Eq. 25). Requires :math:`\varepsilon < c_1q^2T` [DCSGD-21].

    >>> b = dcsgd_theorem3_eq22(100, 0.1, N=1000, B=100, epsilon=0.5, delta=math.exp(-2), d=50, L=1.0, G_max=1.0,
    ...                         loss_gap=1.0, c1=1.0, c2=1.0, p=0.5)
    >>> [round(x, 6) for x in (b.optimisation, b.second_moment, b.noise, b.clipping_bias)]  # noise 10*50*2/(1e6*0.25)
    [0.1, 0.1, 0.004, 0.5]
    """
    N = checks.integer("N", N)
    B = checks.positive("B", B, "the expected batch size")
    if B > N:
        raise ValueError(f"B must be <= N = {N}, got {B!r}")
    dcsgd_sigma(T, q=B / N, epsilon=epsilon, delta=delta, c1=c1, c2=c2)  # validates the theorem's condition
    eta = checks.positive("eta", eta, "the constant step size")
    d = checks.integer("d", d)
    L = checks.positive("L", L, "the smoothness constant")
    G_max = checks.positive("G_max", G_max, "the bound on per-sample gradient norms")
    loss_gap = checks.non_negative("loss_gap", loss_gap)
    bias = G_max * G_max if p is None else (1 - checks.open_unit("p", p)) * G_max * G_max
    noise = L * T * eta * d * math.log(1 / delta) * c2 ** 2 * G_max ** 2 / (N ** 2 * epsilon ** 2)
    return BoundTerms(loss_gap / (T * eta), L * eta * G_max * G_max, noise, bias)


class Balanced(NamedTuple):
    T: float
    eta: float
    rate: float


def dcsgd_balanced(*, N: int, epsilon: float, delta: float, d: int) -> Balanced:
    r"""The balanced choice of Eq. 23: :math:`\eta = \sqrt{d\ln(1/\delta)}/(N\varepsilon)`,
    :math:`T\eta = N\varepsilon/\sqrt{d\ln(1/\delta)}`, hence :math:`T = N^2\varepsilon^2/(d\ln(1/\delta))`; with unit
    constants the three :math:`O` terms of Eq. 22 then all equal
    :math:`\mathrm{rate} = \sqrt{d\ln(1/\delta)}/(N\varepsilon)` (the bound is :math:`O(\mathrm{rate})` + bias,
    Eq. 23/26; Appendix C's ":math:`\eta = 1/\sqrt T`" does not give this rate [DCSGD-25], so we use the main text's
    choice for E too).

    :math:`T` is returned as a real number; round it to steps yourself.

    >>> bal = dcsgd_balanced(N=60000, epsilon=1.0, delta=math.exp(-4), d=100)
    >>> round(bal.rate, 8), round(bal.T, 3), round(bal.T * bal.eta, 3)  # sqrt(400)/60000; 60000^2/400; 60000/20
    (0.00033333, 9000000.0, 3000.0)
    """
    N = checks.integer("N", N)
    epsilon = checks.positive("epsilon", epsilon)
    delta = checks.open_unit("delta", delta)
    d = checks.integer("d", d)
    rate = math.sqrt(d * math.log(1 / delta)) / (N * epsilon)
    return Balanced(T=1 / rate ** 2, eta=rate, rate=rate)


def dcsgd_e_eq10(T: int, eta: float, C, *, sigma: float, d: int, B: float, L: float, G_max: float, loss_gap: float,
                 grad_norms=None, grad_second_moments=None, sigma_H: float | None = None) -> BoundTerms:
    r"""DC-SGD-E, Eq. 10 (= Eq. 24 of Appendix C), at a given noise multiplier.

    .. math::

       \le\frac{\Delta_{\mathcal L}}{T\eta}+\frac{L\eta}{T}\sum_t\mathbb E\lVert\bar g_t\rVert^2+\frac1T\sum_t\Big(
       L\eta\frac{\sigma^2C_t^2d}{B^2}+\frac1N\sum_iG_{\max}\max(\lVert g_{t,i}\rVert-C_t,0)\Big)

    ``grad_norms``: the per-sample norms :math:`\lVert g_{t,i}\rVert`, shape ``(N,)`` (the same at every step) or
    ``(T, N)``; each must be :math:`\le G_{\max}` (Assumption 2). ``None`` bounds every excess by :math:`G_{\max}`
    (Eq. 25: bias :math:`G_{\max}^2`). The paper's intermediate line of Eq. 24 misplaces the :math:`t`-sum
    [DCSGD-26]; we sum bias and variance inside it.
    Other arguments as in :func:`dcsgd_p_theorem3`.

    >>> b = dcsgd_e_eq10(10, 0.1, 1.0, sigma=2.0, d=4, B=4, L=1.0, G_max=3.0, loss_gap=1.0, grad_norms=[0.5, 2.0, 3.0])
    >>> [round(x, 6) for x in (b.optimisation, b.second_moment, b.noise, b.clipping_bias)]  # bias 3*(0+1+2)/3
    [1.0, 0.9, 0.1, 3.0]
    """
    T, G_max, optimisation, second_moment, noise = _dcsgd_common(T, eta, C, sigma, d, B, L, G_max, loss_gap,
                                                             grad_second_moments, sigma_H)
    if grad_norms is None:
        bias = G_max * G_max
    else:
        g = np.asarray(grad_norms, dtype=float)
        g = g[None, :] if g.ndim == 1 else g
        if g.ndim != 2 or g.shape[1] == 0 or g.shape[0] not in (1, T):
            raise ValueError(f"grad_norms must have shape (N,) or (T={T}, N), got {np.shape(grad_norms)}")
        if not (np.all(np.isfinite(g)) and np.all(g >= 0) and np.all(g <= G_max)):
            raise ValueError(f"grad_norms must lie in [0, G_max={G_max!r}] (Assumption 2)")
        if np.ndim(C) == 0:
            excess = np.maximum(g - float(C), 0.0)
        else:  # (T, N): the norms of step t (or the same norms at every step) against C_t
            excess = np.maximum(g - np.asarray(C, dtype=float)[:, None], 0.0)
        bias = G_max * float(excess.mean())
    return BoundTerms(optimisation, second_moment, noise, bias)


# -------------------------------------------------------------------------------------------------- DPDR
def _dpdr_common(T, eta, loss0, rho, d, C_perp, sigma_perp):
    return (checks.integer("T", T), checks.positive("eta", eta, "the learning rate (the paper's gamma)"),
            checks.non_negative("loss0", loss0, "L(w_0), read as L(w_0) - L_* with L >= 0"),
            checks.positive("rho", rho, "the smoothness constant"), checks.integer("d", d),
            checks.positive("C_perp", C_perp), checks.non_negative("sigma_perp", sigma_perp))


def dpdr_lemma2(T: int, eta: float, *, loss0: float, rho: float, d: int, C_perp: float, sigma_perp: float,
                c: float) -> BoundTerms:
    r"""DPDR, Lemma 2 (no clipping ever active), with the learning rate :math:`\eta` (the paper's
    :math:`\gamma`):

    .. math:: \mathbb E\lVert\nabla\mathcal L\rVert^2 \le \frac{\mathcal L(w_0)}{\eta T}
       + O\big(\rho\eta dC_\perp^2\sigma_\perp^2\big)

    Readings: the left-hand side is the average over :math:`t = 1, \ldots, T`; :math:`\mathcal L(w_0)` stands for
    :math:`\mathcal L(w_0) - \mathcal L^*` (:math:`\mathcal L \ge 0`); the :math:`\alpha` noise
    :math:`mC_\alpha^2\sigma_\alpha^2` is absorbed because :math:`m \ll d`. ``c`` is the constant hidden in
    :math:`O(\cdot)` (unspecified by the paper; pass it). No clipping term: ``clipping_bias = 0``.

    >>> b = dpdr_lemma2(100, 0.01, loss0=2.0, rho=1.0, d=1000, C_perp=0.1, sigma_perp=2.0, c=1.0)
    >>> round(b.optimisation, 6), round(b.noise, 6), b.clipping_bias  # 2/1; 0.01*1000*0.01*4
    (2.0, 0.4, 0.0)
    """
    T, eta, loss0, rho, d, C_perp, sigma_perp = _dpdr_common(T, eta, loss0, rho, d, C_perp, sigma_perp)
    c = checks.positive("c", c, "the constant hidden in O(.)")
    return BoundTerms(loss0 / (eta * T), 0.0, c * rho * eta * d * C_perp ** 2 * sigma_perp ** 2, 0.0)


def dpdr_theorem2(T: int, eta: float, *, B: float, loss0: float, rho: float, d: int, m: int, C_perp: float,
                  C_alpha: float, sigma_perp: float, sigma_alpha: float, tau_perp, tau_alpha, P_perp, P_alpha,
                  noise_reading: str = "printed") -> BoundTerms:
    r"""DPDR, Theorem 2 (with clipping), second line of the right-hand side, with the learning rate
    :math:`\eta` (the paper's :math:`\gamma`, and :math:`\eta'` its :math:`\gamma'`):

    .. math:: \frac{\mathcal L(w_0)}{\eta T}+\frac{\rho\eta'}2\big(2C_\perp^2+dC_\perp^2\sigma_\perp^2
       +2C_\alpha^2+mC_\alpha^2\sigma_\alpha^2\big)\\+\frac{15}{4T}\sum_t\big(C_\perp\tau_{\perp,t}\sqrt{P_{\perp,t}}
       +C_\alpha\tau_{\alpha,t}\sqrt{P_{\alpha,t}}\big),\qquad\eta'=B\eta.

    Terms: ``second_moment`` :math:`= \frac{\rho\eta'}2(2C_\perp^2 + 2C_\alpha^2)`; ``noise``
    :math:`= \frac{\rho\eta'}2(dC_\perp^2\sigma_\perp^2 + mC_\alpha^2\sigma_\alpha^2)`; ``clipping_bias`` the
    :math:`15/4` term. ``P_perp``, ``P_alpha`` (:math:`P_\perp`, :math:`P_\alpha`) are the probabilities that
    clipping is *active* (the theorem's convention; the appendix uses the complement and the printed
    :math:`P_\parallel` has :math:`\nabla\mathcal L_\perp` inside [DPDR-17]); they and ``tau_*`` may be numbers
    (stationary) or sequences of length :math:`T`. :math:`C_\parallel` is :math:`C_\alpha`.

    ``noise_reading``: ``"printed"`` uses the constants as printed; ``"per_batch"`` divides the noise terms by
    :math:`B^2` as the appendix's second-moment bound does (:math:`dC_\perp^2\sigma_\perp^2/B^2`), the inconsistency
    flagged as [DPDR-19] (whose leading :math:`C` are read as :math:`C^2`). :math:`m` must satisfy
    :math:`1 \le m \le d`.

    >>> b = dpdr_theorem2(10, 0.1, B=2, loss0=1.0, rho=1.0, d=100, m=1, C_perp=1.0, C_alpha=2.0, sigma_perp=1.0,
    ...                   sigma_alpha=1.0, tau_perp=1.0, tau_alpha=0.5, P_perp=0.25, P_alpha=0.0)
    >>> [round(x, 6) for x in (b.optimisation, b.second_moment, b.noise, b.clipping_bias)]
    [1.0, 1.0, 10.4, 1.875]
    >>> round(dpdr_theorem2(10, 0.1, B=2, loss0=1.0, rho=1.0, d=100, m=1, C_perp=1.0, C_alpha=2.0, sigma_perp=1.0,
    ...                     sigma_alpha=1.0, tau_perp=1.0, tau_alpha=0.5, P_perp=0.25, P_alpha=0.0,
    ...                     noise_reading="per_batch").noise, 6)
    2.6
    """
    T, eta, loss0, rho, d, C_perp, sigma_perp = _dpdr_common(T, eta, loss0, rho, d, C_perp, sigma_perp)
    B = checks.positive("B", B, "the expected batch size")
    m = checks.integer("m", m)
    if m > d:
        raise ValueError(f"m must be <= d = {d} (the paper assumes m << d), got {m!r}")
    C_alpha = checks.positive("C_alpha", C_alpha)
    sigma_alpha = checks.non_negative("sigma_alpha", sigma_alpha)
    checks.one_of("noise_reading", noise_reading, ("printed", "per_batch"))
    tp = _per_step("tau_perp", tau_perp, T)
    ta = _per_step("tau_alpha", tau_alpha, T)
    Pp = _per_step("P_perp", P_perp, T, upper=1.0)
    Pa = _per_step("P_alpha", P_alpha, T, upper=1.0)
    half = rho * B * eta / 2
    scale = 1.0 if noise_reading == "printed" else 1.0 / B ** 2
    second_moment = half * (2 * C_perp ** 2 + 2 * C_alpha ** 2)
    noise = half * scale * (d * C_perp ** 2 * sigma_perp ** 2 + m * C_alpha ** 2 * sigma_alpha ** 2)
    bias = 15 / 4 * (C_perp * _mean(np.asarray(tp) * np.sqrt(Pp)) + C_alpha * _mean(np.asarray(ta) * np.sqrt(Pa)))
    return BoundTerms(loss0 / (eta * T), second_moment, noise, bias)


def dpdr_clip_probability(C: float, *, mean_norm: float, tau: float, d: int) -> float:
    r"""A model of the clipping probability of Theorem 2: :math:`P(C) = \Pr[\lVert\mu + \xi\rVert \ge C]` with
    :math:`\lVert\mu\rVert` = ``mean_norm`` and :math:`\xi \sim \mathcal N(0, (\tau^2/d)I_d)` (so
    :math:`\mathbb E\lVert\xi\rVert^2 = \tau^2`), i.e. the tail of a non-central chi-square:
    :math:`1 - F_{\chi'^2_d}(C^2d/\tau^2;\ \lambda = \lVert\mu\rVert^2d/\tau^2)`. Not in the paper: a derived plotting
    model of this book; the paper itself leaves :math:`P` as a measured quantity.

    >>> round(dpdr_clip_probability(1e-9, mean_norm=1.0, tau=1.0, d=10), 6)
    1.0
    >>> dpdr_clip_probability(50.0, mean_norm=1.0, tau=1.0, d=10) < 1e-12
    True
    """
    from scipy.stats import ncx2

    C = checks.positive("C", C)
    mean_norm = checks.non_negative("mean_norm", mean_norm)
    tau = checks.positive("tau", tau)
    d = checks.integer("d", d)
    return float(ncx2.sf(C * C * d / tau ** 2, d, mean_norm ** 2 * d / tau ** 2))


# ---------------------------------------------------------------------------------------------- DP-PSASC
def _psasc_eta_args(T, s, F0, beta, sigma, d, k_hat):
    T = checks.integer("T", T)
    k_hat = checks.integer("k_hat", k_hat, minimum=0)
    if not T > k_hat:
        raise ValueError(f"T must be > k_hat = {k_hat} (the theorem runs from step k_hat on [PSASC-21]), got {T!r}")
    return (T, checks.positive("s", s, "the scaling parameter"),
            checks.non_negative("F0", F0, "F(w_khat), read as F(w_khat) - F^* with F >= 0"),
            checks.positive("beta", beta, "the smoothness constant"), checks.non_negative("sigma", sigma),
            checks.integer("d", d), k_hat)


def psasc_theorem2_step_size(T: int, *, s: float, F0: float, beta: float, sigma: float, d: int,
                             k_hat: int = 0) -> float:
    r"""DP-PSASC Theorem 2's step size
    :math:`\eta = \sqrt{2s^2F(w_{\hat k})/\big(\beta(T - \hat k)(2 + \sigma^2d)\big)}`.

    :math:`\hat k` (``k_hat``) is never defined by the paper [PSASC-21]; ``k_hat = 0`` (the default, written out)
    starts the analysis at the first step. ``F0`` reads :math:`F(w_{\hat k})` as :math:`F(w_{\hat k}) - F^*`.

    >>> round(psasc_theorem2_step_size(100, s=1.0, F0=1.0, beta=1.0, sigma=1.0, d=98), 6)  # sqrt(2/(100*100))
    0.014142
    """
    T, s, F0, beta, sigma, d, k_hat = _psasc_eta_args(T, s, F0, beta, sigma, d, k_hat)
    return math.sqrt(2 * s * s * F0 / (beta * (T - k_hat) * (2 + sigma * sigma * d)))


def psasc_theorem2_leading_term(T: int, *, s: float, F0: float, beta: float, sigma: float, d: int,
                                k_hat: int = 0) -> BoundTerms:
    r"""The leading term of DP-PSASC Theorem 2 *inferred* from its step size (not printed in the paper).

    The printed :math:`\eta` minimises :math:`F_0/(\eta(T - \hat k)) + \beta\eta V/2` with
    :math:`V = (2 + \sigma^2d)/s^2`; at that :math:`\eta` both terms equal :math:`\sqrt{\beta F_0V/(2(T - \hat k))}`,
    and their sum is :math:`\sqrt{2\beta F_0(2 + \sigma^2d)/(s^2(T - \hat k))} \propto T^{-1/2}/s`. Returned as
    ``optimisation`` (the :math:`F_0` term) and ``noise`` (the :math:`\beta\eta V/2` term, which holds the DP noise
    :math:`\sigma^2d`). The :math:`\tau` (sampling-bias) term is not stated in a form that can be evaluated; it is
    left out here (see :func:`psasc_theorem2_rate`). :math:`B` does not appear, as in the paper [PSASC-22].

    >>> b = psasc_theorem2_leading_term(100, s=1.0, F0=1.0, beta=1.0, sigma=1.0, d=98)
    >>> round(b.optimisation, 6), round(b.noise, 6), round(b.total, 6)  # each sqrt(1*1*100/(2*100)); sum sqrt(2)
    (0.707107, 0.707107, 1.414214)
    """
    T, s, F0, beta, sigma, d, k_hat = _psasc_eta_args(T, s, F0, beta, sigma, d, k_hat)
    eta = psasc_theorem2_step_size(T, s=s, F0=F0, beta=beta, sigma=sigma, d=d, k_hat=k_hat)
    V = (2 + sigma * sigma * d) / (s * s)
    if eta == 0:  # F0 = 0: nothing to optimise
        return BoundTerms(0.0, 0.0, 0.0, 0.0)
    return BoundTerms(F0 / (eta * (T - k_hat)), 0.0, beta * eta * V / 2, 0.0)


def psasc_theorem2_rate(T: float, *, tau: float, c_opt: float = 1.0, c_tau: float = 1.0) -> BoundTerms:
    r"""DP-PSASC Theorem 2's rate :math:`O(T^{-1/2} + \tau)` with explicit constants: ``optimisation``
    :math:`= c_{\mathrm{opt}}T^{-1/2}`, ``clipping_bias`` :math:`= c_\tau\tau` (the paper: "the bias introduced by
    SGD sampling", which does not vanish).
    A rate illustration: the paper gives no constants [PSASC-21]; the defaults 1 are the unit constants of the
    book's plots.

    >>> psasc_theorem2_rate(100, tau=0.1).total
    0.2
    """
    T = checks.positive("T", T)
    tau = checks.non_negative("tau", tau, "the sampling-noise bound of Assumption 1")
    return BoundTerms(checks.positive("c_opt", c_opt) * T ** -0.5, 0.0, 0.0, checks.positive("c_tau", c_tau) * tau)


class PSASCSchedules(NamedTuple):
    r: float
    s: float
    gamma: float
    eta: float


def psasc_theorem3_schedules(T: float, *, c_r: float = 1.0, c_s: float = 1.0, c_gamma: float = 1.0,
                             c_eta: float = 1.0) -> PSASCSchedules:
    r"""The schedules of DP-PSASC Theorem 3 (momentum): :math:`r = c_rT^{-1/2}`, :math:`s = c_sT^{-1/4}`,
    :math:`\gamma = c_\gamma T^{-1/4}`, :math:`\eta = c_\eta T^{-3/4}`; the constants are ours (the paper writes
    :math:`O(\cdot)`). :math:`\gamma` is Algorithm 2's single EMA weight (its mapping to Algorithm 3's
    :math:`\gamma_0, \gamma_1, K_0` is unclear [PSASC-13]); it must stay in :math:`(0, 1]`.

    >>> psasc_theorem3_schedules(10_000)
    PSASCSchedules(r=0.01, s=0.1, gamma=0.1, eta=0.001)
    """
    T = checks.positive("T", T)
    out = PSASCSchedules(checks.positive("c_r", c_r) * T ** -0.5, checks.positive("c_s", c_s) * T ** -0.25,
                         checks.positive("c_gamma", c_gamma) * T ** -0.25, checks.positive("c_eta", c_eta) * T ** -0.75)
    checks.rate("gamma", out.gamma, "the EMA weight c_gamma T^(-1/4) of Theorem 3")
    return out


def psasc_theorem3_rate(T: float, *, c: float = 1.0) -> BoundTerms:
    r"""DP-PSASC Theorem 3's rate :math:`O(T^{-1/4})` (momentum removes the sampling bias): ``optimisation``
    :math:`= cT^{-1/4}`, no constant term. A rate illustration with a chosen constant ``c``.

    >>> psasc_theorem3_rate(10_000).total
    0.1
    """
    return BoundTerms(checks.positive("c", c) * checks.positive("T", T) ** -0.25)


def psasc_crossover_T(tau: float) -> float:
    r"""The :math:`T` beyond which :math:`T^{-1/4}` (Theorem 3) is below :math:`T^{-1/2} + \tau` (Theorem 2), unit
    constants.

    With :math:`u = T^{-1/4}`, :math:`T^{-1/4} < T^{-1/2} + \tau` iff :math:`u - u^2 < \tau`; the large-:math:`T` root
    is :math:`u = (1 - \sqrt{1 - 4\tau})/2`, so :math:`T = u^{-4}`. For :math:`\tau \ge 1/4`, :math:`T^{-1/4}` is
    never above (up to equality at :math:`\tau = 1/4`, :math:`T = 16`), and the answer is 1. (For
    :math:`\tau < 1/4` there is also a tiny window :math:`T < \big((1 + \sqrt{1 - 4\tau})/2\big)^{-4}` near
    :math:`T = 1`, ignored here.)

    >>> round(psasc_crossover_T(0.1))
    6198
    >>> psasc_crossover_T(0.3)
    1.0
    """
    tau = checks.positive("tau", tau, "the sampling-noise bound of Assumption 1")
    if tau >= 0.25:
        return 1.0
    u = (1 - math.sqrt(1 - 4 * tau)) / 2
    return u ** -4
