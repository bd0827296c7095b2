"""dpbook.repro: the book's reproduction layer, built on the library and never imported by it.

- ``experiment``: one training run as a record (dataset, model, method, budget, protocol), trained and stored;
- ``reproduce``: the papers' grids, searches and re-runs as runs and cells; ``benchmark``, ``benchmark_report``,
  ``digits_benchmark``, ``mnist5k_benchmark``: the two CPU benchmarks and their reports;
- ``sweep`` and ``dispatch``: the command line that trains what is missing, on a process pool, in this process or
  on SLURM (submitit);
- ``results``: one JSON file per run, written atomically, read back with checks; ``contributed``: the checks of a
  result file that comes back from a reader's run; ``bench``: the private step's timing benchmark;
- ``papers``: one module per paper on one reproduction protocol (``papers.chapter.Chapter``);
- ``in_training``: the setting of each chapter that trains the methods on the digits, shared by its pages;
- ``psasc_in_training``: the tasks, methods and training loop of "DP-PSASC in training", shared by its pages;
- ``params``, ``colab``, ``plotting``: the notebooks' parameters, Colab set-up and figure conventions.

The private-step core and the zoo (data, models, tasks, audits) import nothing from here: it is the top of the three
layers that ``tests/test_architecture.py`` declares and checks.
"""

__all__ = []
