r"""Where a method is audited: its hyperparameters, the state it starts the step in, and its canary.

A one-step audit releases the method's noisy sum on a fixed batch D of per-example gradients (the *background*) and
on D' = D plus one canary gradient. What makes the audit tight is the choice of the canary and of the state:

- the **canary** is a Dirac gradient, :math:`u = e_0` (the first coordinate of the first parameter tensor), scaled
  so that its contribution reaches the method's sensitivity: :math:`10^6` for every weight that saturates at
  infinity (clipping at any threshold, Auto-S, PSAC, PSASC), exactly :math:`C_t` for AdaClip (counted unclipped, it
  moves the centred count by :math:`+1/2`; a larger canary would move it by :math:`-1/2`, as much, so either
  saturates both releases);
- the **background** is 8 examples in directions orthogonal to :math:`u`, with norms alternating 0.01 and 100: half are
  clipped at any threshold in between, which keeps AdaClip's released fraction and DC-SGD's histogram away from
  their clamps and empty bins;
- the **state** (thresholds, ranges, bases, momenta, the step index) is set through the method's own
  ``load_state_dict`` before the step. It is public in both worlds (released at earlier steps), so the canary
  cannot move it; what matters is that the step releases everything the method does (both releases of a
  two-release method) and that the canary saturates every bound. Each scenario's ``state`` says what was chosen.

Every registered method declares its :class:`Scenario` next to its class (``declaration.audit``, see
:mod:`dpbook.methods.declaration`); this module holds the audited world they share. Noise multipliers are about 1,
so that every claim is about :math:`\mu = 1` and :math:`\varepsilon` of a few units, where a few thousand trials can
tell a leak from a claim.
"""

from __future__ import annotations

__all__ = ["SHAPES", "BACKGROUND_NORMS", "HUGE", "DTYPE", "zeros", "dirac", "background", "Scenario", "at_step"]

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from dpbook.methods.base import Method
from dpbook.per_sample import Grads

SHAPES = ((6,), (4,))
"""The audited 'model': two parameter tensors (DPDR decomposes layer by layer), :math:`d = 10` coordinates in all."""

BACKGROUND_NORMS = (0.01, 100.0) * 4
"""The norms of the 8 background examples."""

HUGE = 1e6
"""The canary's norm :math:`10^6` where a weight saturates at infinity (the contribution is then within
:math:`10^{-8}` of its bound)."""

DTYPE = torch.float64


def zeros() -> Grads:
    """One parameter value per tensor of :data:`SHAPES` (all zero: the audited releases do not depend on it)."""
    return [torch.zeros(shape, dtype=DTYPE) for shape in SHAPES]


def dirac() -> Grads:
    """The canary direction :math:`u = e_0`: 1 in the first coordinate of the first tensor, 0 elsewhere."""
    u = zeros()
    u[0][0] = 1.0
    return u


def background(norms=BACKGROUND_NORMS, seed: int = 0) -> Grads:
    """``len(norms)`` per-example gradients with the given norms, in fixed random directions orthogonal to
    :math:`u`."""
    g = torch.Generator().manual_seed(seed)
    flat = torch.randn(len(norms), sum(math.prod(s) for s in SHAPES), generator=g, dtype=DTYPE)
    flat[:, 0] = 0.0  # orthogonal to the canary
    flat *= torch.tensor(norms, dtype=DTYPE)[:, None] / flat.norm(dim=1, keepdim=True)
    return _split(flat)


def _split(flat: torch.Tensor) -> Grads:
    """Rows of flat vectors -> one tensor ``(n, *shape)`` per parameter tensor."""
    out, start = [], 0
    for shape in SHAPES:
        size = math.prod(shape)
        out.append(flat[:, start:start + size].reshape(len(flat), *shape))
        start += size
    return out


def _no_state(method: Method, grads: Grads) -> None:
    """Stateless at the audited step (the step index is 0)."""


@dataclass(frozen=True)
class Scenario:
    """How one method is audited (see the module docstring)."""

    hyperparameters: dict
    state: str  # the state the method is put in, and why; rendered in the chapter
    prepare: Callable[[Method, Grads], None] = _no_state  # (method bound to its world, that world's batch)
    canary_norm: Callable[[Method], float] = lambda method: HUGE
    canary_direction: Callable[[Method], Grads] = lambda method: dirac()
    background_norms: tuple = field(default=BACKGROUND_NORMS)

    def canary(self, method: Method) -> Grads:
        """The canary's gradient, one tensor ``(1, *shape)`` per parameter."""
        direction = self.canary_direction(method)
        norm = math.sqrt(sum(float(t.pow(2).sum()) for t in direction))
        return [(self.canary_norm(method) / norm) * t.unsqueeze(0) for t in direction]


def at_step(t: int) -> Callable[[Method, Grads], None]:
    """A ``prepare`` that moves the method to step ``t`` and keeps the rest of its state (a public schedule)."""
    def prepare(method: Method, grads: Grads) -> None:
        method.load_state_dict({**method.state_dict(), "t": t})
    return prepare
