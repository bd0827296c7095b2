"""Several white-box audits at once, one process each: the command line's ``--jobs``.

Every audit draws its noise from its own seed, so its record does not depend on how many run at once, nor in which
process.

    >>> jobs = [("dpsgd", None, 1.0, 1), ("dpsgd", "half-noise", 1.0, 1)]
    >>> [r["flagged"] for r in records(jobs, dict(trials=400), processes=1)]
    [False, True]
"""

from __future__ import annotations

__all__ = ["record", "records"]

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Iterator

from dpbook.audit.broken import audit_broken
from dpbook.audit.white_box import audit


def record(job: tuple, options: dict) -> dict:
    """The result record of one audit ``(method, broken control or None, sample rate, steps)``; ``options`` are
    :func:`~dpbook.audit.white_box.run`'s others (trials, delta, accountant, seed, confidence)."""
    method, broken, q, T = job
    options = {**options, "sample_rate": q, "steps": T}
    return (audit_broken(broken, **options) if broken else audit(method, **options)).to_dict()


def _one_thread() -> None:
    import torch  # noqa: PLC0415 (in the worker process only)
    torch.set_num_threads(1)  # one process per core, not each process using them all


def records(jobs: list[tuple], options: dict, processes: int = 1) -> Iterator[dict]:
    """The records of ``jobs``, in order, each as soon as it and those before it are done; with ``processes`` > 1
    they run in that many processes."""
    if processes == 1 or len(jobs) < 2:
        yield from (record(job, options) for job in jobs)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(processes, len(jobs)), mp_context=context, initializer=_one_thread) as pool:
        yield from pool.map(record, jobs, [options] * len(jobs))
