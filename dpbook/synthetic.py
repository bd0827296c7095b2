r"""Synthetic inputs for the chapters: drive a norm-based method with streams of per-sample gradient norms.

Threshold rules such as DC-SGD's histogram rules, Andrew et al.'s quantile update or Du et al.'s schedule only look at
the per-sample norms :math:`\lVert g_i\rVert`; :func:`run_on_norms` runs them through the very protocol the engine uses
(``bind``, ``start``, ``accumulate``, ``release``, ``advance``), with no model, so that a notebook or a test can feed
them any stream of norms.
"""

from __future__ import annotations

__all__ = ["run_on_norms"]

from typing import Iterable

import torch

from dpbook.methods.base import Method, MicroBatch
from dpbook.noise import GaussianNoise
from dpbook.per_sample import FormedView, no_other_values


def run_on_norms(method: Method, norm_batches: Iterable, *, d: int, expected_batch_size: float,
                 noise: GaussianNoise | None = None) -> list[dict]:
    """Feed ``method`` one batch of norms per step; return its diagnostics after each release.

    ``d`` is the number of parameters the method believes it trains (DC-SGD-E's variance term uses it) and
    ``expected_batch_size`` is :math:`B`. The diagnostics are taken after the release and before ``advance``, as
    :class:`dpbook.optim.DPOptimizer` does. ``noise`` defaults to a seeded :class:`GaussianNoise`.

        >>> from dpbook.methods import make_method
        >>> rows = run_on_norms(make_method("dynamic", sigma=1.0, C_0=2.0, rho_C=0.25, T=2),
        ...                     [[1.0, 3.0], [0.5]], d=10, expected_batch_size=2)
        >>> [row["C"] for row in rows]
        [2.0, 1.0]
    """
    noise = GaussianNoise(0) if noise is None else noise
    method.bind([torch.zeros(d)], expected_batch_size=expected_batch_size)
    rows = []
    for norms in norm_batches:
        acc = method.start([])
        norms = torch.as_tensor(norms, dtype=torch.float64)
        method.accumulate(acc, MicroBatch(FormedView([], norms, no_other_values), torch.arange(len(norms))))
        method.release(acc, noise)
        rows.append(method.diagnostics())
        method.advance()
    return rows
