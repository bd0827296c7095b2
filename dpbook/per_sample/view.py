r"""What a method may ask of one micro-batch's per-sample gradients: one interface, two ways to answer it.

:class:`PerSampleView` is the list of questions: each example's gradient norm :math:`\lVert g_i\rVert`, re-weighted
sums :math:`\sum_iw_ig_i`, each parameter's per-sample squared norms :math:`\lVert g_i^{(l)}\rVert^2` and inner
products :math:`\langle g_i^{(l)}, v^{(l)}\rangle` with fixed tensors, the same examples at other parameter values
(:meth:`~PerSampleView.at`) and linear combinations of such views (:meth:`~PerSampleView.combined`). Two classes
answer it:

- :class:`FormedView`, from the per-sample gradient tensors themselves (``vmap``, Opacus's ``grad_sample``, a test's
  tensors); it also hands them out (:attr:`~FormedView.grads`) to the methods that read the vectors;
- :class:`BookKeptView`, from one Book-Keeping pass's stored activations and output gradients
  (:class:`~dpbook.per_sample.book_keeping.Pass`), never forming the whole model's per-sample gradients.

Both give the same numbers up to float rounding (``tests/test_book_keeping.py``). The engines that make them, and
choose between them, are in :mod:`dpbook.per_sample.engines`.

    >>> g = [torch.tensor([[3.0, 0.0], [0.0, 1.0]]), torch.tensor([[4.0], [0.0]])]  # 2 examples, 2 parameters
    >>> view = FormedView(g, flat_norms(g), at=lambda params: g)
    >>> view.n, view.norms.tolist(), [s.tolist() for s in view.weighted_sum(torch.tensor([1.0, 2.0]))]
    (2, [5.0, 1.0], [[3.0, 2.0], [4.0]])
    >>> PerSampleView.combined([(1.0, view), (-1.0, view.at(None))]).norms.tolist()  # g_i - g_i
    [0.0, 0.0]
"""

from __future__ import annotations

__all__ = ["PerSampleView", "FormedView", "BookKeptView", "no_other_values"]

import abc
from typing import Callable, Iterable, Sequence

import torch

from dpbook.per_sample.book_keeping import Combination, Pass
from dpbook.per_sample.layers import combination
from dpbook.per_sample.vmap import Grads, flat_norms, inner_products, layer_sq_norms, weighted_sum


class PerSampleView(abc.ABC):
    """The per-sample gradients :math:`g_1, \\ldots, g_n` of one micro-batch, as far as a method may ask about them."""

    norms: torch.Tensor  # the flat L2 norm of each example's gradient over all trainable parameters, shape (n,)

    @property
    def n(self) -> int:
        return len(self.norms)

    @property
    @abc.abstractmethod
    def grads(self) -> Grads:
        """The per-sample gradient tensors, one ``(n, *shape)`` per parameter (only :class:`FormedView` has them)."""

    @abc.abstractmethod
    def weighted_sum(self, weights: torch.Tensor) -> Iterable[torch.Tensor]:
        r""":math:`\sum_iw_ig_i` for each parameter in order (one at a time where the view allows: add each into an
        accumulator before asking for the next)."""

    @abc.abstractmethod
    def layer_sq_norms(self) -> torch.Tensor:
        r""":math:`\lVert g_i^{(l)}\rVert^2` for each example and parameter tensor :math:`l`, shape ``(n, m)``."""

    @abc.abstractmethod
    def inner(self, vectors: Sequence[torch.Tensor]) -> torch.Tensor:
        r""":math:`\langle g_i^{(l)}, v^{(l)}\rangle` with one fixed tensor ``vectors[l]`` per parameter, shape
        ``(n, m)``."""

    @abc.abstractmethod
    def at(self, params: Sequence[torch.Tensor]) -> "PerSampleView":
        """The same examples' view at other parameter values (``params``, one per trainable parameter)."""

    @staticmethod
    def combined(terms: Sequence[tuple[float, "PerSampleView"]]) -> "PerSampleView":
        r"""The view of :math:`m_i = \sum_jc_jg_i^{(j)}`, ``terms`` the pairs :math:`(c_j, \text{view}_j)` of the same
        examples at several parameter values, all answered the same way (formed, or Book-Kept)."""
        kinds = {type(view) for _, view in terms}
        if len(kinds) != 1:
            raise TypeError(f"a combination of views answered in different ways ({sorted(k.__name__ for k in kinds)})")
        return kinds.pop()._combined(terms)

    @staticmethod
    @abc.abstractmethod
    def _combined(terms: Sequence[tuple[float, "PerSampleView"]]) -> "PerSampleView":
        """:meth:`combined` for views of this class."""


def no_other_values(params: Sequence[torch.Tensor]):
    """The ``at`` of a view with no value at other parameters: a combination of iterates, a per-example momentum, a
    batch of Opacus's per-sample gradients, synthetic norms."""
    raise ValueError("these per-sample gradients (a combination of iterates, a per-example momentum, synthetic norms) "
                     "have no value at other parameter values")


class FormedView(PerSampleView):
    """The view of formed per-sample gradients ``grads`` with their flat norms; ``at(params)`` gives the same examples'
    gradients at other parameter values (:func:`no_other_values` where there are none)."""

    def __init__(self, grads: Grads, norms: torch.Tensor, at: Callable[[Sequence[torch.Tensor]], Grads]):
        self._grads, self.norms, self._at = grads, norms, at

    @property
    def grads(self) -> Grads:
        return self._grads

    def weighted_sum(self, weights: torch.Tensor) -> Iterable[torch.Tensor]:
        return weighted_sum(self._grads, weights)

    def layer_sq_norms(self) -> torch.Tensor:
        return layer_sq_norms(self._grads)

    def inner(self, vectors: Sequence[torch.Tensor]) -> torch.Tensor:
        return inner_products(self._grads, vectors)

    def at(self, params: Sequence[torch.Tensor]) -> "FormedView":
        grads = self._at(params)
        return FormedView(grads, flat_norms(grads), self._at)

    @staticmethod
    def _combined(terms: Sequence[tuple[float, "FormedView"]]) -> "FormedView":
        coefficients = [c for c, _ in terms]
        grads = [combination(parts, coefficients) for parts in zip(*(view.grads for _, view in terms))]
        return FormedView(grads, flat_norms(grads), no_other_values)


class BookKeptView(PerSampleView):
    """The view of a Book-Keeping pass (or a :class:`~dpbook.per_sample.book_keeping.Combination` of passes);
    ``at(params)`` gives the pass of the same examples at other parameter values."""

    def __init__(self, kept: Pass | Combination, at: Callable[[Sequence[torch.Tensor]], Pass]):
        self.kept, self.norms, self._at = kept, kept.norms, at

    @property
    def grads(self) -> Grads:
        raise TypeError("Book-Keeping never forms the per-sample gradients: a method that reads them declares "
                        "per_sample_vectors = True, and the engine then forms them (vmap)")

    def weighted_sum(self, weights: torch.Tensor) -> Iterable[torch.Tensor]:
        return self.kept.summed(weights)

    def layer_sq_norms(self) -> torch.Tensor:
        return self.kept.layer_sq_norms()

    def inner(self, vectors: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.kept.inner(vectors)

    def at(self, params: Sequence[torch.Tensor]) -> "BookKeptView":
        return BookKeptView(self._at(params), self._at)

    @staticmethod
    def _combined(terms: Sequence[tuple[float, "BookKeptView"]]) -> "BookKeptView":
        return BookKeptView(Pass.combined([(c, view.kept) for c, view in terms]), no_other_values)
