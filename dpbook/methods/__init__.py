"""Private-step methods: one module per algorithm, all behind :class:`dpbook.methods.base.Method`.

    >>> from dpbook.methods import make_method, METHODS
    >>> sorted(METHODS)
    ['dpsgd']
    >>> make_method("dpsgd", C=1.0, sigma=1.0).name
    'dpsgd'
"""

from dpbook.methods.base import GaussianNoise, Method, MicroBatch, ScaledSum
from dpbook.methods.registry import METHODS, make_method, register

# Importing a method module registers it.
from dpbook.methods import dpsgd  # noqa: E402,F401
from dpbook.methods.dpsgd import DPSGD  # noqa: E402

__all__ = ["METHODS", "DPSGD", "GaussianNoise", "Method", "MicroBatch", "ScaledSum", "make_method", "register"]
