"""The private step: Poisson batch -> per-sample norms and gradients (or only their re-weighted sums) in
micro-batches -> the method's noisy sum -> / B -> any torch optimizer -> the accountant records (noise multiplier, q).

    >>> import torch
    >>> from torch import nn
    >>> from dpbook.methods import DPSGD
    >>> torch.manual_seed(0) and None
    >>> model = nn.Linear(4, 3)
    >>> opt = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), DPSGD(C=1.0, sigma=1.0),
    ...                   sample_rate=0.01, expected_batch_size=8, micro_batch_size=4)
    >>> info = opt.step(torch.randn(10, 4), torch.randint(0, 3, (10,)))
    >>> info, opt.ledger.history
    ({'noise_multiplier': 1.0, 'C': 1.0}, [(1.0, 0.01, 1)])

A step's info holds only what the privacy guarantee covers. Statistics of the raw batch (its realised size, the
method's :meth:`~dpbook.methods.base.Method.nonprivate_diagnostics`) are for teaching only, on an explicit opt-in:

    >>> opt = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), DPSGD(C=1.0, sigma=1.0),
    ...                   sample_rate=0.01, expected_batch_size=8, nonprivate_diagnostics=True)
    >>> info = opt.step(torch.randn(10, 4), torch.randint(0, 3, (10,)))
    >>> opt.nonprivate_info
    {'nonprivate/batch_size': 10}
"""

from __future__ import annotations

__all__ = ["PER_SAMPLE_ENGINES", "released_diagnostics", "check_fresh", "release", "DPOptimizer"]

from typing import Callable

import torch
from torch import nn

from dpbook import checks
from dpbook.accounting import PrivacyLedger
from dpbook.methods.base import Method, MicroBatch, is_nonprivate
from dpbook.noise import GaussianNoise
from dpbook.per_sample import PER_SAMPLE_ENGINES, NonFiniteGradientError, PerSampleView, check_no_batchnorm, engine_for
from dpbook.sampling import micro_batches


def released_diagnostics(method: Method) -> dict[str, float]:
    """``method.diagnostics()``, refused if a key names a non-private statistic (privacy hygiene rule 8)."""
    diagnostics = method.diagnostics()
    leaked = [k for k in diagnostics if is_nonprivate(k)]
    if leaked:
        raise ValueError(f"{type(method).__name__}.diagnostics() returns the non-private key(s) {leaked}: it may "
                         "hold only released quantities; move them to nonprivate_diagnostics()")
    return diagnostics


def check_fresh(method: Method) -> None:
    """Refuse a method object that has already stepped: its thresholds, DPDR's base or its momenta would carry over
    into the new run, unaccounted."""
    if method.t > 0:
        raise ValueError(f"this {method.name!r} method object has already taken {method.t} step(s) in another run; "
                         f"make a new one for every run (make_method({method.name!r}, ...))")


def release(method: Method, acc: dict, noise: GaussianNoise) -> tuple[list[torch.Tensor], dict]:
    """The method's noisy sum of one step's accumulators, and the step's info: the noise multiplier the step costs
    (fixed before the release updates any state) and the method's released diagnostics."""
    sigma = method.noise_multiplier(acc["releases"])
    noisy_sum = method.release(acc, noise)
    return noisy_sum, {"noise_multiplier": sigma, **released_diagnostics(method)}


class DPOptimizer:
    r"""Turns any torch optimizer into a private one driven by a :class:`~dpbook.methods.base.Method`.

    Args:
        model: the network (no BatchNorm; frozen parameters, ``requires_grad=False``, are left untouched).
        optimizer: any ``torch.optim`` optimizer over the model's trainable parameters (SGD, momentum, Adam...).
        method: the private-step method (e.g. ``DPSGD(C=1, sigma=1.1)``).
        sample_rate: Poisson sampling rate :math:`q = B/N`, recorded by the accountant.
        expected_batch_size: :math:`B`; the noisy sum is divided by :math:`B`, never by the realised batch size.
        loss_fn: per-example loss ``loss_fn(output, target)`` (default cross-entropy).
        micro_batch_size: physical micro-batch size (None: the logical batch at once). The result does not
            depend on it; peak memory does.
        noise_seed: seed of the noise generator (checkpointed with :meth:`state_dict`).
        per_sample: ``"auto"`` (default), ``"book-keeping"`` or ``"vmap"`` (:data:`PER_SAMPLE_ENGINES`). Both give
            the same release up to float rounding; Book-Keeping costs a fraction of ``vmap`` and serves every
            method with ``per_sample_vectors = False`` (the scaled sums). A model whose structure it cannot handle
            exactly (a layer fed keyword arguments, an output changed in place, a parameter used outside its own
            module) falls back to ``vmap`` with a warning that says why.
        nonprivate_diagnostics: after every step, keep in ``nonprivate_info`` the step's statistics of the raw
            batch (``"nonprivate/..."`` keys: its realised size and the method's non-private diagnostics). No DP
            guarantee covers them: they are for teaching, never for logs or result files.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        method: Method,
        *,
        sample_rate: float,
        expected_batch_size: float,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = nn.functional.cross_entropy,
        micro_batch_size: int | None = None,
        noise_seed: int = 0,
        nonprivate_diagnostics: bool = False,
        per_sample: str = "auto",
    ):
        check_no_batchnorm(model)
        self.model, self.optimizer, self.method = model, optimizer, method
        self.q = checks.rate("sample_rate q", sample_rate)
        self.B = checks.positive("expected_batch_size B", expected_batch_size)
        self.micro_batch_size = None if micro_batch_size is None else checks.integer(
            "micro_batch_size", micro_batch_size)
        # The per-sample engine, chosen once (dpbook.per_sample.engines); Book-Keeping hands over to vmap if it must
        self.engine = engine_for(per_sample, model, loss_fn, method=method.name,
                                 per_sample_vectors=method.per_sample_vectors)
        self.params = self.engine.params
        self._check_optimizer_covers_params()
        device = self.params[0].device
        self.noise = GaussianNoise(noise_seed, device=device)
        self.ledger = PrivacyLedger()
        self.nonprivate_diagnostics = nonprivate_diagnostics
        self.nonprivate_info: dict | None = None  # the last step's, with nonprivate_diagnostics=True
        check_fresh(method)
        method.bind(self.params, expected_batch_size=self.B)

    def _check_optimizer_covers_params(self) -> None:
        in_optimizer = {id(p) for group in self.optimizer.param_groups for p in group["params"]}
        missing = [n for n, p in zip(self.engine.names, self.params) if id(p) not in in_optimizer]
        if missing:
            raise ValueError(
                f"the optimizer does not hold the trainable parameter(s) {missing[:5]}; build it from "
                "[p for p in model.parameters() if p.requires_grad] or freeze them with requires_grad_(False)"
            )

    def step(self, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None) -> dict:
        """One private step on the logical batch ``(x, y)`` (a Poisson sample; it may be empty).

        Returns the step's info: the noise multiplier recorded and the method's (released) diagnostics.
        """
        # index (optional): the examples' indices in the training set, shape (len(x),), handed to the method with
        # each micro-batch (MicroBatch.index); methods that keep per-example state across steps need them.
        if index is None:
            if self.method.per_example_state:
                raise ValueError(f"{self.method.name!r} keeps a state per example: pass each example's index in the "
                                 "training set, DPOptimizer.step(x, y, index=...) (Trainer does)")
            index = torch.arange(len(x))  # their positions in the batch: no method reads them
        if len(index) != len(x):
            raise ValueError(f"index holds {len(index)} indices for a batch of {len(x)} examples")
        method = self.method
        acc = method.start(self.params)
        for sl in micro_batches(len(x), self.micro_batch_size):
            self._accumulate(acc, x[sl], y[sl], index[sl])
        noisy_sum, info = release(method, acc, self.noise)
        for p, s in zip(self.params, noisy_sum):
            p.grad = s / self.B  # the expected batch size B, never the realised |B_t| (privacy hygiene rule 1)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.ledger.record(info["noise_multiplier"], self.q)
        if self.nonprivate_diagnostics:
            self.nonprivate_info = {"nonprivate/batch_size": len(x), **method.nonprivate_diagnostics()}
        method.advance()
        return info

    def _accumulate(self, acc: dict, x, y, index) -> None:
        """One micro-batch into the method's accumulators. Its per-sample tensors die when this returns: the
        next micro-batch's are formed without them (peak memory of one micro-batch, not two)."""
        self.method.accumulate(acc, MicroBatch(self._view(x, y), index))

    def _view(self, x, y) -> PerSampleView:
        """The micro-batch's per-sample view from the engine; where Book-Keeping cannot be exact, from the engine
        it falls back to (with a warning) for the rest of the run. NaN/inf gradients are an error either way."""
        try:
            return self.engine(x, y)
        except NonFiniteGradientError:
            raise
        except Exception as why:  # noqa: BLE001 -- vmap gives the same release, or the model's own error
            self.engine = self.engine.fallen_back(why)
            return self.engine(x, y)

    def epsilon(self, delta: float, accountant: str = "rdp") -> float:
        r"""Privacy spent so far, :math:`(\varepsilon, \delta)`-DP."""
        return self.ledger.epsilon(delta, accountant=accountant)

    def state_dict(self) -> dict:
        return {
            "optimizer": self.optimizer.state_dict(),
            "method": self.method.state_dict(),
            "noise": self.noise.state_dict(),
            "ledger": self.ledger.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.method.load_state_dict(state["method"])
        self.noise.load_state_dict(state["noise"])
        self.ledger.load_state_dict(state["ledger"])
