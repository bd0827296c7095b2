r"""The noisy histogram of per-sample gradient norms (DC-SGD, Algorithm 2 "BuildHistogram").

Every example of the batch falls into one of :math:`b` bins of the range :math:`[0, R_t)`; norms at or above
:math:`R_t` go to the last (overflow) bin. Bin :math:`k < b - 1` covers :math:`[kR_t/b, (k + 1)R_t/b)`, the last
bin :math:`[(b - 1)R_t/b, \infty)`:

.. math::

    \mathrm{index}(i) &= \min\big(b - 1, \lfloor b\lVert g_i\rVert/R_t\rfloor\big),\\
    H_t[k] &= \#\{i \in \mathcal B_t : \mathrm{index}(i) = k\},\\
    \tilde H_t &= H_t + \mathcal N(0, \sigma_H^2I_b).

The index is Alg. 2 l.5 (the paper prints :math:`\max(n - 1, \ldots)`, [DCSGD-7]); the noise is Alg. 2 l.6:
sensitivity 1, never scaled by data.

Adding or removing one example changes exactly one count by one, so the histogram has L2 sensitivity 1 under the
add/remove adjacency of Poisson sampling (under replace-one it would be :math:`\sqrt2`). The noisy counts are real
numbers and may be negative; the threshold rules of :mod:`dpbook.methods.dcsgd` read them as they are [DCSGD-18].

The representative norm of bin :math:`k` is its midpoint :math:`m_k = (k + 1/2)R_t/b` [DCSGD-9].

These functions need no model: the notebooks call them on synthetic norms, the DC-SGD methods on the batch's
unclipped per-sample norms.

    >>> import torch
    >>> norms = torch.tensor([0.0, 0.24, 0.25, 0.99, 1.0, 7.0])
    >>> bin_index(norms, R=1.0, b=4).tolist()              # 1.0 and 7.0 overflow into the last bin
    [0, 0, 1, 3, 3, 3]
    >>> build_histogram(norms, R=1.0, b=4).tolist()
    [2.0, 1.0, 0.0, 3.0]
    >>> midpoints(R=1.0, b=4).tolist()
    [0.125, 0.375, 0.625, 0.875]
"""

from __future__ import annotations

__all__ = ["HISTOGRAM_SENSITIVITY", "bin_index", "build_histogram", "noisy_histogram", "midpoints", "noisy_total"]

import numpy as np
import torch

from dpbook.noise import GaussianNoise

HISTOGRAM_SENSITIVITY = 1.0
"""L2 sensitivity of the (exact) histogram under add/remove adjacency: one example moves one count by one."""


def bin_index(norms, R: float, b: int) -> torch.Tensor:
    r"""The bin of each norm, :math:`\min(b - 1, \lfloor b\lVert g\rVert/R\rfloor)` [DCSGD-7], as int64 (computed
    in float64).

    Any finite non-negative norm lands in :math:`\{0, \ldots, b - 1\}`: huge norms (even 1e300, whose ``b * G / R``
    overflows to inf) go to the overflow bin.
    """
    G = torch.as_tensor(norms).to(torch.float64)
    return torch.floor(G * (b / R)).clamp(0, b - 1).to(torch.int64)


def build_histogram(norms, R: float, b: int) -> torch.Tensor:
    """The exact counts :math:`H_t` (float64, shape ``(b,)``, on the norms' device) of Algorithm 2, before noise."""
    G = torch.as_tensor(norms)
    return torch.bincount(bin_index(G, R, b), minlength=b).to(torch.float64)


def noisy_histogram(H: torch.Tensor, sigma_H: float, noise: GaussianNoise) -> torch.Tensor:
    r""":math:`\tilde H = H + \mathcal N(0, \sigma_H^2I_b)` (Alg. 2 l.6), the noise from the engine's generator: the
    histogram's release on its own, as the notebooks draw it on synthetic norms (DC-SGD's step draws the same, naming
    its declared release, :meth:`~dpbook.noise.GaussianNoise.add_`)."""
    H = H.to(device=noise.generator.device, dtype=torch.float64)
    return H + noise.like(H, sigma_H)


def midpoints(R: float, b: int) -> np.ndarray:
    r"""Bin midpoints :math:`m_k = (k + 1/2)R/b`, :math:`k = 0, \ldots, b-1`, the representative norms of Algorithms 3
    and 4 [DCSGD-9]."""
    return (np.arange(b) + 0.5) * (R / b)


def noisy_total(H) -> float:
    r""":math:`S' = \max(\sum_k\tilde H[k], 1)`: the private estimate of the batch size, guarded against
    :math:`S' \le 0` [DCSGD-18].

    Noisy counts can sum to zero or less when the batch is (nearly) empty; the rules divide by :math:`S'` (E) or compare
    a cumulative count with :math:`pS'` (P), so :math:`S'` is floored at one example. This is post-processing of the
    released histogram, hence privacy-neutral. The counts themselves are kept raw (possibly negative).
    """
    return max(float(np.sum(np.asarray(H, dtype=np.float64))), 1.0)
