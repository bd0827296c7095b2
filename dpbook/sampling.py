r"""Poisson sampling and micro-batching: the first stage of every private step.

Each of the :math:`N` examples joins the batch :math:`\mathcal B_t` of step :math:`t` independently with probability
:math:`q = B/N`, where :math:`B` is the *expected* batch size. The realised size :math:`|\mathcal B_t|` is random and
private: methods divide by :math:`B`, never by :math:`|\mathcal B_t|`, and an empty batch is a valid step (it still
adds noise and is accounted).
"""

from __future__ import annotations

__all__ = ["PoissonSampler", "micro_batches"]

from typing import Iterator

import torch

from dpbook import checks


class PoissonSampler:
    """Draws Poisson batches of indices into a dataset of ``N`` examples.

    Example:
        >>> sampler = PoissonSampler(N=1000, expected_batch_size=50, seed=0)
        >>> sampler.q
        0.05
        >>> batch = sampler.sample()
        >>> batch.dtype, bool((batch >= 0).all() and (batch < 1000).all())
        (torch.int64, True)
    """

    def __init__(self, *, N: int, expected_batch_size: float, seed: int = 0):
        self.N = checks.integer("N (dataset size)", N)
        self.B = checks.positive("expected_batch_size B", expected_batch_size)
        self.q = checks.rate("sample rate q = B/N", self.B / self.N)
        self.generator = torch.Generator().manual_seed(seed)

    def sample(self) -> torch.Tensor:
        """The indices of one Poisson batch (sorted, possibly empty)."""
        keep = torch.rand(self.N, generator=self.generator) < self.q
        return keep.nonzero().flatten()

    def steps_per_epoch(self) -> int:
        r"""Number of steps that make one epoch in expectation, :math:`\mathrm{round}(1/q)`."""
        return max(1, round(1 / self.q))

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


def micro_batches(n: int, size: int | None) -> Iterator[slice]:
    """Slices that cut a logical batch of ``n`` examples into physical micro-batches of at most ``size``.

    ``size=None`` processes the logical batch at once. An empty batch yields nothing.

        >>> list(micro_batches(5, 2))
        [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    if size is not None:
        checks.integer("micro_batch_size", size)
    step = max(n, 1) if size is None else size
    for start in range(0, n, step):
        yield slice(start, min(start + step, n))
