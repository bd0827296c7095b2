"""dpbook.repro: the book's reproduction layer, built on the library and never imported by it.

- ``experiment``: one training run as a record (dataset, model, method, budget, protocol), trained and stored;
- ``reproduce``: the papers' grids, searches and re-runs as runs and cells; ``benchmark``, ``benchmark_report``,
  ``digits_benchmark``, ``mnist5k_benchmark``: the two CPU benchmarks and their reports;
- ``sweep`` and ``dispatch``: the command line that trains what is missing, on a process pool, in this process or
  on SLURM (submitit);
- ``results``: one JSON file per run, written atomically, read back with checks; ``bench``: the private step's
  timing benchmark;
- ``params``, ``colab``, ``plotting``: the notebooks' parameters, Colab set-up and figure conventions.

The core (``dpbook.methods``, ``dpbook.optim``, ``dpbook.accounting``, ``dpbook.train``, the theory modules and
``dpbook.audit``) imports nothing from here; ``tests/test_architecture.py`` checks it.
"""

__all__ = []
