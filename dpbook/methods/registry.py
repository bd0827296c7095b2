"""Names -> method classes. A method module registers itself with ``@register("name")``, and its class carries its
:class:`~dpbook.methods.declaration.Declaration` (label, audit scenario, a short run's hyperparameters)."""

from __future__ import annotations

__all__ = [
    "METHODS", "register", "make_method", "check_hyperparameter_names", "hyperparameter_names"
]

import inspect

from dpbook.checks import did_you_mean
from dpbook.methods.declaration import Declaration

METHODS: dict[str, type] = {}


def register(name: str):
    """The class decorator of a method module: ``@register("name")`` above a class whose body sets its
    ``declaration`` (its own, not one inherited from the class it extends)."""
    def add(cls):
        if name in METHODS:
            raise ValueError(f"method name {name!r} is already registered by {METHODS[name].__name__}")
        declaration = cls.__dict__.get("declaration")
        if not isinstance(declaration, Declaration):
            raise TypeError(f"method {name!r} ({cls.__name__}) has no declaration of its own: set `declaration = "
                            f"Declaration(label=..., audit=..., run=...)` in its class body "
                            f"(dpbook.methods.declaration says what each field is for)")
        cls.name = name
        METHODS[name] = cls
        return cls

    return add


def make_method(name: str, **hyperparameters):
    """Instantiate a registered method by name, e.g. ``make_method("dpsgd", C=1.0, sigma=1.1)``.

    A misspelt method or hyperparameter name, or a missing hyperparameter, is a ValueError that lists the valid ones:

    >>> make_method("dpsgd", C=1.0, sigma=1.0, Cc=2.0)
    Traceback (most recent call last):
    ...
    ValueError: method 'dpsgd' has no hyperparameter 'Cc' (did you mean 'C'?); its hyperparameters: C, sigma
    """
    try:
        cls = METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}{did_you_mean(name, METHODS)}; "
                         f"registered methods: {sorted(METHODS)}") from None
    accepted = hyperparameter_names(cls)
    check_hyperparameter_names(name, hyperparameters, accepted)
    missing = [n for n, required in accepted.items() if required and n not in hyperparameters]
    if missing:
        raise ValueError(f"method {name!r} needs the hyperparameter(s) {', '.join(missing)}; "
                         f"its hyperparameters: {', '.join(accepted)}")
    return cls(**hyperparameters)


def check_hyperparameter_names(method: str, given, accepted) -> None:
    """A ValueError for the first name in ``given`` that the method ``method`` does not accept (``accepted``),
    with the closest accepted name and all of them."""
    for name in given:
        if name not in accepted:
            raise ValueError(f"method {method!r} has no hyperparameter {name!r}{did_you_mean(name, accepted)}; "
                             f"its hyperparameters: {', '.join(accepted)}")


def hyperparameter_names(cls: type) -> dict[str, bool]:
    """The keyword arguments of a method class, each with whether it is required."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return {p.name: p.default is inspect.Parameter.empty for p in parameters
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
