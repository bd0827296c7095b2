"""Per-sample gradients, vectorised with ``torch.func`` (``vmap`` of ``grad`` over a ``functional_call``).

The engine's path for the methods that read the per-sample gradient *vectors* (DPDR, DIFF, DIFF2, DP-PSASC with
momentum); the scaled sums need only norms and a re-weighted sum, which :mod:`dpbook.per_sample.book_keeping` gets
at a fraction of the cost (``python -m dpbook.repro.bench`` measures both, and Opacus's hooks). Why ``torch.func``
rather than Opacus's ``GradSampleModule`` hooks for the vectors: ``torch.func`` can evaluate per-sample gradients at
*any* parameter values, which DP-PSASC with momentum and DIFF2 need (gradients at past iterates), for any layer, with
no per-layer grad samplers. Models must not use BatchNorm (:func:`check_no_batchnorm`).
"""

from __future__ import annotations

__all__ = [
    "layer_sq_norms", "inner_products",
    "Grads", "check_no_batchnorm", "NonFiniteGradientError", "PerSampleGradients", "flat_norms", "clip_factors",
    "weighted_sum", "check_finite"
]

from typing import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

Grads = list[torch.Tensor]  # one tensor per trainable parameter, shape (n, *param.shape)


def _batchnorms(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def check_no_batchnorm(model: nn.Module) -> None:
    """Raise a ValueError naming the first BatchNorm layer of ``model`` and the fix; return None if there is none.

    BatchNorm mixes the examples of a batch: one example's gradient then depends on the others, so neither its
    per-sample gradient nor the sensitivity bound is defined (privacy hygiene rule 6). The engine calls this.

    Example:
        >>> check_no_batchnorm(nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4)))
        >>> try:
        ...     check_no_batchnorm(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4)))
        ... except ValueError as err:
        ...     print(str(err)[:32])
        layer '1' is a BatchNorm2d, whic
    """
    found = _batchnorms(model)
    if not found:
        return
    name, module = found[0]
    label = f"layer '{name}'" if name else "the model itself"
    raise ValueError(
        f"{label} is a {type(module).__name__}, which mixes the examples of a batch, so per-sample gradients and "
        f"the DP sensitivity bound are not defined ({len(found)} BatchNorm layer(s) in all). Replace every BatchNorm "
        "by GroupNorm: model = dpbook.models.replace_batchnorm(model), or opacus.validators.ModuleValidator.fix(model)."
    )


class NonFiniteGradientError(ValueError):
    """A per-sample gradient holds NaN or inf: an error, never silently clipped into the update."""


class PerSampleGradients:
    r"""Computes :math:`[g_1; \ldots; g_n]` for the trainable parameters of ``model``.

    Example:
        >>> model = nn.Linear(3, 2)
        >>> psg = PerSampleGradients(model, nn.functional.cross_entropy)
        >>> grads = psg(torch.randn(5, 3), torch.tensor([0, 1, 0, 1, 1]))
        >>> [tuple(g.shape) for g in grads]
        [(5, 2, 3), (5, 2)]
    """

    def __init__(self, model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
        self.model = model
        self.loss_fn = loss_fn
        named = list(model.named_parameters())
        self.names = [n for n, p in named if p.requires_grad]
        self.params = [p for _, p in named if p.requires_grad]
        self._frozen_names = [n for n, p in named if not p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters (requires_grad=True); nothing to train")
        # randomness="different": dropout draws a fresh mask for every example, as a per-example loop would.
        self._vmapped = vmap(grad(self._loss_one), in_dims=(None, None, 0, 0), randomness="different")

    def _loss_one(self, trainable: dict, fixed: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(self.model, (trainable, fixed), (x.unsqueeze(0),))
        return self.loss_fn(out, y.unsqueeze(0))

    def __call__(self, x: torch.Tensor, y: torch.Tensor, params: Sequence[torch.Tensor] | None = None) -> Grads:
        """Per-sample gradients at the model's current parameters, or at ``params`` (same order as ``self.params``)."""
        values = [p.detach() for p in (self.params if params is None else params)]
        trainable = dict(zip(self.names, values))
        fixed = {n: t.detach() for n, t in self.model.named_buffers()}
        fixed.update({n: p.detach() for n, p in self.model.named_parameters() if n in self._frozen_names})
        grads = self._vmapped(trainable, fixed, x, y)
        return [grads[n] for n in self.names]


def flat_norms(grads: Grads) -> torch.Tensor:
    """The L2 norm of each example's whole gradient (all parameters flattened together), shape (n,)."""
    per_parameter = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])
    return torch.linalg.vector_norm(per_parameter, dim=0)


def layer_sq_norms(grads: Grads) -> torch.Tensor:
    r""":math:`\lVert g_i^{(l)}\rVert^2` for each example and parameter tensor :math:`l`, shape ``(n, m)``."""
    return torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], dim=1).pow(2)


def inner_products(grads: Grads, vectors: Sequence[torch.Tensor]) -> torch.Tensor:
    r""":math:`\langle g_i^{(l)}, v^{(l)}\rangle` with one fixed tensor ``vectors[l]`` per parameter, shape
    ``(n, m)``."""
    return torch.stack([g.flatten(1) @ v.flatten() for g, v in zip(grads, vectors)], dim=1)


def clip_factors(norms: torch.Tensor, C: float) -> torch.Tensor:
    r""":math:`\min(1, C/\lVert g_i\rVert)`, the factor of flat L2 clipping
    :math:`\mathrm{Clip}(g, C) = g\min(1, C/\lVert g\rVert)` (DC-SGD Eq. 1).

    A zero norm gives ``C / 0 = inf``, clamped to 1: a zero gradient stays zero.

        >>> clip_factors(torch.tensor([0.0, 0.5, 4.0]), 1.0)
        tensor([1.0000, 1.0000, 0.2500])
    """
    return (C / norms).clamp(max=1.0)


def weighted_sum(grads: Grads, weights: torch.Tensor) -> Grads:
    r""":math:`\sum_i w_ig_i` for each parameter: the re-weighted sum every scaling method releases."""
    return [torch.einsum("n,n...->...", weights.to(g.dtype), g) for g in grads]


def check_finite(grads: Grads, norms: torch.Tensor, names: Sequence[str]) -> None:
    """Raise :class:`NonFiniteGradientError` naming the parameter and example when a gradient is NaN or inf."""
    if bool(torch.isfinite(norms).all()):
        return
    for name, g in zip(names, grads):
        bad = (~torch.isfinite(g.flatten(1))).any(1).nonzero().flatten()
        if len(bad):
            raise NonFiniteGradientError(
                f"per-sample gradient of parameter '{name}' is NaN or infinite for example(s) {bad.tolist()[:10]} "
                "of the micro-batch; fix the input data or the loss (e.g. log of 0, a too-large learning rate "
                "that diverged) instead of clipping it away"
            )
    raise NonFiniteGradientError("a per-sample gradient norm overflowed to infinity; rescale the loss or inputs")
