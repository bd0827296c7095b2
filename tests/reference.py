"""Slow, obviously-correct references for the oracle tests: one example at a time, plain autograd."""

from __future__ import annotations

import torch
from torch import nn


def per_example_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor, params=None,
                          loss_fn=nn.functional.cross_entropy) -> list[list[torch.Tensor]]:
    """``[[g_i for each trainable parameter] for each example i]``, one backward pass per example."""
    params = [p for p in model.parameters() if p.requires_grad] if params is None else params
    grads = []
    for i in range(len(x)):
        loss = loss_fn(model(x[i:i + 1]), y[i:i + 1])
        grads.append([g.detach() for g in torch.autograd.grad(loss, params)])
    return grads


def flat_norm(g: list[torch.Tensor]) -> float:
    """The L2 norm of one example's gradient, all parameters flattened together."""
    return float(torch.sqrt(sum(t.pow(2).sum() for t in g)))


def apply_update(model: nn.Module, optimizer: torch.optim.Optimizer, summed: list[torch.Tensor], B: float) -> None:
    """Divide a (noise-free) sum of contributions by the expected batch size B and take an optimizer step."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p, s in zip(params, summed):
        p.grad = s / B
    optimizer.step()
    optimizer.zero_grad()
