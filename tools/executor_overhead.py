"""Per-job overhead of the sweep executors, measured side by side in one process on this machine:
``python tools/executor_overhead.py`` (``N=16`` for more runs; the result files go to a temporary folder).

The same N tiny runs (digits MLP, one epoch) go through: a loop calling ``sweep.run_one`` in this process (the
baseline), ``run_all`` with ``executor="local"`` (jobs 1 and 2), ``"debug"``, and ``"slurm"`` against the stand-in
cluster of the tests (``tests/fake_slurm.py``: submitit's real SLURM code, jobs run here; ``runs_per_job`` 1 and 4,
``array_parallelism`` 2). Overhead per job = (wall - baseline wall) / jobs. A real cluster adds its queue wait.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
N = int(os.environ.get("N", 8))
DIGITS = dict(dataset="digits", model="digits_mlp", method="dpsgd", hyperparameters={"C": 1.0}, epsilon=4.0,
              delta=1e-5, epochs=1, batch_size=128, lr=0.01)


def main() -> None:
    sys.path.insert(0, str(REPO))  # tests/fake_slurm.py
    import submitit

    from dpbook.repro import dispatch, sweep
    from dpbook.repro.experiment import Experiment
    from tests import fake_slurm

    root = Path(tempfile.mkdtemp(prefix="executor_overhead_"))
    os.environ["PATH"] = f"{fake_slurm.install(root / 'bin')}:{os.environ['PATH']}"
    os.environ["FAKE_SLURM_DIR"] = str(root / "slurm")
    fake_slurm.STATE, fake_slurm.JOBS = root / "slurm", root / "slurm" / "jobs"
    submitit.SlurmJob.watcher = submitit.slurm.slurm.SlurmInfoWatcher(delay_s=1)
    run_kwargs = {"results_dir": str(root / "results"), "device": "cpu"}

    def grid(tag: str) -> list:
        return [Experiment(study=f"overhead-{tag}", seed=s, **DIGITS) for s in range(N)]

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    sweep.run_one(grid("warm")[0], run_kwargs)  # imports and the data in memory, as in a long sweep
    base = timed(lambda: [sweep.run_one(exp, run_kwargs) for exp in grid("baseline")])
    slurm = dict(partition="stand-in", array_parallelism=2)
    cases = [("local, jobs 1", N, dict(executor="local", jobs=1)),
             ("local, jobs 2", N, dict(executor="local", jobs=2)),
             ("debug", N, dict(executor="debug")),
             ("slurm (stand-in), 1 run per task", N, dict(executor="slurm", slurm=dispatch.SlurmOptions(**slurm))),
             ("slurm (stand-in), 4 runs per task", -(-N // 4),
              dict(executor="slurm", slurm=dispatch.SlurmOptions(**slurm, runs_per_job=4)))]
    print(f"{N} runs of the digits MLP (one epoch) each; {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'executor':36s} {'jobs':>5s} {'wall s':>8s} {'s per run':>10s} {'overhead s per job':>19s}")
    print(f"{'in-process loop (baseline)':36s} {N:5d} {base:8.2f} {base / N:10.2f}")
    for i, (name, jobs, kwargs) in enumerate(cases):
        wall = timed(lambda: sweep.run_all(grid(str(i)), progress=False, **run_kwargs, **kwargs))
        print(f"{name:36s} {jobs:5d} {wall:8.2f} {wall / N:10.2f} {(wall - base) / jobs:19.2f}")


if __name__ == "__main__":
    main()
