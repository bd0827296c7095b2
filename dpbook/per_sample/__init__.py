r"""Per-sample gradients, and per-sample norms with re-weighted sums, of a model's trainable parameters.

Two engines (``python -m dpbook.repro.bench`` compares them with Opacus's):

- :mod:`dpbook.per_sample.vmap`: every example's gradient vector, vectorised with ``torch.func``, at the current
  or at any other parameter values. Methods that project, difference or accumulate the vectors need it (DPDR,
  DIFF, DIFF2, DP-PSASC with momentum).
- :mod:`dpbook.per_sample.book_keeping`: only the norms and :math:`\sum_i w_ig_i`, from each layer's activations and
  output gradients (ghost norms and Book-Keeping), with the rules of :mod:`dpbook.per_sample.layers`: what every
  scaled-sum method needs (DP-SGD, DC-SGD, AdaClip, dynamic clipping, Auto-S, DP-PSAC, DP-PSASC), at a fraction
  of the cost. The engine (:class:`dpbook.optim.DPOptimizer`) picks it whenever the method allows.
"""

__all__ = [
    "BookKeeping", "Grads", "NonFiniteGradientError", "PerSampleGradients", "Unsupported", "check_finite",
    "check_no_batchnorm", "clip_factors", "flat_norms", "weighted_sum"
]

from dpbook.per_sample.book_keeping import BookKeeping, Unsupported
from dpbook.per_sample.vmap import (
    Grads,
    NonFiniteGradientError,
    PerSampleGradients,
    check_finite,
    check_no_batchnorm,
    clip_factors,
    flat_norms,
    weighted_sum,
)
