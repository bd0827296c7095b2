"""dpbook: differentially private deep learning with adaptive clipping, as a readable reference library.

Every algorithm of the book lives here; the notebooks import it and explain it.
See ``dpbook.methods`` for the registry of private-step methods.
"""

__all__ = ["__version__"]


__version__ = "0.1.0"
