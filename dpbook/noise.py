"""The only source of noise in a private step: a seeded Gaussian generator, checkpointed with the run.

Every Gaussian release (a method's noisy sum, DC-SGD's histogram, AdaClip's count, DPDR's coefficients) draws from
the one :class:`GaussianNoise` the engine owns, so that a run is reproducible from its seed and resumes with the
same draws (privacy hygiene rule 2: the noise's scale is declared, never computed from the data). A method releases
a statistic with one call that names the step's declared :class:`~dpbook.methods.base.Release`,
:meth:`GaussianNoise.add_`: the noise's std is the release's, and whoever holds the noise source sees what each
release released (the white-box audit records every release on its own, :mod:`dpbook.audit.worlds`).

    >>> noise = GaussianNoise(seed=0)
    >>> noise.like(torch.zeros(3), std=0.0).tolist()
    [0.0, 0.0, 0.0]
    >>> a = GaussianNoise(seed=1).like(torch.zeros(2), std=1.0)
    >>> torch.equal(a, GaussianNoise(seed=1).like(torch.zeros(2), std=1.0))
    True
    >>> from dpbook.methods.base import Release
    >>> GaussianNoise(seed=1).add_(Release("gradient", sensitivity=2.0, noise_multiplier=0.5), torch.zeros(2)).equal(a)
    True
"""

from __future__ import annotations

__all__ = ["GaussianNoise"]

import torch


class GaussianNoise:
    """The only source of noise in a private step: a seeded generator, checkpointed with the run."""

    def __init__(self, seed: int = 0, device: torch.device | str = "cpu"):
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def like(self, t: torch.Tensor, std: float) -> torch.Tensor:
        r"""A tensor shaped like ``t`` with i.i.d. :math:`\mathcal N(0, \mathrm{std}^2)` entries (exact zeros when
        ``std == 0``)."""
        if std == 0:
            return torch.zeros_like(t)
        return torch.randn(t.shape, generator=self.generator, device=t.device, dtype=t.dtype) * std

    def add_(self, release, statistic: torch.Tensor) -> torch.Tensor:
        r"""Release ``statistic``: add :math:`\mathcal N(0, \mathrm{std}^2)` noise to each entry, in place, with std
        the ``noise_std`` of ``release`` (the step's declared :class:`~dpbook.methods.base.Release` it belongs to), and
        return it. A release split over several tensors (one per parameter) makes one call per tensor, in order.
        Every Gaussian release of every method goes through this call (``tests/test_methods_releases.py``)."""
        return statistic.add_(self.like(statistic, release.noise_std))

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
