r"""Per-sample scaling weights of Auto-S, DP-PSAC and DP-PSASC, and their closed-form facts.

A scaling method replaces clipping by a weight of the gradient norm, :math:`\tilde g=\omega(\lVert g\rVert)\,g`
(the DP-PSASC paper, Eqs. (1)-(6)). With :math:`x=\lVert g\rVert`:

===============================  =====================================  ==========================  ===============
method (DP-PSASC paper)          weight :math:`\omega(x)`               :math:`\omega(0^+)`         sensitivity
===============================  =====================================  ==========================  ===============
Auto-S / NSGD, Eq. (2)           :math:`1/(x+\gamma)`                   :math:`1/\gamma`            1
DP-PSAC, Eq. (4)                 :math:`C/(x + r/(x+r))`                :math:`C`                   :math:`C`
DP-PSASC, Eq. (6)                :math:`C/(s x + r/(x+r))`              :math:`C`                   :math:`C/s`
===============================  =====================================  ==========================  ===============

The sensitivity is the supremum of the scaled norm :math:`x\,\omega(x)`; it is approached as
:math:`x\to\infty` and never attained. Closed-form facts of DP-PSASC (derived here from Eq. (6), and checked
in ``tests/test_psac.py``), with :math:`h(x)=s x + r/(x+r)` the denominator over :math:`C`:

- **peak**: :math:`h'(x)=s-r/(x+r)^2` vanishes at :math:`x^*=\sqrt{r/s}-r`, which is positive iff
  :math:`sr<1`; there :math:`h(x^*)=2\sqrt{sr}-sr=1-(1-\sqrt{sr})^2`, so the largest weight is
  :math:`C/(2\sqrt{sr}-sr)` (:func:`psasc_peak`). The paper's "maximum :math:`C/(1-(1-\sqrt{sr})^2)`" is the same
  number. For :math:`sr\ge1` the weight decreases from :math:`C` at :math:`x=0`;
- **small gradients**: :math:`\omega(0)=C`, the limit as :math:`x\to0`;
- **scaled norm**: :math:`x\,\omega(x)=C u/(s u + r)` with :math:`u=x(x+r)` (:func:`psasc_scaled_norm`), strictly
  increasing from 0 to its supremum :math:`C/s` (:func:`psasc_sensitivity`): scaling keeps the order of norms;
- **against DP-PSAC**: :math:`\omega_s(x)/\omega_1(x)=(u+r)/(s u+r)` (:func:`psasc_to_psac_ratio`) rises from 1
  at :math:`x=0` to :math:`1/s`: for :math:`s<1` DP-PSASC weighs every gradient more, the *large* ones most;
- **s = 1** is DP-PSAC exactly (same floating-point operations, so the same bits);
- **reparametrisation** (derived from Eq. (8)): :math:`\omega_s(x)=\frac{C}{s}\cdot\frac{1}{x+(r/s)/(x+r)}`,
  so DP-PSASC with learning rate :math:`\eta` is DP-PSAC with :math:`C=1`, numerator :math:`r/s` (the inner
  :math:`x+r` keeps :math:`r`), learning rate :math:`\eta C/s` and the same noise multiplier
  (:func:`psasc_as_psac`). Relative to its sensitivity, DP-PSASC weighs small gradients *less* than DP-PSAC
  (by up to a factor :math:`s` as :math:`x\to0`): the paper's "larger weights for small gradients" holds only in
  absolute terms (:func:`relative_weight`).

The weight functions are plain arithmetic: they accept torch tensors, numpy arrays or floats.

    >>> import torch
    >>> x = torch.tensor([0.0, 0.01, 1.0], dtype=torch.float64)
    >>> psasc_weight(x, C=1.0, r=1e-4, s=1.0).equal(psac_weight(x, C=1.0, r=1e-4))
    True
    >>> peak = psasc_peak(C=0.3, r=1e-4, s=0.9)
    >>> round(peak.norm, 6), round(peak.weight, 4)
    (0.010441, 15.8867)
    >>> psasc_sensitivity(C=0.3, s=0.9) == 0.3 / 0.9
    True
"""

from __future__ import annotations

__all__ = [
    "Peak", "autos_weight", "psac_weight", "psasc_weight", "psasc_peak", "psasc_sensitivity", "psasc_scaled_norm",
    "psasc_to_psac_ratio", "psasc_as_psac", "relative_weight"
]

import math
from typing import NamedTuple

from dpbook import checks


def _C(C) -> float:
    return checks.positive("C (maximum norm size)", C)


def _r(r, name: str = "r (stable parameter)") -> float:
    return checks.positive(name, r)


def _s(s) -> float:
    return checks.positive("s (scaling coefficient)", s, "the paper uses 0 < s <= 1; s = 1 is DP-PSAC")


def _scaled(x, C: float, s: float, r_num: float, r_den: float):
    """The one formula behind Eqs. (4) and (6): ``C / (s x + r_num / (x + r_den))``."""
    return C / (s * x + r_num / (x + r_den))


def autos_weight(norms, *, gamma: float = 0.01):
    r"""Auto-S / NSGD weight :math:`1/(\lVert g\rVert+\gamma)` (Eq. (2); Bu et al. call the constant :math:`\gamma`).

    The scaled norm :math:`x/(x+\gamma)` stays below 1 (the sensitivity); small gradients get up to
    :math:`1/\gamma`.

    >>> autos_weight(0.0), autos_weight(0.99)
    (100.0, 1.0)
    """
    gamma = checks.positive("gamma (Auto-S stability constant)", gamma)
    return 1.0 / (norms + gamma)


def psac_weight(norms, *, C: float, r: float, r_num: float | None = None):
    r"""DP-PSAC weight :math:`C/(\lVert g\rVert + r/(\lVert g\rVert + r))` (Eq. (4), Xia et al.).

    ``r_num`` replaces the numerator constant only (default ``r``), :math:`C/(x + r_{num}/(x + r))`: the
    PSAC-shaped rule of the reparametrisation identity (:func:`psasc_as_psac`) and of the ablation with separate
    numerator and denominator constants. The supremum of the scaled norm is :math:`C` for every ``r_num``.

    >>> psac_weight(0.0, C=2.0, r=0.01), round(psac_weight(1e6, C=2.0, r=0.01) * 1e6, 6)
    (2.0, 2.0)
    """
    r = _r(r)
    r_num = r if r_num is None else _r(r_num, "r_num (numerator constant)")
    return _scaled(norms, _C(C), 1.0, r_num, r)


def psasc_weight(norms, *, C: float, r: float, s: float):
    r"""DP-PSASC weight :math:`C/(s\lVert g\rVert + r/(\lVert g\rVert + r))` (Eq. (6)); ``s = 1`` is DP-PSAC.

    >>> psasc_weight(0.0, C=0.25, r=1e-3, s=0.55)
    0.25
    """
    r = _r(r)
    return _scaled(norms, _C(C), _s(s), r, r)


class Peak(NamedTuple):
    """Where a weight function is largest: the norm ``norm`` and the weight ``weight`` there."""

    norm: float
    weight: float


def psasc_peak(*, C: float, r: float, s: float = 1.0) -> Peak:
    r"""The maximum of the DP-PSASC weight: at :math:`\sqrt{r/s}-r` with value :math:`C/(2\sqrt{sr}-sr)` if
    :math:`sr<1`.

    For :math:`sr\ge1` the weight decreases from :math:`\omega(0)=C`, returned as ``Peak(0.0, C)``.
    ``s = 1`` gives DP-PSAC's peak :math:`C/(2\sqrt r - r)` at :math:`\sqrt r - r`.

    >>> psasc_peak(C=1.0, r=0.25, s=1.0)
    Peak(norm=0.25, weight=1.3333333333333333)
    >>> psasc_peak(C=1.0, r=2.0, s=0.5)
    Peak(norm=0.0, weight=1.0)
    """
    C, r, s = _C(C), _r(r), _s(s)
    sr = s * r
    if sr >= 1:
        return Peak(0.0, C)
    return Peak(math.sqrt(r / s) - r, C / (2 * math.sqrt(sr) - sr))


def psasc_sensitivity(*, C: float, s: float = 1.0) -> float:
    """The supremum :math:`C/s` of the DP-PSASC scaled norm (never attained): the L2 sensitivity of the sum.

    >>> psasc_sensitivity(C=0.2, s=0.8)
    0.25
    """
    return _C(C) / _s(s)


def psasc_scaled_norm(norms, *, C: float, r: float, s: float = 1.0):
    r"""The scaled norm :math:`x\,\omega_s(x)=C u/(s u + r)`, :math:`u=x(x+r)`: increasing, 0 at 0, below :math:`C/s`.

    This closed form equals ``norms * psasc_weight(norms, ...)`` (up to rounding).

    >>> psasc_scaled_norm(0.0, C=1.0, r=0.1, s=0.5), psasc_scaled_norm(1e9, C=1.0, r=0.1, s=0.5)
    (0.0, 2.0)
    """
    C, r, s = _C(C), _r(r), _s(s)
    u = norms * (norms + r)
    return C * u / (s * u + r)


def psasc_to_psac_ratio(norms, *, r: float, s: float):
    r""":math:`\omega_s(x)/\omega_1(x)=(u+r)/(s u+r)`, :math:`u=x(x+r)`: 1 at :math:`x=0`, rising to
    :math:`1/s` for :math:`s<1`.

    >>> psasc_to_psac_ratio(0.0, r=1e-3, s=0.5), round(psasc_to_psac_ratio(1e6, r=1e-3, s=0.5), 9)
    (1.0, 2.0)
    """
    r, s = _r(r), _s(s)
    u = norms * (norms + r)
    return (u + r) / (s * u + r)


def psasc_as_psac(*, lr: float, C: float, r: float, s: float) -> dict:
    r"""The DP-PSAC hyperparameters and learning rate that take exactly the steps of DP-PSASC(lr, C, r, s).

    :math:`\frac{\eta}{B}\big(\sum_i\omega_s(x_i)g_i+\frac{C\sigma}{s}\xi\big)
    =\frac{\eta C/s}{B}\big(\sum_i\frac{g_i}{x_i+(r/s)/(x_i+r)}+\sigma\xi\big)`: a PSAC-shaped rule with
    ``C = 1``, numerator ``r / s`` and learning rate ``lr * C / s``, at the same noise multiplier (the noise
    standard deviations are ``sigma * C / s`` and ``sigma``: the same draw ``xi`` scaled differently).

    >>> psasc_as_psac(lr=0.5, C=0.3, r=1e-4, s=0.6)
    {'lr': 0.25, 'C': 1.0, 'r': 0.0001, 'r_num': 0.0001666666666666667}
    """
    lr = checks.positive("lr (learning rate)", lr)
    C, r, s = _C(C), _r(r), _s(s)
    return {"lr": lr * C / s, "C": 1.0, "r": r, "r_num": r / s}


def relative_weight(weights, sensitivity: float):
    r"""A weight over the method's sensitivity: the fraction of the noise scale an example of unit norm gets.

    Methods add noise proportional to their sensitivity, so comparing weights across methods (or across ``s``)
    only makes sense relative to it: for DP-PSASC this is :math:`s\,\omega_s(x)/C`, which tends to ``s`` (not 1)
    as :math:`x\to0`.

    >>> relative_weight(psasc_weight(0.0, C=0.3, r=1e-4, s=0.9), psasc_sensitivity(C=0.3, s=0.9))
    0.9
    """
    return weights / checks.positive("sensitivity", sensitivity)
