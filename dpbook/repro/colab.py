"""Running the book's notebooks on Colab: the first cell of every notebook, and what the runtime offers.

Every notebook starts with :data:`SETUP_CELL` (``tools/stamp_cells.py`` writes it, a test checks it). On
Colab it clones the book's repository into ``/content/dpbook`` (the recorded results and the papers' tables come
with it), installs it in editable mode with the ``text`` extra unless dpbook is installed already (a rerun), and
works from there. The install keeps Colab's own torch: dpbook's requirements are lower bounds (``pyproject.toml``;
the oldest versions are tested, ``constraints-oldest.txt``), which Colab's torch already meets. Two environment
variables are the cell's settings: ``DPBOOK_REPOSITORY`` (the address to clone, for a fork of the book; default
:data:`REPOSITORY`) and ``DPBOOK_ROOT`` (where the clone goes; default ``/content/dpbook``).
``tests/test_colab.py`` runs the cell on a stand-in for Colab: a fresh Python, a ``google.colab`` module, a bare
clone of this repository served from a ``file://`` address, then the rest of a notebook.
Elsewhere (a local clone, the test suite, the book build) the cell changes nothing. It ends by printing
:func:`runtime_summary`, which says whether a GPU is there and, if not, how to get one, and by recording the cells
the notebook runs (:func:`dpbook.repro.params.record_cells`) for the parameter check that follows the parameters cell.

To open a notebook on Colab: the rocket icon of a book page ("Colab"), or
``https://colab.research.google.com/github/<owner>/<repo>/blob/main/notebooks/<name>.ipynb``.

>>> "git" in SETUP_CELL and REPOSITORY in SETUP_CELL
True
"""

from __future__ import annotations

__all__ = ["REPOSITORY", "SETUP_CELL", "runtime_summary"]

import torch

#: The book's repository (also ``repository.url`` in ``_config.yml``; a test keeps the two equal).
REPOSITORY = "https://github.com/dpbook/dpbook"

#: The first code cell of every notebook (tag ``remove-cell``: it matters on Colab and under papermill, not in the
#: rendered book): on Colab it clones the repository and installs dpbook, everywhere it prints
#: :func:`runtime_summary` and calls :func:`dpbook.repro.plotting.book_figures` and
#: :func:`dpbook.repro.params.record_cells`. ``tools/stamp_cells.py`` writes it into every notebook.
#:
#: :meta hide-value:
SETUP_CELL = f"""\
# Setup. On Colab: clone the book's repository and install dpbook (Colab's torch is kept). Elsewhere: nothing.
# A fork: set DPBOOK_REPOSITORY to its address (%env DPBOOK_REPOSITORY=...); DPBOOK_ROOT moves the clone.
import os
import subprocess
import sys
from importlib import metadata

if "google.colab" in sys.modules:
    root = os.path.abspath(os.path.expanduser(os.environ.get("DPBOOK_ROOT", "/content/dpbook")))
    if not os.path.isdir(root):
        repository = os.environ.get("DPBOOK_REPOSITORY", "{REPOSITORY}")
        subprocess.run(["git", "clone", "--depth", "1", repository, root], check=True)
    try:
        metadata.version("dpbook")
    except metadata.PackageNotFoundError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", f"{{root}}[text]"], check=True)
    os.chdir(os.path.join(root, "notebooks"))
    sys.path.insert(0, root)
from dpbook.repro.colab import runtime_summary
from dpbook.repro.params import record_cells
from dpbook.repro.plotting import book_figures

print(runtime_summary())
book_figures()  # each figure's PNG records its smallest text, which the book's browser check reads
record_cells()  # what the parameter check, right after the parameters cell, reads the parameters from"""


def runtime_summary() -> str:
    """One line: the GPU found (name, memory), or that there is none and how to get one on Colab.

    >>> runtime_summary().startswith(("GPU:", "no GPU"))
    True
    """
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return f"GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB (torch {torch.__version__})"
    return (f"no GPU (torch {torch.__version__}, CPU only): the notebooks' defaults and smoke runs work on a CPU; "
            "for full reproductions on Colab choose Runtime > Change runtime type > GPU")
