"""The reproduction chapters' harness, one module per paper: its table's cells as runs, what run mode trains, and
the tables and figures the chapter shows.

Each module has a ``Reproduction`` whose fields are the chapter's notebook parameters (same names, same defaults:
``tests/test_papers.py`` checks it; the ones every chapter has are :class:`.chapter.Chapter`'s), so that a chapter
reads as its parameters, one call per table or figure, and prose: ``notebooks/reproduce_dcsgd.ipynb``
(:mod:`.dcsgd`, :mod:`.dcsgd_figures`), ``reproduce_dpdr`` (:mod:`.dpdr`), ``reproduce_psasc`` (:mod:`.psasc`).
"""

__all__ = ["chapters"]

import functools
import importlib
import pkgutil


@functools.cache
def chapters() -> dict:
    """Every reproduction chapter's ``Reproduction`` class, by study: the modules of this package that have one
    (a new paper's module is found without being listed anywhere).

    >>> list(chapters())
    ['dcsgd', 'dpdr', 'psasc']
    """
    from dpbook.repro.papers.chapter import Chapter

    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if isinstance(getattr(module, "Reproduction", None), type) and issubclass(module.Reproduction, Chapter):
            found[module.STUDY] = module.Reproduction
    return found
