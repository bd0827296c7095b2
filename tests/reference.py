"""Slow, obviously-correct references for the oracle tests: one example at a time, plain autograd."""

from __future__ import annotations

import torch
from torch import nn

from dpbook.noise import GaussianNoise


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


def clipped_step(model: nn.Module, optimizer: torch.optim.Optimizer, x, y, C: float, B: float) -> list[float]:
    """DP-SGD without noise, one example at a time: flat L2 clip at C, sum, divide by B, step.

    Returns the unclipped per-example norms (adaptive methods derive their next threshold from them)."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    norms = []
    for g in per_example_gradients(model, x, y):
        norms.append(flat_norm(g))
        total = [t + min(1.0, C / norms[-1]) * gi for t, gi in zip(total, g)]
    apply_update(model, optimizer, total, B)
    return norms


def apply_update(model: nn.Module, optimizer: torch.optim.Optimizer, summed: list[torch.Tensor], B: float) -> None:
    """Divide a (noise-free) sum of contributions by the expected batch size B and take an optimizer step."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p, s in zip(params, summed):
        p.grad = s / B
    optimizer.step()
    optimizer.zero_grad()


# --- small shared fixtures of the method tests ----------------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.5),
    "momentum": lambda ps: torch.optim.SGD(ps, lr=0.5, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}

# Gradient norms that break naive scaling code: zero, subnormal-adjacent, tiny, huge.
ADVERSARIAL_NORMS = [0.0, 1e-300, 1e-30, 1e-12, 1e-6, 1e-3, 0.5, 1.0, 2.0, 1e3, 1e6, 1e12, 1e30, 1e300]


def tiny_cnn(seed: int = 0, dtype: torch.dtype = torch.float32) -> nn.Module:
    """A 232-parameter CNN on 1x6x6 inputs (GroupNorm, no BatchNorm), seeded."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.Tanh(), nn.GroupNorm(1, 3), nn.Flatten(), nn.Linear(3 * 4 * 4, 4))
    return model.to(dtype)


def batch(n: int, seed: int = 1, dtype: torch.dtype = torch.float32):
    """``n`` random 1x6x6 inputs (scaled so that gradient norms spread) and labels in 0..3, seeded."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 1, 6, 6, generator=g) * 3).to(dtype), torch.randint(0, 4, (n,), generator=g)


class NoNoise(GaussianNoise):
    """A noise source of std 0: switches a method's noise off without changing its noise multipliers
    (needed where sigma = 0 is not a valid setting, e.g. DC-SGD's sigma_T or Andrew et al.'s sigma_Delta)."""

    def like(self, t: torch.Tensor, std: float) -> torch.Tensor:
        return torch.zeros_like(t)


def engine_steps(model, optimizer, method, batches, *, expected_batch_size: float, micro_batch_size=None,
                 noise_off: bool = True, seed: int = 0):
    """Run ``method`` through the engine on ``batches``; returns (parameters, per-step infos, engine)."""
    from dpbook.optim import DPOptimizer

    engine = DPOptimizer(model, optimizer, method, sample_rate=0.1, expected_batch_size=expected_batch_size,
                         micro_batch_size=micro_batch_size, noise_seed=seed)
    if noise_off:
        engine.noise = NoNoise()
    infos = [engine.step(x, y) for x, y in batches]
    return [p.detach() for p in model.parameters()], infos, engine
