r"""Broken controls: twelve deliberately wrong methods that the audit must flag, and a wrong sampler that the sampler's
test must flag, registered here and nowhere else.

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
``clipped-sum``
    DP-SGD that clips the batch's *sum* to :math:`C` instead of each example: the sum with a canary against the
    others' sum can land on the far side of the ball, :math:`2C` away. Only a canary against the background's sum
    shows it; the sweep (:mod:`dpbook.audit.sweep`) finds it.
``band-weights``
    DP-PSASC whose weights are doubled for :math:`\lVert g\rVert \in [0.1, 10]` (a branch of a piecewise weight
    gone wrong): above the bound :math:`C/s` in a band of norms only, which a canary of norm :math:`10^6` never
    reaches; the sweep finds the band.
``reused-noise``
    DP-SGD that draws its noise once and adds the same draw at every later step (a generator seeded at each call,
    a cached tensor). Each release alone is exactly as declared, so a one-step audit sees nothing; two steps of one
    instance with the canary +c then -c reveal it (the sum of the two projections is noise-free).
``correlated-noise``
    DP-SGD whose noise is an AR(1) sequence across steps, :math:`n_t = \rho n_{t-1} + \sqrt{1 - \rho^2}z_t` with
    :math:`\rho = 0.9`: each step's noise has the declared std, but the steps are not independent, as the
    composition assumes.
``anti-correlated-noise``
    DP-SGD whose every later step adds minus the previous step's draw (:math:`\rho = -1`): each step's noise
    right, two consecutive steps' sum none. It cancels against a canary of constant sign and hides behind an
    alternating one, so only the constant pattern of :func:`~dpbook.audit.worlds.sign_patterns` sees it.
``narrow-band``
    DP-SGD whose weights are doubled for :math:`\lVert g\rVert \in [1.3, 1.55]`: a band between two norms of the
    sweep's grid (1.26 and 1.58), which only the sweep's random norms can hit.
``histogram-half-noise``
    DC-SGD-P whose histogram gets :math:`\sigma_H/2` while the step declares :math:`\sigma_H`: the step's
    composed multiplier moves from 1 to 0.94 only, far too little for the step's audit to see, but the histogram's
    audit on its own sees its noise halved (:class:`~dpbook.audit.white_box.ReleaseAudit`).
``alpha-without-noise``
    DPDR whose coefficients :math:`\alpha` are released without noise while the step declares
    :math:`\sigma_\alpha`. The noisy gradient :math:`\tilde\alpha b + \tilde g_\perp` hides it (the orthogonal
    part's noise also lies along :math:`b`), so only :math:`\alpha`'s audit on its own sees it.

And the sampler (:data:`SAMPLERS`, tested by :func:`dpbook.audit.sampling.poisson_test`):

``fixed-size-batches``
    Shuffled batches of exactly :math:`B` examples, charged as Poisson batches at :math:`q = B/N`, as many data
    loaders draw them: every example's rate is :math:`q`, but the batch size never varies and no batch is empty.
"""

from __future__ import annotations

__all__ = [
    "NoClipping", "HalfNoise", "RealisedBatchAdaClip", "DataDependentNoise", "ClippedSum", "BandWeights",
    "CorrelatedNoise", "ReusedNoise", "AntiCorrelatedNoise", "NarrowBand", "HistogramHalfNoise", "AlphaWithoutNoise",
    "BROKEN", "audit_broken",
    "FixedSizeBatches", "SAMPLERS"
]

import dataclasses
import math

import torch

from dpbook import checks
from dpbook.audit.scenarios import SCENARIOS
from dpbook.audit.white_box import AuditResult, run
from dpbook.methods.adaclip import AdaClip, unclipped_fraction
from dpbook.methods.base import MicroBatch, Release
from dpbook.methods.dcsgd import DCSGDP
from dpbook.methods.dpdr import DPDR
from dpbook.methods.dpsgd import DPSGD
from dpbook.methods.psac import PSASC
from dpbook.methods.scenario import Scenario
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads
from dpbook.sampling import PoissonSampler


def _rescaled(release: Release, factor: float) -> Release:
    """``release`` with its noise multiplier times ``factor``: the noise a broken control adds, not the one it
    declares."""
    return dataclasses.replace(release, noise_multiplier=factor * release.noise_multiplier)


def _drawn_at(acc: dict, name: str, factor: float) -> dict:
    """A step's accumulators whose release ``name`` draws ``factor`` times its declared noise multiplier: what the
    method's own ``release`` then adds, while the step (and its accountant) keeps the declaration."""
    return {**acc, "releases": tuple(_rescaled(r, factor) if r.name == name else r for r in acc["releases"])}


class NoClipping(DPSGD):
    """Broken: every weight is 1 (no clipping), while its release still declares sensitivity :math:`C`."""

    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(norms)


class HalfNoise(DPSGD):
    r"""Broken: adds half the noise std that :meth:`releases` declares (the accountant still sees :math:`\sigma`)."""

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        return super().release(_drawn_at(acc, "gradient", 0.5), noise)


class RealisedBatchAdaClip(AdaClip):
    r"""Broken: the unclipped fraction :math:`(\text{count} + \mathcal N(0, \sigma_b^2))/|\mathcal B_t|`, over the
    realised batch size (the centred count released as declared, then divided by :math:`|\mathcal B_t|`)."""

    def released_fraction(self, acc: dict, noise: GaussianNoise) -> float:
        centred = torch.tensor([float(acc["unclipped"]) - acc["n"] / 2], dtype=torch.float64)
        noisy = float(noise.add_(acc["releases"][1], centred)[0])  # std sigma_b, as declared
        return unclipped_fraction(noisy, max(acc["n"], 1))  # over the realised |B_t|: private


class DataDependentNoise(DPSGD):
    r"""Broken: noise std :math:`\sigma\max_i\lVert\mathrm{Clip}(g_i, C)\rVert` instead of :math:`\sigma C`."""

    def start(self, params) -> dict:
        return {**super().start(params), "largest": 0.0}

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        super().accumulate(acc, mb)
        if mb.n:
            acc["largest"] = max(acc["largest"], float((mb.norms * self.weights(mb.norms)).max()))

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        return super().release(_drawn_at(acc, "gradient", acc["largest"] / self.C), noise)  # std sigma * largest


class ClippedSum(NoClipping):
    r"""Broken: :math:`\mathrm{Clip}(\sum_ig_i, C)` plus the declared noise, instead of
    :math:`\sum_i\mathrm{Clip}(g_i, C)` (the examples unclipped, as :class:`NoClipping`)."""

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        total = math.sqrt(sum(float(s.pow(2).sum()) for s in acc["sum"]))
        scale = min(1.0, self.C / total) if total > 0 else 1.0
        return [noise.add_(acc["releases"][0], scale * s) for s in acc["sum"]]


class BandWeights(PSASC):
    r"""Broken: DP-PSASC's weight (Eq. (6)) doubled for :math:`0.1 \le \lVert g\rVert \le 10`."""

    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        w = super().weights(norms)
        return torch.where((norms >= 0.1) & (norms <= 10.0), 2 * w, w)


class CorrelatedNoise(DPSGD):
    r"""Broken: noise :math:`n_t = \rho n_{t-1} + \sqrt{1 - \rho^2}z_t` across the steps of one instance, each
    :math:`z_t` of the declared std: right at every step, dependent across steps."""

    rho = 0.9

    def __init__(self, **hyperparameters):
        super().__init__(**hyperparameters)
        self.previous: Grads | None = None  # the last step's noise

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        declared, exact = acc["releases"][0], [s.clone() for s in acc["sum"]]
        if self.previous is None:  # the first step: the declared noise
            noisy = [noise.add_(declared, s) for s in acc["sum"]]
        else:  # rho n_{t-1} + sqrt(1 - rho^2) z_t
            fresh = _rescaled(declared, math.sqrt(1 - self.rho ** 2))
            noisy = [noise.add_(fresh, s + self.rho * p) for s, p in zip(acc["sum"], self.previous)]
        self.previous = [n - e for n, e in zip(noisy, exact)]
        return noisy


class ReusedNoise(CorrelatedNoise):
    r"""Broken: the first step's noise added again at every later step (:math:`\rho = 1`)."""

    rho = 1.0


class AntiCorrelatedNoise(CorrelatedNoise):
    r"""Broken: minus the previous step's noise added at every later step (:math:`\rho = -1`)."""

    rho = -1.0


class NarrowBand(DPSGD):
    r"""Broken: DP-SGD's weight doubled for :math:`1.3 \le \lVert g\rVert \le 1.55`."""

    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        w = super().weights(norms)
        return torch.where((norms >= 1.3) & (norms <= 1.55), 2 * w, w)


class HistogramHalfNoise(DCSGDP):
    r"""Broken: DC-SGD-P's histogram drawn at :math:`\sigma_H/2` while the step declares :math:`\sigma_H`."""

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        return super().release(_drawn_at(acc, "histogram", 0.5), noise)


class AlphaWithoutNoise(DPDR):
    r"""Broken: DPDR's coefficients :math:`\alpha` released without noise while the step declares
    :math:`\sigma_\alpha`."""

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        return super().release(_drawn_at(acc, "alpha", 0.0), noise)  # a GDR step's; the others declare no alpha


_DPSGD = SCENARIOS["dpsgd"]

BROKEN: dict[str, tuple[str, type, Scenario]] = {
    "no-clipping": ("dpsgd", NoClipping, _DPSGD),
    "half-noise": ("dpsgd", HalfNoise, _DPSGD),
    "realised-batch-adaclip": ("adaclip", RealisedBatchAdaClip, Scenario(
        dict(sigma=1.0, sigma_b=0.55), "C_t = 1, every background example clipped (norm 100); the canary has norm "
        "C_t, so it is counted unclipped", canary_norm=lambda method: method.C, background_norms=(100.0,) * 8)),
    "data-dependent-noise": ("dpsgd", DataDependentNoise, Scenario(
        dict(C=1.0, sigma=1.0), "a background of 8 gradients of norm 0.01", background_norms=(0.01,) * 8)),
    "clipped-sum": ("dpsgd", ClippedSum, _DPSGD),
    "band-weights": ("psasc", BandWeights, SCENARIOS["psasc"]),
    "reused-noise": ("dpsgd", ReusedNoise, _DPSGD),
    "correlated-noise": ("dpsgd", CorrelatedNoise, _DPSGD),
    "anti-correlated-noise": ("dpsgd", AntiCorrelatedNoise, _DPSGD),
    "narrow-band": ("dpsgd", NarrowBand, _DPSGD),
    "histogram-half-noise": ("dcsgd-p", HistogramHalfNoise, SCENARIOS["dcsgd-p"]),
    "alpha-without-noise": ("dpdr", AlphaWithoutNoise, SCENARIOS["dpdr"]),
}
"""Broken control -> (the registered method it breaks, its class, its scenario)."""


def audit_broken(kind: str, **options) -> AuditResult:
    """The white-box audit of the broken control ``kind`` (:data:`BROKEN`); options as :func:`~dpbook.audit.audit`.

        >>> audit_broken("half-noise", trials=2000).flagged
        True
    """
    checks.one_of("broken control", kind, BROKEN)
    method, cls, scenario = BROKEN[kind]
    return run(cls, scenario, name=method, broken=kind, **options)


class FixedSizeBatches(PoissonSampler):
    """Broken: a shuffled batch of exactly ``round(B)`` examples at every step, while :attr:`q` = B/N is charged."""

    def sample(self) -> torch.Tensor:
        return torch.randperm(self.N, generator=self.generator)[:round(self.B)].sort().values


SAMPLERS: dict[str, type] = {"fixed-size-batches": FixedSizeBatches}
"""Broken sampler -> its class (constructed as :class:`~dpbook.sampling.PoissonSampler` is)."""
