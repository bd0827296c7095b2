"""Result files and checkpoints that cannot mislead: a damaged file is named and re-run (never counted, never
deleted), a checkpoint resumes only its own run on any device, interrupted writes leave nothing behind, and killing a
sweep leaves no worker running."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

from dpbook.data import load_digits
from dpbook.io import atomic_write_json, remove_stale_temporaries
from dpbook.methods import DPSGD
from dpbook.models import digits_cnn
from dpbook.repro import results, sweep
from dpbook.repro.experiment import Experiment, run_experiment
from dpbook.train import StaleCheckpointError, Trainer

DIGITS = dict(study="files", dataset="digits", model="digits_cnn", epsilon=4.0, epochs=1, batch_size=128,
              optimizer="sgd", lr=0.5)
RUN = Experiment(method="dpsgd", hyperparameters={"C": 1.0}, **DIGITS)


@pytest.fixture
def recorded_run(tmp_path):
    run_experiment(RUN, results_dir=tmp_path, progress=False)
    return RUN.path(tmp_path)


@pytest.mark.parametrize("damage, reason", [
    (lambda text: text[: len(text) // 2], "not valid JSON"),
    (lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "final"}), "no final"),
    (lambda text: "", "not valid JSON"),
])
def test_a_damaged_result_file_is_named_moved_aside_and_run_again(recorded_run, tmp_path, damage, reason, capsys):
    recorded_run.write_text(damage(recorded_run.read_text()))
    with pytest.raises(results.CorruptResultError, match=rf"{recorded_run}: corrupted result file \({reason}"):
        results.read_result(recorded_run)
    with pytest.raises(results.CorruptResultError, match=str(recorded_run)):  # rendering names the file too
        results.load_results("files", root=tmp_path)
    summary = sweep.run_all([RUN], results_dir=tmp_path, progress=False)
    assert summary["done"] == 1 and summary["skipped"] == 0  # not counted as done: trained again
    aside = recorded_run.with_name(recorded_run.name + ".corrupt")
    assert aside.exists() and results.read_result(recorded_run)["key"] == RUN.key()  # moved aside, not deleted
    assert f"moved aside to {aside}" in capsys.readouterr().err


def test_result_files_are_world_readable(recorded_run):
    assert recorded_run.stat().st_mode & 0o777 == 0o644


def test_interrupted_writes_leave_nothing_after_the_next_start(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / "files" / f".x.json.pid{dead.stdout.strip()}.abc.tmp"   # a writer killed before its rename
    live = tmp_path / "files" / f".y.json.pid{os.getpid()}.abc.tmp"            # a writer still at work
    stale.parent.mkdir(parents=True)
    stale.write_text("{")
    live.write_text("{")
    sweep.run_all([], results_dir=tmp_path, progress=False)
    assert not stale.exists() and live.exists()
    assert remove_stale_temporaries(tmp_path) == []


def test_a_completed_write_leaves_only_its_file(tmp_path):
    atomic_write_json({"a": 1}, tmp_path / "ok.json")
    assert [p.name for p in tmp_path.iterdir()] == ["ok.json"]


# --- checkpoints ---------------------------------------------------------------------------------------------

def trainer(checkpoint, C=1.0, epochs=2):
    torch.manual_seed(0)
    model = digits_cnn()
    return Trainer(model, DPSGD(C=C, sigma=1.0), torch.optim.SGD(model.parameters(), lr=0.5), load_digits(),
                   expected_batch_size=128, epochs=epochs, delta=1e-5, checkpoint=checkpoint, progress=False)


def test_a_checkpoint_of_another_configuration_is_refused_naming_the_file_and_fields(tmp_path):
    checkpoint = tmp_path / "run.pt"
    trainer(checkpoint).run(max_steps=12)  # one epoch: the checkpoint is written
    assert checkpoint.exists()
    with pytest.raises(StaleCheckpointError, match=rf"{checkpoint}: the checkpoint belongs to a run with another "
                                                    r"configuration \(T: checkpoint 22, this run 33; epochs: "
                                                    r"checkpoint 2, this run 3; hyperparameter C: checkpoint "
                                                    r"'1.0', this run '2.0'; releases: checkpoint \['gradient: "
                                                    r"sensitivity 1.0, noise multiplier 1.0'\], this run"):
        trainer(checkpoint, C=2.0, epochs=3).run()
    assert trainer(checkpoint).run().epochs[-1]["epoch"] == 2  # its own run resumes


def test_a_damaged_checkpoint_names_the_file(tmp_path):
    checkpoint = tmp_path / "run.pt"
    checkpoint.write_bytes(b"PK\x03\x04 not a checkpoint")
    with pytest.raises(StaleCheckpointError, match=rf"{checkpoint}: cannot read the checkpoint .* move it away"):
        trainer(checkpoint).run()


def _mlp(activation: type[torch.nn.Module]) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), activation(), torch.nn.Linear(32, 10))


def _digits_run(checkpoint: Path, model: torch.nn.Module, data) -> Trainer:
    return Trainer(model, DPSGD(C=1.0, sigma=1.0), torch.optim.SGD(model.parameters(), lr=0.5), data,
                   expected_batch_size=128, epochs=1, delta=1e-5, checkpoint=checkpoint, progress=False)


DIGITS = load_digits()
PERMUTED = torch.randperm(len(DIGITS.y_train), generator=torch.Generator().manual_seed(0))
SAME_SHAPES = {  # each keeps every shape and size of the run; only the model or the data's values differ
    "the activation changed": (torch.nn.ReLU, DIGITS, r"architecture: checkpoint '\.\.\..*Tanh\(\)"),
    "the labels permuted": (torch.nn.Tanh, DIGITS._replace(y_train=DIGITS.y_train[PERMUTED]),
                            r"data digest: checkpoint '\w{16}', this run '\w{16}'"),
    "the features negated": (torch.nn.Tanh, DIGITS._replace(x_train=-DIGITS.x_train), r"data digest: checkpoint"),
}


@pytest.mark.parametrize("case", list(SAME_SHAPES))
def test_a_checkpoint_refuses_another_model_or_other_data_of_the_same_shapes(case, tmp_path):
    checkpoint = tmp_path / "run.pt"
    _digits_run(checkpoint, _mlp(torch.nn.Tanh), DIGITS).run(max_steps=3)
    activation, data, message = SAME_SHAPES[case]
    with pytest.raises(StaleCheckpointError, match=message):
        _digits_run(checkpoint, _mlp(activation), data).run()
    assert _digits_run(checkpoint, _mlp(torch.nn.Tanh), DIGITS).run().epochs  # its own run resumes


def test_run_experiment_names_the_checkpoint_and_the_result_file(tmp_path):
    stale = RUN.replace(epochs=2)
    checkpoint = tmp_path / ".checkpoints" / "files" / f"{stale.path(tmp_path).stem}.pt"
    trainer(checkpoint, C=3.0).run(max_steps=12)
    with pytest.raises(StaleCheckpointError, match=rf"{checkpoint}: .* \(the run's result file: "
                                                    rf"{stale.path(tmp_path)}\)"):
        run_experiment(stale, results_dir=tmp_path, progress=False)


def claim_cuda(checkpoint: Path) -> None:
    """Rewrite a CPU checkpoint so that its tensors say they were saved on 'cuda:0' (what a GPU run leaves)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(checkpoint) as source, zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename.endswith("data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            target.writestr(item, data)
    checkpoint.write_bytes(buffer.getvalue())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the point is a machine without the checkpoint's GPU")
def test_a_checkpoint_written_on_a_gpu_resumes_on_a_cpu(tmp_path):
    checkpoint = tmp_path / "run.pt"
    trainer(checkpoint).run(max_steps=12)
    claim_cuda(checkpoint)
    with pytest.raises(RuntimeError, match="CUDA"):  # the file really claims a GPU
        torch.load(checkpoint, weights_only=False)
    resumed = trainer(checkpoint).run()
    straight = trainer(tmp_path / "other.pt").run()
    assert resumed.epochs[-1]["test_accuracy"] == straight.epochs[-1]["test_accuracy"]


# --- killing a sweep ---------------------------------------------------------------------------------------------

SWEEP = """
import sys
from dpbook.repro import sweep
from dpbook.repro.experiment import Experiment
runs = [Experiment(study="kill", dataset="digits", model="digits_cnn", method="dpsgd", hyperparameters={"C": c},
                   epochs=200, batch_size=64, optimizer="sgd", lr=0.1) for c in (0.5, 1.0)]
sweep.run_all(runs, jobs=2, results_dir=sys.argv[1], progress=False)
"""


def children(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_killing_a_sweep_leaves_no_worker(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", SWEEP, str(tmp_path)], cwd=Path(__file__).parents[1])
    workers: set[int] = set()
    for _ in range(120):  # the two workers start training
        time.sleep(0.5)
        workers = {w for c in children(parent.pid) for w in {c} | children(c)} - {parent.pid}
        if len(workers) >= 2:
            break
    assert len(workers) >= 2, "the sweep's workers did not start"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(240):  # each worker ends after its current step (train's stop request): slow on a busy machine
        if not any(alive(w) for w in workers):
            break
        time.sleep(0.25)
    assert not any(alive(w) for w in workers), "workers outlived the killed sweep"
