"""Plot conventions shared by every chapter: one colour per method across the whole book, labelled axes."""

from __future__ import annotations

import matplotlib.pyplot as plt

# One colour per method name of the registry (and for non-private training), fixed for the whole book.
METHOD_COLOURS = {
    "nonprivate": "#000000",
    "dpsgd": "#1f77b4",
    "dcsgd-p": "#d62728",
    "dcsgd-e": "#ff7f0e",
    "adaclip": "#2ca02c",
    "dynamic": "#9467bd",
    "autos": "#8c564b",
    "psac": "#e377c2",
    "psasc": "#bcbd22",
    "psasc-momentum": "#17becf",
    "psasc-momentum-gd": "#0e7c86",
    "dpdr": "#7f7f7f",
    "diff": "#aec7e8",
    "diff2": "#98df8a",
}


def method_colour(name: str) -> str:
    """The book's colour for a method (a KeyError names the known methods)."""
    try:
        return METHOD_COLOURS[name]
    except KeyError:
        raise KeyError(f"no colour for method {name!r}; known: {sorted(METHOD_COLOURS)}") from None


def axes(title: str, xlabel: str, ylabel: str, *, ax=None, figsize=(6, 4)):
    """A fresh (or given) axes with a caption-like title and labelled axes (put units in the labels)."""
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return ax


def annotate_empty(ax, text: str = "not run yet", **text_kwargs):
    """Say in the middle of an empty panel why it is empty (e.g. no result file yet); ``text_kwargs`` go to
    ``ax.text`` (defaults: grey, size 13).

    >>> ax = axes("Test accuracy", "epoch", "test accuracy (%)")
    >>> annotate_empty(ax).get_text()
    'not run yet'
    >>> plt.close("all")
    """
    style = dict(ha="center", va="center", color="0.45", fontsize=13) | text_kwargs
    return ax.text(0.5, 0.5, text, transform=ax.transAxes, **style)
