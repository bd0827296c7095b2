r"""Broken controls: four deliberately wrong methods that the audit must flag, registered here and nowhere else.

Each keeps the declarations of the correct method (what the accountant is told) and breaks what it releases, the
way real implementations have been broken:

``no-clipping``
    DP-SGD that forgets to clip: the canary's 10^6 reaches the sum while the accountant is told sensitivity C.
``half-noise``
    DP-SGD that adds :math:`\mathcal N\big(0, (\sigma C/2)^2\big)` while declaring the noise multiplier
    :math:`\sigma` (a factor lost in a refactor).
``realised-batch-adaclip``
    Andrew et al.'s clipping as Opacus's ``AdaClipDPOptimizer`` writes it: the noisy unclipped count divided by the
    *realised* batch size :math:`|\mathcal B_t|` instead of the expected :math:`B`. Then
    :math:`\tilde b = (\text{count} + \text{noise})/|\mathcal B_t|` moves by up to one count when one example joins,
    not the 1/2 that the split :math:`\sigma_\Delta = (\sigma^{-2} - (2\sigma_b)^{-2})^{-1/2}` assumes. Its scenario
    makes the count carry most of the budget (:math:`\sigma_b = 0.55` at :math:`\sigma = 1`) and clips every
    background example, so that the canary, counted unclipped, moves :math:`\tilde b` from 0 to 1/9.
``data-dependent-noise``
    DP-SGD whose noise is scaled to the batch's largest clipped norm,
    :math:`\sigma\max_i\lVert\mathrm{Clip}(g_i, C)\rVert`, "the sensitivity this batch actually has": on a
    background of tiny gradients the noise all but vanishes, and the canary's arrival is visible in the noise level
    itself.
"""

from __future__ import annotations

__all__ = ["NoClipping", "HalfNoise", "RealisedBatchAdaClip", "DataDependentNoise", "BROKEN", "audit_broken"]

import torch

from dpbook import checks
from dpbook.audit.one_step import AuditResult, run
from dpbook.audit.scenarios import SCENARIOS
from dpbook.methods.adaclip import AdaClip
from dpbook.methods.base import MicroBatch
from dpbook.methods.dpsgd import DPSGD
from dpbook.methods.scenario import Scenario
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads


class NoClipping(DPSGD):
    """Broken: every weight is 1 (no clipping), while its release still declares sensitivity :math:`C`."""

    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(norms)


class HalfNoise(DPSGD):
    r"""Broken: adds half the noise std that :meth:`releases` declares (the accountant still sees :math:`\sigma`)."""

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        std = 0.5 * self.releases()[0].noise_std
        return [s + noise.like(s, std) for s in acc["sum"]]


class RealisedBatchAdaClip(AdaClip):
    r"""Broken: the unclipped fraction :math:`(\text{count} + \mathcal N(0, \sigma_b^2))/|\mathcal B_t|`, over the
    realised batch size."""

    def released_fraction(self, acc: dict, noise: GaussianNoise) -> float:
        count = torch.tensor([float(acc["unclipped"])], dtype=torch.float64)
        noisy_count = float((count + noise.like(count, self.sigma_b))[0])
        return min(1.0, max(0.0, noisy_count / max(acc["n"], 1)))  # the realised |B_t|: private


class DataDependentNoise(DPSGD):
    r"""Broken: noise std :math:`\sigma\max_i\lVert\mathrm{Clip}(g_i, C)\rVert` instead of :math:`\sigma C`."""

    def start(self, params) -> dict:
        return {**super().start(params), "largest": 0.0}

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        super().accumulate(acc, mb)
        if mb.n:
            acc["largest"] = max(acc["largest"], float((mb.norms * self.weights(mb.norms)).max()))

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        std = self.sigma * acc["largest"]
        return [s + noise.like(s, std) for s in acc["sum"]]


_DPSGD = SCENARIOS["dpsgd"]

BROKEN: dict[str, tuple[str, type, Scenario]] = {
    "no-clipping": ("dpsgd", NoClipping, _DPSGD),
    "half-noise": ("dpsgd", HalfNoise, _DPSGD),
    "realised-batch-adaclip": ("adaclip", RealisedBatchAdaClip, Scenario(
        dict(sigma=1.0, sigma_b=0.55), "C_t = 1, every background example clipped (norm 100); the canary has norm "
        "C_t, so it is counted unclipped", canary_norm=lambda method: method.C, background_norms=(100.0,) * 8)),
    "data-dependent-noise": ("dpsgd", DataDependentNoise, Scenario(
        dict(C=1.0, sigma=1.0), "a background of 8 gradients of norm 0.01", background_norms=(0.01,) * 8)),
}
"""Broken control -> (the registered method it breaks, its class, its scenario)."""


def audit_broken(kind: str, **options) -> AuditResult:
    """The one-step audit of the broken control ``kind`` (:data:`BROKEN`); options as :func:`~dpbook.audit.audit`.

        >>> audit_broken("half-noise", trials=2000).flagged
        True
    """
    checks.one_of("broken control", kind, BROKEN)
    method, cls, scenario = BROKEN[kind]
    return run(cls, scenario, name=method, broken=kind, **options)
