"""Privacy hygiene rule 8: step infos, log rows and result files hold only what the privacy guarantee covers;
statistics of the private data are an explicit opt-in, logged apart under "nonprivate/" keys, and never written into
results."""

from __future__ import annotations

import re

import pytest
import torch

from dpbook.methods import DPSGD, METHODS
from dpbook.methods.base import is_nonprivate
from dpbook.optim import DPOptimizer
from dpbook.repro import results
from dpbook.repro.experiment import Experiment, load_task_data, prepare, run_experiment
from dpbook.train import Trainer

SMOKE = dict(study="hygiene", dataset="digits", model="digits_mlp", epochs=1, batch_size=16, lr=0.1, smoke=True)

#: Each raw-batch statistic a method reports on the opt-in (besides the realised batch size every step reports), and
#: the methods that report it.
RAW_BATCH_STATISTICS = {
    "nonprivate/unclipped_count": ("adaclip", "dcsgd-p", "dcsgd-e"),
    "nonprivate/norm": ("dpdr", "diff", "diff2"),
    "nonprivate/clipped_fraction": ("dpdr", "diff", "diff2"),
    "nonprivate/difference_norm": ("dpdr", "diff", "diff2"),
    "nonprivate/orthogonal_norm": ("dpdr",),
    "nonprivate/clipped_fraction_alpha": ("dpdr",),
}


def smoke_experiment(name: str) -> Experiment:
    exp = Experiment(method=name, hyperparameters=METHODS[name].declaration.run, **SMOKE)
    if METHODS[name].full_batch:  # full batch: B = N, q = 1
        exp = exp.replace(batch_size=len(load_task_data(exp).x_train))
    return exp


def smoke_trainer(name: str, **options) -> Trainer:
    """The Trainer run_experiment builds for the method's smoke experiment (6 steps on generated digits)."""
    return prepare(smoke_experiment(name)).trainer(progress=False, **options)


def nonprivate_in(rows: list[dict]) -> set[str]:
    return {k for row in rows for k in row if is_nonprivate(k)}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_by_default_no_step_info_epoch_row_or_result_holds_a_nonprivate_key(tmp_path, name):
    trainer = smoke_trainer(name)
    log = trainer.run()
    assert len(log.steps) == trainer.T and log.epochs
    assert nonprivate_in(log.steps) == set() and nonprivate_in(log.epochs) == set()
    assert log.nonprivate is None and trainer.engine.nonprivate_info is None
    record = run_experiment(smoke_experiment(name), results_dir=tmp_path, progress=False)
    assert results.nonprivate_keys(record) == [] and "test_loss" in record["final"]


@pytest.mark.parametrize("name", sorted(METHODS))
def test_opt_in_logs_nonprivate_diagnostics_apart_and_changes_nothing_private(name):
    default = smoke_trainer(name).run()
    log = smoke_trainer(name, nonprivate_diagnostics=True).run()
    assert log.epochs == default.epochs and log.steps == default.steps  # the same run; nothing mixed into its rows
    section = log.nonprivate
    assert [row["step"] for row in section.steps] == [row["step"] for row in log.steps]
    assert [row["epoch"] for row in section.epochs] == [row["epoch"] for row in log.epochs]
    for row in section.steps + section.epochs:
        assert set(row) - {"epoch", "step"} == nonprivate_in([row]), row  # every statistic is labelled
    assert {"nonprivate/train_loss", "nonprivate/train_accuracy"} <= set(section.epochs[-1])
    reported = {key for key, methods in RAW_BATCH_STATISTICS.items() if name in methods}
    assert {"nonprivate/batch_size", *reported} <= nonprivate_in(section.steps)


@pytest.mark.parametrize("record, key", [
    ({"final": {"test_accuracy": 0.9, "train_accuracy": 0.95}}, "final.train_accuracy"),
    ({"epochs": {"epoch": [1], "train_loss": [0.3]}}, "epochs.train_loss"),
    ({"epochs": {"nonprivate/norm": [1.0]}}, "epochs.nonprivate/norm"),
    ({"runs": [{"nonprivate/batch_size": 10}]}, "runs.nonprivate/batch_size"),
])
def test_results_writer_refuses_a_nonprivate_statistic(tmp_path, record, key):
    path = tmp_path / "r.json"
    with pytest.raises(ValueError, match=re.escape(repr(key))) as refused:
        results.write_result(record, path)
    assert "nonprivate_diagnostics" in str(refused.value) and not path.exists()


class LeakyDPSGD(DPSGD):
    """A method that reports a raw-batch statistic among its released diagnostics."""

    def diagnostics(self) -> dict[str, float]:
        return {**super().diagnostics(), "nonprivate/norm": 1.0}


def test_engine_refuses_a_nonprivate_key_among_released_diagnostics():
    model = torch.nn.Linear(4, 3)
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), LeakyDPSGD(C=1.0, sigma=1.0),
                         sample_rate=0.1, expected_batch_size=4)
    with pytest.raises(ValueError, match=r"LeakyDPSGD.*'nonprivate/norm'.*nonprivate_diagnostics\(\)"):
        engine.step(torch.randn(4, 4), torch.randint(0, 3, (4,)))


def committed_json() -> list:
    """The JSON files under data/results/ but its git-ignored folders (a local sweep's manifests, checkpoints)."""
    return [path for path in sorted(results.RESULTS_DIR.rglob("*.json"))
            if not any(part.startswith(".") for part in path.relative_to(results.RESULTS_DIR).parts)]


@pytest.mark.slow
def test_committed_results_hold_no_nonprivate_statistic():
    """No file under data/results/ holds a training-set metric or a "nonprivate/" statistic (privacy hygiene rule 8).

    Files written before the opt-in existed hold them: this fails until they are regenerated with the current code.
    """
    offenders = {}
    for path in committed_json():  # runs, and analyses such as the privacy audits
        record = results.read_result(path, required=("parameters",) if results.is_analysis(path) else
                                     results.REQUIRED_KEYS)
        keys = sorted(set(results.nonprivate_keys(record)))
        if keys:
            offenders[str(path.relative_to(results.REPO_ROOT))] = keys
    examples = "; ".join(f"{path}: {keys}" for path, keys in list(offenders.items())[:3])
    assert not offenders, (f"{len(offenders)} committed result file(s) hold non-private statistics, e.g. {examples}; "
                           "regenerate them with the current code, which never records them (remove them first: "
                           "runs whose file exists are skipped; `python -m dpbook.repro.sweep digits --jobs 2` for the "
                           "digits benchmark)")
