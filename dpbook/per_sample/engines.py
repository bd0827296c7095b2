r"""The two per-sample engines: how a micro-batch's :class:`~dpbook.per_sample.view.PerSampleView` is made.

:class:`VmapEngine` forms every example's gradient (:class:`~dpbook.per_sample.vmap.PerSampleGradients`) and
answers with a :class:`~dpbook.per_sample.view.FormedView`; :class:`BookKeepingEngine` makes one Book-Keeping pass
(:class:`~dpbook.per_sample.book_keeping.BookKeeping`) and answers with a
:class:`~dpbook.per_sample.view.BookKeptView`, at a fraction of the cost. :func:`engine_for` chooses one, once, from
``DPOptimizer(per_sample=...)`` (:data:`PER_SAMPLE_ENGINES`) and the method. Both check that every norm is finite
(NaN or inf is an error naming the parameter, never clipped into the update).

Book-Keeping's contract is exactness: where it cannot handle a model exactly (a layer fed keyword arguments, an
output changed in place, a parameter used outside its own module, norms that overflow where the per-sample gradients
do not), its call raises, and :meth:`BookKeepingEngine.fallen_back` hands over to its ``vmap`` engine with a
warning that says why: the same release, slower.

    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(4, 3))
    >>> engine = engine_for("auto", model, nn.functional.cross_entropy, method="dpsgd", per_sample_vectors=False)
    >>> view = engine(torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0]))
    >>> type(engine).__name__, type(view).__name__, view.n
    ('BookKeepingEngine', 'BookKeptView', 5)
"""

from __future__ import annotations

__all__ = ["PER_SAMPLE_ENGINES", "VmapEngine", "BookKeepingEngine", "engine_for"]

import functools
import warnings
from typing import Callable, Sequence

import torch
from torch import nn

from dpbook import checks
from dpbook.per_sample.book_keeping import BookKeeping, Pass, Unsupported
from dpbook.per_sample.view import BookKeptView, FormedView
from dpbook.per_sample.vmap import NonFiniteGradientError, PerSampleGradients, check_finite, flat_norms

PER_SAMPLE_ENGINES = ("auto", "book-keeping", "vmap")
"""``DPOptimizer(per_sample=...)``: ``"book-keeping"`` forms per-sample norms and re-weighted sums from the layers'
stored tensors (:mod:`dpbook.per_sample.book_keeping`), ``"vmap"`` the per-sample gradients themselves
(:mod:`dpbook.per_sample.vmap`), ``"auto"`` the first whenever the method needs no per-sample vectors."""

_Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class VmapEngine:
    """Formed per-sample gradients: ``engine(x, y)`` is a :class:`~dpbook.per_sample.view.FormedView` whose ``at``
    forms them at other parameter values. ``gradients`` is the function that forms them (the one-run audit wraps it
    to add its canaries)."""

    def __init__(self, model: nn.Module, loss_fn: _Loss):
        self.gradients = PerSampleGradients(model, loss_fn)

    @property
    def params(self) -> list[torch.Tensor]:
        """The model's trainable parameters, in the order of every per-parameter result."""
        return self.gradients.params

    @property
    def names(self) -> list[str]:
        return self.gradients.names

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> FormedView:
        grads, norms = self.checked(x, y)
        return FormedView(grads, norms, functools.partial(self._at, x, y))

    def checked(self, x, y, params: Sequence[torch.Tensor] | None = None):
        """Per-sample gradients (at ``params``, default the current ones) and their norms; NaN/inf is an error."""
        grads = self.gradients(x, y, params)
        norms = flat_norms(grads)
        check_finite(grads, norms, self.gradients.names)
        return grads, norms

    def _at(self, x, y, params):
        return self.checked(x, y, params)[0]

    def fallen_back(self, why: Exception) -> "VmapEngine":
        """There is nothing to fall back to: the error is the model's or the data's own."""
        raise why


class BookKeepingEngine:
    """One Book-Keeping pass per micro-batch (``passes``): ``engine(x, y)`` is a
    :class:`~dpbook.per_sample.view.BookKeptView` whose ``at`` makes the pass at other parameter values. ``vmap``
    checks its failures (an overflow that the per-sample gradients share is the data's error) and takes over when
    it cannot be exact (:meth:`fallen_back`)."""

    def __init__(self, model: nn.Module, loss_fn: _Loss, vmap: VmapEngine):
        self.passes, self.vmap = BookKeeping(model, loss_fn), vmap
        self.params, self.names = vmap.params, vmap.names

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> BookKeptView:
        kept = self.passes(x, y)
        if not bool(torch.isfinite(kept.norms).all()):
            self.vmap.checked(x, y)  # NonFiniteGradientError names the parameter
            raise Unsupported("Book-Keeping's norms overflowed where the per-sample gradients did not")
        return BookKeptView(kept, functools.partial(self._at, x, y))

    def _at(self, x, y, params) -> Pass:
        """The pass of ``(x, y)`` at ``params``: the model's parameters point at them for the pass (no copy, no
        gradient), and back at their own values after it; NaN/inf is an error."""
        own = [p.data for p in self.params]
        try:
            for p, value in zip(self.params, params):
                p.data = value
            kept = self.passes(x, y)
        finally:
            for p, value in zip(self.params, own):
                p.data = value
        if not bool(torch.isfinite(kept.norms).all()):
            self.vmap.checked(x, y, params)  # NonFiniteGradientError names the parameter
            raise NonFiniteGradientError("Book-Keeping's per-sample norms at the other parameter values overflowed "
                                         "where the per-sample gradients did not; use per_sample='vmap'")
        return kept

    def fallen_back(self, why: Exception) -> VmapEngine:
        """The ``vmap`` engine, with a warning that says why Book-Keeping could not make this pass exactly (for the
        rest of the run: the same release, slower)."""
        reason = str(why) if isinstance(why, Unsupported) else f"{type(why).__name__}: {why}"
        warnings.warn(f"Book-Keeping cannot handle this model exactly ({reason}); this run uses the vmap per-sample "
                      "gradients (same result, slower)", stacklevel=5)
        return self.vmap


def engine_for(per_sample: str, model: nn.Module, loss_fn: _Loss, *, method: str,
               per_sample_vectors: bool) -> VmapEngine | BookKeepingEngine:
    """The engine ``per_sample`` (:data:`PER_SAMPLE_ENGINES`) names for the method ``method``, which does
    (``per_sample_vectors``) or does not read the per-sample gradient vectors: Book-Keeping for ``"auto"`` whenever
    it may."""
    checks.one_of("per-sample engine", per_sample, PER_SAMPLE_ENGINES)
    if per_sample == "book-keeping" and per_sample_vectors:
        raise ValueError(f"{method!r} reads the per-sample gradient vectors (per_sample_vectors = True), which "
                         "Book-Keeping never forms; use per_sample='vmap' or 'auto'")
    vmap = VmapEngine(model, loss_fn)
    if per_sample == "vmap" or per_sample_vectors:
        return vmap
    return BookKeepingEngine(model, loss_fn, vmap)
