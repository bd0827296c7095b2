"""Plot conventions shared by every chapter: one colour per method across the whole book, labelled axes, and
figures sized for the book's text column (panels stacked in rows, one legend outside the data)."""

from __future__ import annotations

__all__ = ["NONPRIVATE_COLOUR", "method_colour", "method_label", "HYPERPARAMETER_SYMBOLS",
           "hyperparameter_label", "axes", "Panels", "show_panels", "not_run_yet",
           "PAGE_WIDTH", "panel_grid", "legend_below", "shade_styles", "SMALLEST_TEXT_KEY", "smallest_text_px",
           "book_figures"]

from collections.abc import Sequence
from typing import NamedTuple

import matplotlib.pyplot as plt
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.text import Text

from dpbook.methods import METHODS
from dpbook.repro.cast import CAST, in_book_order

NONPRIVATE_COLOUR = "#000000"
"""The colour of non-private training (each method's colour is its row of the book's cast, :mod:`dpbook.repro.cast`)."""


def method_colour(name: str) -> str:
    """The book's colour for a method of its cast (:data:`dpbook.repro.cast.CAST`) or for ``"nonprivate"``; a KeyError
    names the known ones.

    >>> method_colour("dpsgd"), method_colour("nonprivate")
    ('#1f77b4', '#000000')
    """
    if name == "nonprivate":
        return NONPRIVATE_COLOUR
    try:
        return CAST[name].colour
    except KeyError:
        raise KeyError(f"no colour for method {name!r}; known: {['nonprivate', *in_book_order()]} (a method the book "
                       f"shows has its row in dpbook.repro.cast.CAST)") from None


def method_label(name: str) -> str:
    """The book's name for a registered method (its declared ``label``) or for ``"nonprivate"``: what tables and
    legends show, never the registry's key; a KeyError names the known ones.

    >>> method_label("adaclip"), method_label("nonprivate")
    ('Andrew et al.', 'non-private')
    """
    if name == "nonprivate":
        return "non-private"
    try:
        return METHODS[name].declaration.label
    except KeyError:
        raise KeyError(f"no label for method {name!r}; known: {['nonprivate', *METHODS]}") from None


#: The papers' letters (TeX, with dollars) for the hyperparameters the benchmark grids vary, by code name
#: (:func:`hyperparameter_label` reads it).
#:
#: :meta hide-value:
HYPERPARAMETER_SYMBOLS = {
    "C": "$C$", "p": "$p$", "eta_C": r"$\eta_C$", "C_0": "$C_0$", "rho_C": r"$\rho_C$", "r": "$r$", "s": "$s$",
    "K0": "$K_0$", "gamma0": r"$\gamma_0$", "gamma1": r"$\gamma_1$", "C_perp": r"$C_\perp$", "C_alpha": r"$C_\alpha$",
    "C_g": "$C_g$", "C_d": "$C_d$", "restart_every": r"$T_{\text{restart}}$",
    "restart_noise_ratio": r"$\sigma_{\text{restart}}/\sigma$"}


def hyperparameter_label(name: str, method: str | None = None) -> str:
    r"""A grid's hyperparameter as the text writes it (:data:`HYPERPARAMETER_SYMBOLS`; DPDR's ``s`` is its GDR
    length, :math:`s_{\text{GDR}}`); a name without a symbol stays its code name, in backticks.

    >>> hyperparameter_label("C_perp"), hyperparameter_label("s", "dpdr"), hyperparameter_label("lr")
    ('$C_\\perp$', '$s_{\\text{GDR}}$', '`lr`')
    """
    if (method, name) == ("dpdr", "s"):
        return r"$s_{\text{GDR}}$"
    return HYPERPARAMETER_SYMBOLS.get(name, f"`{name}`")


def axes(title: str, xlabel: str, ylabel: str, *, ax=None, figsize=(6, 4)):
    """A fresh (or given) axes with a caption-like title and labelled axes (put units in the labels)."""
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return ax


class Panels(NamedTuple):
    """A reproduction's figure as far as its results go: the panels that have results, drawn (``figure``, None when
    none has), and the names of the panels that have none yet (``missing``), which are not drawn empty."""

    figure: Figure | None
    missing: list[str]


def show_panels(panels: Panels | None) -> Panels | None:
    """Show a reproduction's figure in a notebook (nothing when none of its panels has results, or for None: no
    panel of the figure is selected) and return ``panels``, for :func:`not_run_yet` in a later cell."""
    if panels is not None and panels.figure is not None:
        plt.show()
    return panels


def not_run_yet(figures: dict[str, Panels | None]) -> str:
    """Markdown naming, per figure, the panels left out because they have no results yet ("" when there are none).
    Show it in a cell of its own: the book puts whatever a captioned figure's cell shows inside that figure.

    >>> print(not_run_yet({"Fig. 5": Panels(None, ["MNIST/CNN", "SVHN/ResNet18"]), "Fig. 6": None}))
    **Not run yet**, so not drawn above:
    <BLANKLINE>
    - Fig. 5: MNIST/CNN, SVHN/ResNet18
    """
    lines = [f"- {what}: {', '.join(p.missing)}" for what, p in figures.items() if p is not None and p.missing]
    return "**Not run yet**, so not drawn above:\n\n" + "\n".join(lines) if lines else ""


#: Widest figure (inches, at matplotlib's 100 dpi) that the book's text column shows at 70 % or more of its size.
PAGE_WIDTH = 11.0


def panel_grid(n: int, *, height: float = 4.4, columns: int = 2):
    """A figure of ``n`` panels, ``columns`` per row, at most :data:`PAGE_WIDTH` wide (constrained layout), and the
    list of its ``n`` axes: panels are stacked in rows rather than squeezed into one.

    >>> fig, axs = panel_grid(3)
    >>> len(axs), fig.get_size_inches().tolist()
    (3, [11.0, 8.8])
    >>> plt.close("all")
    """
    rows, cols = -(-n // columns), min(n, columns)
    width = PAGE_WIDTH if cols > 1 else 6.5
    fig, axs = plt.subplots(rows, cols, figsize=(width, height * rows), squeeze=False, layout="constrained")
    for ax in axs.flat[n:]:
        ax.remove()
    return fig, list(axs.flat[:n])


def shade_styles(method: str, values: Sequence[float], points: int) -> dict[float, dict]:
    """One line style per value of a method's parameter (DP-PSASC's :math:`s<1`, say), the same in every figure: the
    method's colour, darker from the first value to the last, each value with its own dashes and markers, the markers
    staggered along a curve of ``points`` points so that close curves stay apart.

    >>> styles = shade_styles("psasc", [0.9, 0.45], points=100)
    >>> styles[0.9]["color"] == method_colour("psasc"), styles[0.45]["ls"], styles[0.45]["markevery"]
    (True, '-.', (3, 14))
    """
    base = to_rgb(method_colour(method))
    every = max(1, points // 7)
    styles = {}
    for j, value in enumerate(values):
        dark = 0.55 * j / max(1, len(values) - 1)
        styles[value] = dict(color=to_hex([c * (1 - dark) for c in base]),
                             ls=["--", "-.", ":", (0, (5, 1.5, 1, 1.5, 1, 1.5))][j % 4], lw=1.4,
                             marker="osD^v<>"[j % 7], ms=4.5, mfc="white",
                             markevery=(every * (j % 4) // 4, every), zorder=3)
    return styles


def legend_below(fig, axs, *, ncols: int = 3, **legend_kwargs):
    """One legend for all the panels ``axs``, below them and outside the data (labels repeated across panels appear
    once). Needs a figure with constrained layout (:func:`panel_grid`, or ``plt.subplots(..., layout="constrained")``).

    >>> fig, axs = panel_grid(2)
    >>> for ax in axs:
    ...     _ = ax.plot([0, 1], [0, 1], label="dpsgd")
    >>> [t.get_text() for t in legend_below(fig, axs).get_texts()]
    ['dpsgd']
    >>> plt.close("all")
    """
    labelled = {}
    for ax in axs:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            labelled.setdefault(text, handle)
    if not labelled:
        return None
    return fig.legend(list(labelled.values()), list(labelled), loc="outside lower center", ncols=ncols,
                      **legend_kwargs)


#: The PNG text chunk in which a notebook's figures record :func:`smallest_text_px` (see :func:`book_figures`).
SMALLEST_TEXT_KEY = "dpbook smallest text (px)"


def smallest_text_px(fig: Figure) -> float | None:
    """The height (pixels of the figure's own PNG, at ``fig.dpi``) of the smallest visible text in ``fig``: tick
    labels, legend, annotations; None for a figure without text. Shown at a scale ``k`` (the page's width of the
    image over its pixel width), it reads as ``k`` times that: the book's browser check wants 9 px or more.

    >>> fig, ax = plt.subplots(dpi=100)
    >>> _ = ax.set_xticks([0, 1], ["a", "b"], fontsize=7.2)
    >>> smallest_text_px(fig)  # 7.2 pt at 100 dpi
    10.0
    >>> plt.close("all")
    """
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes) * fig.dpi / 72 if sizes else None


def _png(fig: Figure) -> str:
    from IPython.core.pylabtools import print_figure

    px = smallest_text_px(fig)
    return print_figure(fig, "png", base64=True,
                        metadata={SMALLEST_TEXT_KEY: "none" if px is None else f"{px:.2f}"})


def book_figures() -> bool:
    """In a notebook, make every figure it shows record in its PNG the height of its smallest text
    (:data:`SMALLEST_TEXT_KEY`), so that the rendered book can be checked for text too small to read; every
    notebook's set-up cell calls it. False outside IPython (nothing to do).

    >>> book_figures()  # a doctest runs outside IPython
    False
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    # the inline backend registers its PNG formatter when pyplot first loads it (at the first figure, in newer
    # matplotlib): load it now (closing no figure yet drawn), so that this formatter replaces it, not the reverse
    plt.switch_backend(plt.get_backend())
    shell.display_formatter.formatters["image/png"].for_type(Figure, _png)
    return True
