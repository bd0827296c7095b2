r"""Per-sample gradients, and per-sample norms with re-weighted sums, of a model's trainable parameters.

Two engines (``python -m dpbook.repro.bench`` compares them with Opacus's):

- :mod:`dpbook.per_sample.vmap`: every example's gradient vector, vectorised with ``torch.func``, at the current
  or at any other parameter values. Methods that keep per-example vectors across steps need it (DP-PSASC with
  momentum, DP-PSAC's momentum); every method can use it (``per_sample="vmap"``).
- :mod:`dpbook.per_sample.book_keeping`: norms, :math:`\sum_i w_ig_i`, inner products with fixed vectors and norms of
  differences between two passes, from each layer's activations and output gradients (ghost norms and
  Book-Keeping), with the rules of :mod:`dpbook.per_sample.layers`: what the scaled-sum methods (DP-SGD, DC-SGD,
  AdaClip, dynamic clipping, Auto-S, DP-PSAC, DP-PSASC) and the vector methods DPDR, DIFF and DIFF2 need, at a
  fraction of the cost. The engine (:class:`dpbook.optim.DPOptimizer`) picks it whenever the method allows.

Either way a method sees one interface, :class:`~dpbook.per_sample.view.PerSampleView`
(:mod:`dpbook.per_sample.view`), made by the engine objects of :mod:`dpbook.per_sample.engines`.
"""

__all__ = [
    "BookKeeping", "Combination", "Grads", "NonFiniteGradientError", "Pass", "PerSampleGradients", "Unsupported",
    "check_finite", "check_no_batchnorm", "clip_factors", "flat_norms", "inner_products", "layer_sq_norms",
    "weighted_sum", "PerSampleView", "FormedView", "BookKeptView", "no_other_values", "PER_SAMPLE_ENGINES",
    "VmapEngine", "BookKeepingEngine", "engine_for"
]

from dpbook.per_sample.book_keeping import BookKeeping, Combination, Pass, Unsupported
from dpbook.per_sample.engines import PER_SAMPLE_ENGINES, BookKeepingEngine, VmapEngine, engine_for
from dpbook.per_sample.view import BookKeptView, FormedView, PerSampleView, no_other_values
from dpbook.per_sample.vmap import (
    Grads,
    NonFiniteGradientError,
    PerSampleGradients,
    check_finite,
    check_no_batchnorm,
    clip_factors,
    flat_norms,
    inner_products,
    layer_sq_norms,
    weighted_sum,
)
