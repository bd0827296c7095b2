"""Names -> method classes. A method module registers itself with ``@register("name")``."""

from __future__ import annotations

METHODS: dict[str, type] = {}


def register(name: str):
    def add(cls):
        if name in METHODS:
            raise ValueError(f"method name {name!r} is already registered by {METHODS[name].__name__}")
        cls.name = name
        METHODS[name] = cls
        return cls

    return add


def make_method(name: str, **hyperparameters):
    """Instantiate a registered method by name, e.g. ``make_method("dpsgd", C=1.0, sigma=1.1)``."""
    try:
        cls = METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; registered methods: {sorted(METHODS)}") from None
    return cls(**hyperparameters)
