"""Two processes never make the same file at once (:func:`dpbook.io.claim`), and two sweeps over one results folder
train each run once: the claim of a run is held while it trains, taken over when its holder is gone, and waited
for by a second sweep, which then finds the run recorded."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpbook import io

ROOT = Path(__file__).resolve().parents[1]

HOLD = """
import sys, time
from pathlib import Path
from dpbook import io
with io.claim(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    Path(sys.argv[1] + ".made").touch()  # its work, done while it holds the claim
"""


def holder(target: Path, seconds: float) -> subprocess.Popen:
    """A process that holds the claim on ``target`` for ``seconds``, then leaves ``<target>.made`` before it lets
    go (it says "held" once it holds the claim)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(target), str(seconds)], stdout=subprocess.PIPE,
                            text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_claim_names_its_holder(tmp_path):
    target = tmp_path / "run.json"
    proc = holder(target, 30)
    try:
        with pytest.raises(io.Held, match=rf"{target} is being made by process {proc.pid} on {io.HOST}"):
            with io.claim(target, wait=False):
                pass
    finally:
        proc.kill()
        proc.wait()


def test_the_claim_of_a_killed_holder_is_taken_over_at_once(tmp_path):
    target = tmp_path / "run.json"
    proc = holder(target, 30)
    os.kill(proc.pid, signal.SIGKILL)  # kill -9: no cleanup ran; the claim file stays behind
    proc.wait()
    assert (tmp_path / ".run.json.claim").exists()
    with io.claim(target, wait=False):
        assert f"process {os.getpid()}" in (tmp_path / ".run.json.claim").read_text()
    assert not (tmp_path / ".run.json.claim").exists()  # removed by its holder when done


def test_a_waiting_claim_gets_it_when_the_holder_ends(tmp_path, capfd):
    target = tmp_path / "run.json"
    proc = holder(target, 0.5)
    with io.claim(target, wait=True):
        assert (tmp_path / "run.json.made").exists(), "the claim was given while its holder was still at work"
    proc.wait()
    assert f"waiting for process {proc.pid} on {io.HOST}" in capfd.readouterr().err


def test_temporaries_of_another_machine_are_left_alone(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = dead.stdout.strip()
    ours = tmp_path / f".x.json.pid{pid}@{io.HOST}.abc.tmp"
    theirs = tmp_path / f".y.json.pid{pid}@another-{io.HOST}.abc.tmp"  # a writer on another node of a cluster
    for path in (ours, theirs):
        path.write_text("{")
    assert io.remove_stale_temporaries(tmp_path) == [ours]
    assert theirs.exists()


SWEEP = """
import json, sys, time
from pathlib import Path
from dpbook.repro import sweep
from dpbook.repro.experiment import Experiment

results_dir, me = Path(sys.argv[1]), sys.argv[2]
runs = [Experiment(study="race", dataset="digits", model="digits_mlp", method="dpsgd", hyperparameters={"C": 1.0},
                   epsilon=4.0, delta=1e-5, epochs=1, batch_size=256, lr=0.05, seed=seed) for seed in range(4)]
(results_dir.parent / f"ready-{me}").touch()
while not (results_dir.parent / "go").exists():  # both sweeps start together, past their imports
    time.sleep(0.01)
summary = sweep.run_all(runs, results_dir=results_dir, progress=False)
print(json.dumps({k: summary.get(k) for k in ("planned", "done", "skipped", "failed", "elsewhere")}))
"""


def test_two_concurrent_sweeps_over_one_results_folder_train_each_run_once(tmp_path):
    results_dir = tmp_path / "results"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sweeps = [subprocess.Popen([sys.executable, "-c", SWEEP, str(results_dir), me], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env) for me in "ab"]
    while not all((tmp_path / f"ready-{me}").exists() for me in "ab"):
        assert all(s.poll() is None for s in sweeps), [s.communicate() for s in sweeps]  # one ended before the start
        time.sleep(0.05)
    (tmp_path / "go").touch()
    summaries = []
    for s in sweeps:
        out, err = s.communicate(timeout=300)
        assert s.returncode == 0, err
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    assert all(s["planned"] == 4 and s["failed"] == [] for s in summaries), summaries
    # every run trained by exactly one of the two sweeps, and found (or waited for) by the other
    assert sum(s["done"] for s in summaries) == 4, summaries
    assert sum(s["skipped"] for s in summaries) == 4, summaries
    written = sorted(results_dir.rglob("*.json"))
    assert len([p for p in written if ".sweeps" not in p.parts]) == 4
    assert not list(results_dir.rglob(".*.claim")), "a claim was left behind"
