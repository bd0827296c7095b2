"""Private-step methods: one module per algorithm, all behind :class:`dpbook.methods.base.Method`.

Every module of this package is imported here, and importing a method module registers its methods
(``@register("name")``), so adding a method is adding a module: its class declares what is intrinsic to it besides
the algorithm (:mod:`dpbook.methods.declaration`).

    >>> from dpbook.methods import make_method, METHODS
    >>> "dpsgd" in METHODS
    True
    >>> make_method("dpsgd", C=1.0, sigma=1.0).name
    'dpsgd'
"""

__all__ = [
    "METHODS", "DPSGD", "Declaration", "GaussianNoise", "Method", "MicroBatch", "ScaledSum", "make_method", "register"
]

import importlib
import pkgutil

from dpbook.methods.base import Method, MicroBatch, ScaledSum
from dpbook.methods.declaration import Declaration
from dpbook.methods.registry import METHODS, make_method, register
from dpbook.noise import GaussianNoise

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "declaration", "registry", "scenario"):
        importlib.import_module(f"{__name__}.{_module.name}")

from dpbook.methods.dpsgd import DPSGD  # noqa: E402
