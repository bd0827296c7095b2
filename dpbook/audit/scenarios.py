r"""Where each method is audited: its hyperparameters, the state it starts the step in, and its canary.

A one-step audit releases the method's noisy sum on a fixed batch D of per-example gradients (the *background*) and
on D' = D plus one canary gradient. What makes the audit tight is the choice of the canary and of the state:

- the **canary** is a Dirac gradient, ``u = e_0`` (the first coordinate of the first parameter tensor), scaled so
  that its contribution reaches the method's sensitivity: 10^6 for every weight that saturates at infinity
  (clipping at any threshold, Auto-S, PSAC, PSASC), exactly ``C_t`` for AdaClip (counted unclipped, it moves the
  centred count by +1/2; a larger canary would move it by -1/2, as much, so either saturates both releases);
- the **background** is 8 examples in directions orthogonal to u, with norms alternating 0.01 and 100: half are
  clipped at any threshold in between, which keeps AdaClip's released fraction and DC-SGD's histogram away from
  their clamps and empty bins;
- the **state** (thresholds, ranges, bases, momenta, the step index) is set through the method's own
  ``load_state_dict`` before the step. It is public in both worlds (released at earlier steps), so the canary
  cannot move it; what matters is that the step releases everything the method does (both releases of a
  two-release method) and that the canary saturates every bound. Each scenario's ``state`` says what was chosen.

Every registered method has a scenario (``tests/test_audit.py`` checks it); noise multipliers are about 1, so that
every claim is about mu = 1 and epsilon of a few units, where a few thousand trials can tell a leak from a claim.
"""

from __future__ import annotations

__all__ = ["SHAPES", "BACKGROUND_NORMS", "HUGE", "DTYPE", "zeros", "background", "Scenario", "SCENARIOS"]

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from dpbook.methods.base import Method
from dpbook.per_sample import Grads

SHAPES = ((6,), (4,))
"""The audited 'model': two parameter tensors (DPDR decomposes layer by layer), d = 10 coordinates in all."""

BACKGROUND_NORMS = (0.01, 100.0) * 4
"""The norms of the 8 background examples."""

HUGE = 1e6
"""The canary's norm where a weight saturates at infinity (the contribution is then within 1e-8 of its bound)."""

DTYPE = torch.float64


def zeros() -> Grads:
    """One parameter value per tensor of :data:`SHAPES` (all zero: the audited releases do not depend on it)."""
    return [torch.zeros(shape, dtype=DTYPE) for shape in SHAPES]


def _dirac() -> Grads:
    """The canary direction u = e_0: 1 in the first coordinate of the first tensor, 0 elsewhere."""
    u = zeros()
    u[0][0] = 1.0
    return u


def background(norms=BACKGROUND_NORMS, seed: int = 0) -> Grads:
    """``len(norms)`` per-example gradients with the given norms, in fixed random directions orthogonal to u."""
    g = torch.Generator().manual_seed(seed)
    flat = torch.randn(len(norms), sum(math.prod(s) for s in SHAPES), generator=g, dtype=DTYPE)
    flat[:, 0] = 0.0  # orthogonal to the canary
    flat *= torch.tensor(norms, dtype=DTYPE)[:, None] / flat.norm(dim=1, keepdim=True)
    return _split(flat)


def _split(flat: torch.Tensor) -> Grads:
    """Rows of flat vectors -> one tensor (n, *shape) per parameter tensor."""
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
    canary_direction: Callable[[Method], Grads] = lambda method: _dirac()
    background_norms: tuple = field(default=BACKGROUND_NORMS)

    def canary(self, method: Method) -> Grads:
        """The canary's gradient, one tensor ``(1, *shape)`` per parameter."""
        direction = self.canary_direction(method)
        norm = math.sqrt(sum(float(t.pow(2).sum()) for t in direction))
        return [(self.canary_norm(method) / norm) * t.unsqueeze(0) for t in direction]


def _step(t: int) -> Callable[[Method, Grads], None]:
    def prepare(method: Method, grads: Grads) -> None:
        method.load_state_dict({**method.state_dict(), "t": t})
    return prepare


def _dpdr_base() -> Grads:
    """DPDR's base b: a unit direction per layer, orthogonal to u in the first (e_1), e_0 in the second."""
    b = zeros()
    b[0][1], b[1][0] = 1.0, 1.0
    return b


def _prepare_dpdr(method: Method, grads: Grads) -> None:
    method.load_state_dict({"t": 1, "b": _dpdr_base(), "released_norms": torch.ones(len(SHAPES), dtype=DTYPE)})


def _dpdr_canary(method: Method) -> Grads:
    """u + b (both layers' base vectors): huge parallel coefficients and a huge orthogonal part (u), so both
    clips saturate."""
    return [d + b for d, b in zip(_dirac(), _dpdr_base())]


def _previous() -> Grads:
    """A previously released gradient (divided by B) for DIFF and DIFF2, orthogonal to u."""
    v = zeros()
    v[1] += 0.1
    return v


def _prepare_diff(method: Method, grads: Grads) -> None:
    method.load_state_dict({"t": 1, "previous": _previous()})


def _prepare_diff2(method: Method, grads: Grads) -> None:
    method.load_state_dict({"t": 1, "previous": _previous(), "w_previous": zeros()})


def _prepare_psasc_momentum(method: Method, grads: Grads) -> None:
    """Two steps in: K0 = 2 stored iterates and an outer momentum M, both public (earlier releases)."""
    M = [0.1 * torch.ones(shape, dtype=DTYPE) for shape in SHAPES]
    method.load_state_dict({**method.state_dict(), "t": 2, "M": M, "history": [zeros(), zeros()]})


def _prepare_psasc_momentum_gd(method: Method, grads: Grads) -> None:
    """Step 1 of the full-batch run: every example's EMA m_i is its gradient of step 0 (line 2)."""
    method.load_state_dict({**method.state_dict(), "t": 1, "m": [g.clone() for g in grads]})


SCENARIOS: dict[str, Scenario] = {
    "dpsgd": Scenario(dict(C=1.0, sigma=1.0), "stateless"),
    "dynamic": Scenario(dict(sigma=1.0, C_0=1.0, rho_C=0.5, T=10), "step t = 5 of T = 10, C_t = 0.71 "
                        "(the schedule is public; the noise scales with C_t, so every t is alike)", prepare=_step(5)),
    "dcsgd-p": Scenario(dict(sigma=1.0, p=0.5), "C_0 = 1, R_0 = 1: the canary lands in the overflow bin, whose "
                        "count is released with the gradient"),
    "dcsgd-e": Scenario(dict(sigma=1.0), "C_0 = 1, R_0 = b = 20: the canary lands in the overflow bin"),
    "adaclip": Scenario(dict(sigma=1.0, sigma_b=1.0), "C_t = 1 and a canary of norm exactly C_t: it is counted "
                        "unclipped (+1/2 on the centred count, the most one example moves it) and contributes C_t "
                        "to the sum; half the background is clipped, so the released fraction sits near 1/2, far "
                        "from its clamps",
                        canary_norm=lambda method: method.C),
    "autos": Scenario(dict(sigma=1.0), "stateless; the canary's weight 1/(10^6 + gamma) gives it norm 1 - 1e-8"),
    "psac": Scenario(dict(C=1.0, r=1e-3, sigma=1.0), "stateless; the weight's sup C is approached at infinity"),
    "psasc": Scenario(dict(C=1.0, r=1e-3, s=0.5, sigma=1.0), "stateless; the weight's sup C/s at infinity"),
    "psasc-momentum": Scenario(
        dict(C=1.0, r=1e-3, s=0.5, sigma=1.0, K0=2, gamma0=0.5, gamma1=0.5),
        "step 2 with K0 = 2 stored iterates and a non-zero outer momentum; the canary's gradient at the stored "
        "iterates is 0, so its inner momentum is its gradient, norm 10^6", prepare=_prepare_psasc_momentum),
    "psasc-momentum-gd": Scenario(
        dict(C=1.0, r=1e-3, s=0.5, sigma=1.0, gamma=0.5),
        "full batch (q = 1), step 1: each example's EMA holds its gradient of step 0, the canary's included; the "
        "training-set size N is treated as public (the engine divides the sum by it; the audit checks the sum)",
        prepare=_prepare_psasc_momentum_gd),
    "dpdr": Scenario(
        dict(C_perp=1.0, C_alpha=1.0, sigma_perp=1.5, sigma_alpha=1.5, C_g=1.0, sigma_g=1.0, s=50),
        "step 2 (the first GDR step) with the base b = (e_1, e_0) orthogonal to u; the canary u + b has a huge "
        "orthogonal part and huge parallel coefficients, so both of its clips saturate",
        prepare=_prepare_dpdr, canary_direction=_dpdr_canary),
    "diff": Scenario(dict(C_d=1.0, sigma=1.0), "step 2 with a previous release orthogonal to u: the canary's "
                     "difference has norm about 10^6", prepare=_prepare_diff),
    "diff2": Scenario(dict(C_d=1.0, sigma=1.0), "step 2 (a difference step): the canary's gradient at the previous "
                      "iterate is 0, so its difference is its gradient", prepare=_prepare_diff2),
}
