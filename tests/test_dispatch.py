"""The sweep's executors: local and debug in this process's machine; SLURM end to end through submitit's real SLURM
code path, against stand-in sbatch / sacct / scancel / scontrol / srun scripts (tests/fake_slurm.py) that run the
jobs here; a preemption by a real signal, a requeue, and a resume from the run's checkpoint."""

from __future__ import annotations

import concurrent.futures
import json
import os
import time
from pathlib import Path

import pytest
import submitit

from dpbook.repro import dispatch, results, sweep
from dpbook.repro.experiment import Experiment
from dpbook.repro.sweep import __main__ as sweep_cli

DIGITS = dict(study="dispatch", dataset="digits", model="digits_mlp", epsilon=4.0, delta=1e-5, epochs=1,
              batch_size=128, lr=0.01)
GRID = [Experiment(method=m, hyperparameters=h, seed=s, **DIGITS)
        for m, h in (("dpsgd", {"C": 1.0}), ("autos", {})) for s in (0, 1)]  # two methods x two seeds


def test_debug_executor_runs_in_this_process_and_writes_a_manifest(tmp_path):
    bad = Experiment(method="dpsgd", hyperparameters={"C": -1.0}, **DIGITS)
    summary = sweep.run_all(GRID[:2] + [bad], results_dir=tmp_path, executor="debug", progress=False)
    assert summary["done"] == 2 and len(summary["failed"]) == 1 and "C (clipping threshold)" in summary["failed"][0][1]
    manifest = dispatch.Manifest.read(summary["manifest"])
    assert manifest.executor == "debug" and len(manifest.entries) == 3
    assert [row["state"] for row in manifest.states()] == ["done", "done", "not done"]
    assert all(entry["job"] for entry in manifest.entries)  # the debug jobs' ids and logs are recorded


@pytest.mark.slow
def test_local_manifest_resume_trains_only_what_is_missing(tmp_path, capsys):
    summary = sweep.run_all(GRID[:2], results_dir=tmp_path, progress=False)
    assert summary["done"] == 2 and Path(summary["manifest"]).is_file()
    results.read_result(GRID[1].path(tmp_path))
    GRID[1].path(tmp_path).unlink()  # as if that run had never finished
    assert sweep_cli.main(["status", summary["manifest"]]) == 1  # not everything is done
    assert "not done" in capsys.readouterr().out
    assert sweep_cli.main(["resume", summary["manifest"]]) == 0
    assert "planned 2: done 1, skipped 1" in capsys.readouterr().out
    assert sweep_cli.main(["status", summary["manifest"]]) == 0


def test_slurm_options_from_a_file_and_flags(tmp_path):
    config = tmp_path / "cluster.toml"
    config.write_text('[slurm]\npartition = "gpu"\ngpus = 1\ntime_min = 600\nextra = {constraint = "a100"}\n')
    options = dispatch.SlurmOptions.from_file(config, time_min=120, account=None)
    assert (options.partition, options.gpus, options.time_min, options.account) == ("gpu", 1, 120, None)
    assert options.parameters()["slurm_additional_parameters"] == {"constraint": "a100"}
    config.write_text('partiton = "gpu"\n')
    with pytest.raises(ValueError, match=r"unknown SLURM option\(s\) \['partiton'\] \(did you mean 'partition'\?\)"):
        dispatch.SlurmOptions.from_file(config)
    with pytest.raises(ValueError, match="runs_per_job"):
        dispatch.SlurmOptions(runs_per_job=0)


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A stand-in SLURM on PATH; every job it started is cancelled at the end."""
    from . import fake_slurm

    monkeypatch.setenv("PATH", f"{fake_slurm.install(tmp_path / 'bin')}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(tmp_path / "slurm"))
    monkeypatch.setattr(fake_slurm, "STATE", tmp_path / "slurm")
    monkeypatch.setattr(fake_slurm, "JOBS", tmp_path / "slurm" / "jobs")
    monkeypatch.setattr(submitit.SlurmJob, "watcher", submitit.slurm.slurm.SlurmInfoWatcher(delay_s=1))
    yield fake_slurm
    for job in fake_slurm.all_jobs():
        if job["state"] in fake_slurm.ACTIVE:
            fake_slurm.scancel([job["key"]])


@pytest.mark.slow
def test_slurm_grid_with_a_preempted_job_resumes_from_its_checkpoint(tmp_path, cluster, capsys):
    """A 2 x 2 grid goes out through the sweep's SLURM executor as one job array; one task is preempted
    mid-training (the signal submitit asks SLURM for), saves its checkpoint after the current step, is requeued
    (``status`` shows it), resumes there, and every result file lands."""
    # the third run is long enough to be caught while it trains
    long = [exp.replace(epochs=15, batch_size=32) if i == 2 else exp for i, exp in enumerate(GRID)]
    options = dispatch.SlurmOptions(partition="fake", time_min=60, array_parallelism=4)
    folder, results_dir = tmp_path / "sweep", tmp_path / "results"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # the sweep follows its jobs; this test preempts one
        sweep_done = pool.submit(sweep.run_all, long, executor="slurm", slurm=options, sweep_dir=folder,
                                 results_dir=str(results_dir), device="cpu", checkpoint_every=20, progress=False)
        manifest = folder / "manifest.json"
        checkpoint = results_dir / ".checkpoints" / "dispatch" / f"{long[2].path().stem}.pt"
        deadline = time.time() + 600  # a bound on the waits below, for a machine loaded several times over
        while time.time() < deadline and not (checkpoint.exists() and manifest.exists()
                                              and dispatch.Manifest.read(manifest).entries[2]["job"]):
            time.sleep(0.1)  # the third task has saved its first checkpoint (step 20): it is training
        victim = submitit.SlurmJob(folder=folder, job_id=dispatch.Manifest.read(manifest).entries[2]["job"])
        victim._interrupt(timeout=False)  # scancel --signal SIGTERM, then USR2: what SLURM does before a preemption
        while time.time() < deadline and cluster.resolve(victim.job_id)[0]["restarts"] == 0:
            time.sleep(0.05)
        assert sweep_cli.main(["status", str(manifest)]) == 1  # requeued, not done yet: status shows it
        row = next(line for line in capsys.readouterr().out.splitlines() if victim.job_id in line)
        assert long[2].path().name in row and " failed " not in row  # not done, whatever its momentary state
        summary = sweep_done.result(timeout=900)

    assert (summary["done"], summary["failed"]) == (4, []), summary
    script = next(folder.glob("*_submission.sh")).read_text()
    assert "#SBATCH --array=0-3%4" in script and "#SBATCH --partition=fake" in script  # one array
    records = [results.read_result(exp.path(results_dir)) for exp in long]
    assert [r["resumed"] for r in records] == [False, False, True, False]
    assert cluster.resolve(victim.job_id)[0]["restarts"] == 1
    assert sweep_cli.main(["status", str(manifest)]) == 0 and "4 run(s), done 4" in capsys.readouterr().out
    assert not checkpoint.exists()  # deleted once the result was written
    assert "stopped at step" in victim.stderr()  # saved after its current step, not at an epoch's end


@pytest.mark.slow
def test_slurm_from_the_command_line_and_status(tmp_path, cluster, capsys):
    config = tmp_path / "cluster.toml"
    config.write_text('partition = "fake"\narray_parallelism = 2\nruns_per_job = 2\n')
    code = sweep_cli.main(["digits", "--executor", "slurm", "--slurm-config", str(config), "--time-min", "30",
                       "--results-dir", str(tmp_path / "r"), "--methods", "dcsgd-e", "--epsilons", "8",
                       "--seeds", "2", "--epochs", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    manifest = next((tmp_path / "r" / ".sweeps").glob("*/manifest.json"))
    data = json.loads(manifest.read_text())
    assert data["executor"] == "slurm" and data["slurm"]["time_min"] == 30 and data["slurm"]["runs_per_job"] == 2
    assert sweep_cli.main(["status", str(manifest)]) == 0
    assert "done" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["debug", "slurm"])
def test_a_notebook_grid_through_submitit(tmp_path, cluster, capsys, executor):
    """The other kind of sweep: one papermill execution per job (SLURM: one array), a failing point named."""
    from .test_experiment import tiny_notebook

    path = tiny_notebook(tmp_path / "tiny.ipynb", "if x == 2:\n    raise ValueError('x must not be two')")
    code = sweep_cli.main(["notebook", str(path), "--grid", "x=1,2", "--output-dir", str(tmp_path / "executed"),
                       "--executor", executor])
    out = capsys.readouterr().out.splitlines()
    failed = tmp_path / "executed" / sweep.executed_name(path, {"x": 2}, {"x": 2})
    assert code == 1 and out[-2:] == [
        "planned 2: done 1, failed 1",
        f"  FAILED {failed}: the cell 'if x == 2:' raised ValueError: x must not be two"]
    manifest = next((tmp_path / "executed" / ".sweeps").glob("*/manifest.json"))
    assert sweep_cli.main(["status", str(manifest)]) == 1
    status = capsys.readouterr().out
    assert "2 notebook(s), done 1, " in status and "tiny_x=2_" in status and "tiny_x=1_" not in status
    tiny_notebook(path, "assert x in (1, 2)")  # the notebook fixed: resume executes only what failed
    assert sweep_cli.main(["resume", str(manifest)]) == 0
    assert "planned 2: done 1, skipped 1 (already recorded), failed 0" in capsys.readouterr().out
    assert sweep_cli.main(["status", str(manifest)]) == 0


def test_a_manifest_holds_paths_and_devices_as_text(tmp_path):
    import torch

    summary = sweep.run_all(GRID[:1], results_dir=tmp_path, progress=False, data_root=tmp_path / "data",
                            device=torch.device("cpu"))
    manifest = dispatch.Manifest.read(summary["manifest"])
    assert manifest.run_kwargs == {"data_root": str(tmp_path / "data"), "device": "cpu"}
