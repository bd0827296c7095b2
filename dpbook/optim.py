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

import functools
import warnings
from typing import Callable

import torch
from torch import nn

from dpbook import checks
from dpbook.accounting import PrivacyLedger
from dpbook.methods.base import Method, MicroBatch, is_nonprivate
from dpbook.noise import GaussianNoise
from dpbook.per_sample import (
    BookKeeping,
    NonFiniteGradientError,
    PerSampleGradients,
    Unsupported,
    check_finite,
    check_no_batchnorm,
    flat_norms,
)
from dpbook.sampling import micro_batches

PER_SAMPLE_ENGINES = ("auto", "book-keeping", "vmap")
"""``DPOptimizer(per_sample=...)``: ``"book-keeping"`` forms per-sample norms and re-weighted sums from the layers'
stored tensors (:mod:`dpbook.per_sample.book_keeping`), ``"vmap"`` the per-sample gradients themselves
(:mod:`dpbook.per_sample.vmap`), ``"auto"`` the first whenever the method needs no per-sample vectors."""


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
    sigma = method.noise_multiplier()
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
        self.per_sample = PerSampleGradients(model, loss_fn)
        self.params = self.per_sample.params
        self.book_keeping = self._book_keeping(per_sample, method, model, loss_fn)
        self._check_optimizer_covers_params()
        device = self.params[0].device
        self.noise = GaussianNoise(noise_seed, device=device)
        self.ledger = PrivacyLedger()
        self.nonprivate_diagnostics = nonprivate_diagnostics
        self.nonprivate_info: dict | None = None  # the last step's, with nonprivate_diagnostics=True
        check_fresh(method)
        method.bind(self.params, expected_batch_size=self.B)

    @staticmethod
    def _book_keeping(per_sample: str, method: Method, model, loss_fn) -> BookKeeping | None:
        checks.one_of("per-sample engine", per_sample, PER_SAMPLE_ENGINES)
        if per_sample == "book-keeping" and method.per_sample_vectors:
            raise ValueError(f"{method.name!r} reads the per-sample gradient vectors (per_sample_vectors = True), "
                             "which Book-Keeping never forms; use per_sample='vmap' or 'auto'")
        if per_sample == "vmap" or method.per_sample_vectors:
            return None
        return BookKeeping(model, loss_fn)

    def _check_optimizer_covers_params(self) -> None:
        in_optimizer = {id(p) for group in self.optimizer.param_groups for p in group["params"]}
        missing = [n for n, p in zip(self.per_sample.names, self.params) if id(p) not in in_optimizer]
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
        # each micro-batch (MicroBatch.index) for methods that keep per-example state across steps.
        if index is not None and len(index) != len(x):
            raise ValueError(f"index holds {len(index)} indices for a batch of {len(x)} examples")
        method = self.method
        acc = method.start(self.params)
        for sl in micro_batches(len(x), self.micro_batch_size):
            self._accumulate(acc, x[sl], y[sl], None if index is None else index[sl])
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
        grads, norms, book_kept = self._norms_and_sums(x, y)
        if book_kept is None:
            mb = MicroBatch(x, y, grads, norms, functools.partial(self._grads_at, x, y), index)
        else:
            mb = MicroBatch(x, y, None, norms, None, index, book_kept, functools.partial(self._pass_at, x, y))
        self.method.accumulate(acc, mb)

    def _norms_and_sums(self, x, y):
        """``(grads, norms, None)`` from ``vmap``, or ``(None, norms, pass)`` from Book-Keeping."""
        if self.book_keeping is not None:
            try:
                book_kept = self.book_keeping(x, y)
            except Exception as why:  # noqa: BLE001 -- vmap gives the same release, or the model's own error
                reason = str(why) if isinstance(why, Unsupported) else f"{type(why).__name__}: {why}"
                self._fall_back(f"Book-Keeping cannot handle this model exactly ({reason})")
            else:
                if bool(torch.isfinite(book_kept.norms).all()):
                    return None, book_kept.norms, book_kept
                grads, norms = self._per_sample_checked(x, y)  # NonFiniteGradientError names the parameter
                self._fall_back("Book-Keeping's norms overflowed where the per-sample gradients did not")
                return grads, norms, None
        return *self._per_sample_checked(x, y), None

    def _pass_at(self, x, y, params):
        """The Book-Keeping pass of ``(x, y)`` at ``params``: the model's parameters point at them for the pass
        (no copy, no gradient), and back at their own values after it; NaN/inf is an error."""
        own = [p.data for p in self.params]
        try:
            for p, value in zip(self.params, params):
                p.data = value
            book_kept = self.book_keeping(x, y)
        finally:
            for p, value in zip(self.params, own):
                p.data = value
        if not bool(torch.isfinite(book_kept.norms).all()):
            self._per_sample_checked(x, y, params)  # NonFiniteGradientError names the parameter
            raise NonFiniteGradientError("Book-Keeping's per-sample norms at the other parameter values overflowed "
                                         "where the per-sample gradients did not; use per_sample='vmap'")
        return book_kept

    def _fall_back(self, why: str) -> None:
        warnings.warn(f"{why}; this run uses the vmap per-sample gradients (same result, slower)", stacklevel=4)
        self.book_keeping = None

    def _per_sample_checked(self, x, y, params=None):
        """Per-sample gradients (at ``params``, default the current ones) and their norms; NaN/inf is an error."""
        grads = self.per_sample(x, y, params)
        norms = flat_norms(grads)
        check_finite(grads, norms, self.per_sample.names)
        return grads, norms

    def _grads_at(self, x, y, params):
        return self._per_sample_checked(x, y, params)[0]

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
