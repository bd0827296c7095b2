r"""Is the sampler Poisson? A statistical test of the batches a sampler draws.

The accountant charges every step as a Poisson-subsampled Gaussian mechanism at :math:`q = B/N`: that is a claim
about the sampler, that each of the :math:`N` examples joins each step's batch independently of every other
example and of every other step, with probability :math:`q`. The white-box audit of :mod:`dpbook.audit.white_box`
holds the background batch fixed and draws only the canary's membership (through the engine's sampler, but one
example's membership has rate :math:`q` under many samplers), so it cannot tell a Poisson sampler from one that
draws fixed-size shuffled batches of :math:`B`: there every example's rate is still :math:`q`, but the batch size
never varies, two examples exclude each other a little, and adding one example to the data set displaces another
from its batch, so the amplification by subsampling that the accountant assumes for add/remove neighbours does not
hold. This module tests the sampler itself. From ``draws`` consecutive batches of one sampler it computes five
p-values:

``rate``
    every inclusion of every example, against :math:`\mathrm{Binomial}(\text{draws}\cdot N, q)` (two-sided);
``batch sizes``
    the batch sizes against :math:`\mathrm{Binomial}(N, q)`: a chi-square goodness of fit, the tails pooled into
    bins expected to hold at least 5 batches;
``empty batches``
    the number of empty batches against :math:`\mathrm{Binomial}(\text{draws}, (1 - q)^N)` (two-sided; an empty
    batch is a valid step, and a sampler that never draws one is not Poisson);
``across steps``
    example :math:`i` at step :math:`t` against example :math:`i` at step :math:`t + 1`, every :math:`i` and
    :math:`t`: the chi-square test of independence of the 2 x 2 table (Fisher's exact test where a cell expects
    fewer than 5 counts, at small :math:`q`);
``across examples``
    example :math:`i` against example :math:`i + 1` at the same step, likewise.

The chi-square p-values are asymptotic, which the bins and cells expecting at least 5 counts keep close.

The sampler is *flagged* when a p-value is below :data:`ALPHA` divided by their number (Bonferroni: a correct
sampler is flagged with probability at most :data:`ALPHA`).

    >>> from dpbook.sampling import PoissonSampler
    >>> poisson_test(PoissonSampler(N=20, expected_batch_size=4, seed=0), draws=4000).flagged
    False
    >>> from dpbook.audit.broken import FixedSizeBatches
    >>> result = poisson_test(FixedSizeBatches(N=20, expected_batch_size=4, seed=0), draws=4000)
    >>> result.flagged, result.failed
    (True, ['batch sizes', 'empty batches', 'across examples'])
"""

from __future__ import annotations

__all__ = ["ALPHA", "TESTS", "SamplerTest", "poisson_test"]

from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from dpbook import checks

ALPHA = 1e-3
"""The probability that a correct sampler is flagged (all tests together)."""

TESTS = ("rate", "batch sizes", "empty batches", "across steps", "across examples")
"""The tests of :func:`poisson_test`, in order (module docstring)."""


@dataclass(frozen=True)
class SamplerTest:
    """The p-value of every test of :data:`TESTS` on one sampler's batches, and the verdict."""

    N: int
    q: float
    draws: int
    p_values: dict[str, float]
    alpha: float = ALPHA

    @property
    def failed(self) -> list[str]:
        """The tests whose p-value is below ``alpha / len(TESTS)``."""
        return [name for name, p in self.p_values.items() if p < self.alpha / len(self.p_values)]

    @property
    def flagged(self) -> bool:
        """Is the sampler refuted as Poisson at level ``alpha``?"""
        return bool(self.failed)


def _binomial_p(successes: int, trials: int, p: float) -> float:
    return float(stats.binomtest(int(successes), int(trials), p).pvalue)


def _sizes_p(sizes: np.ndarray, N: int, q: float) -> float:
    """Chi-square goodness of fit of the batch sizes to Binomial(N, q), tails pooled into bins expected to hold at
    least 5 batches (a constant size lands in one bin and is refuted by the others' emptiness)."""
    expected = stats.binom.pmf(np.arange(N + 1), N, q) * len(sizes)
    observed = np.bincount(sizes, minlength=N + 1).astype(float)
    edges, total = [0], 0.0
    for k in range(N + 1):  # close a bin once it expects 5 batches; the last bin takes what remains
        total += expected[k]
        if total >= 5:
            edges.append(k + 1)
            total = 0.0
    edges[-1] = N + 1
    if len(edges) < 3:
        return 1.0  # fewer than two bins: too few draws to test the shape
    exp = np.add.reduceat(expected, edges[:-1])
    obs = np.add.reduceat(observed, edges[:-1])
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def _independence_p(a: np.ndarray, b: np.ndarray) -> float:
    """Test of independence of two boolean samples: chi-square, or Fisher's exact test where a cell of the 2 x 2
    table expects fewer than 5 counts (1 when either sample is constant: nothing to test)."""
    table = np.array([[np.sum(a & b), np.sum(a & ~b)], [np.sum(~a & b), np.sum(~a & ~b)]])
    if (table.sum(0) == 0).any() or (table.sum(1) == 0).any():
        return 1.0
    expected = np.outer(table.sum(1), table.sum(0)) / table.sum()
    if expected.min() < 5:
        return float(stats.fisher_exact(table).pvalue)
    return float(stats.chi2_contingency(table, correction=False).pvalue)


def poisson_test(sampler, draws: int = 4000, alpha: float = ALPHA) -> SamplerTest:
    """Draw ``draws`` batches from ``sampler`` (anything with ``N``, ``q`` and ``sample()`` returning the indices of
    one batch, as :class:`dpbook.sampling.PoissonSampler`; its generator advances as in training) and test them
    (module docstring)."""
    draws = checks.integer("draws", draws, minimum=2)
    alpha = checks.open_unit("alpha", alpha)
    N, q = int(sampler.N), float(sampler.q)
    member = torch.zeros(draws, N, dtype=torch.bool)
    for t in range(draws):
        member[t, sampler.sample()] = True
    member = member.numpy()
    sizes = member.sum(1)
    p_values = {
        "rate": _binomial_p(member.sum(), draws * N, q),
        "batch sizes": _sizes_p(sizes, N, q),
        "empty batches": _binomial_p((sizes == 0).sum(), draws, (1 - q) ** N),
        "across steps": _independence_p(member[:-1].ravel(), member[1:].ravel()),
        "across examples": _independence_p(member[:, :-1].ravel(), member[:, 1:].ravel()),
    }
    return SamplerTest(N, q, draws, p_values, alpha)
