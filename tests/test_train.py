"""The training loop: interrupt and resume equals an uninterrupted run; the log, its non-private section and atomic
checkpoints."""

from __future__ import annotations

import pytest
import torch

from dpbook.data import load_digits
from dpbook.methods import DPSGD
from dpbook.methods.base import is_nonprivate
from dpbook.models import digits_cnn
from dpbook.train import Trainer

OPTIMIZERS = {
    "momentum": lambda ps: torch.optim.SGD(ps, lr=0.3, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}


def make_trainer(opt: str, checkpoint=None, seed: int = 0, dropout: bool = False,
                 nonprivate_diagnostics: bool = False) -> Trainer:
    torch.manual_seed(123)
    model = digits_cnn()
    if dropout:  # exercises the global RNG (dropout masks) across the checkpoint
        model = torch.nn.Sequential(torch.nn.Dropout(0.1), model)
    return Trainer(model, DPSGD(C=1.0, sigma=1.2), OPTIMIZERS[opt](model.parameters()), load_digits(),
                   expected_batch_size=256, epochs=2, delta=1e-5, seed=seed, checkpoint=checkpoint,
                   checkpoint_every=3, nonprivate_diagnostics=nonprivate_diagnostics)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path, opt):
    full = make_trainer(opt, dropout=True)
    full_log = full.run()
    ckpt = tmp_path / "run.pt"
    first = make_trainer(opt, checkpoint=ckpt, dropout=True)
    first.run(max_steps=5)  # "interrupted" after 5 of T steps, between two epoch ends
    assert first.step == 5 and ckpt.exists()
    resumed = make_trainer(opt, checkpoint=ckpt, dropout=True)  # a fresh process would rebuild everything
    resumed_log = resumed.run()
    assert resumed.step == full.step == full.T
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    assert resumed.engine.epsilon(1e-5) == full.engine.epsilon(1e-5)
    assert resumed_log.epochs == full_log.epochs


def test_log_has_metrics_epsilon_and_diagnostics():
    trainer = make_trainer("adam")
    log = trainer.run()
    assert trainer.T == 2 * round(1437 / 256)
    assert [row["epoch"] for row in log.epochs] == [1, 2]
    eps = log.column("epsilon")
    assert 0 < eps[0] < eps[1] < float("inf")
    assert all(0 <= row["test_accuracy"] <= 1 for row in log.epochs)
    assert log.epochs[-1]["C"] == 1.0
    assert len(log.steps) == trainer.T and all(row["noise_multiplier"] == 1.2 for row in log.steps)
    assert log.nonprivate is None and not any(is_nonprivate(k) for row in log.epochs + log.steps for k in row)


def test_nonprivate_section_is_resumed_with_the_run(tmp_path):
    full_log = make_trainer("adam", nonprivate_diagnostics=True).run()
    ckpt = tmp_path / "run.pt"
    make_trainer("adam", checkpoint=ckpt, nonprivate_diagnostics=True).run(max_steps=5)
    resumed_log = make_trainer("adam", checkpoint=ckpt, nonprivate_diagnostics=True).run()
    assert resumed_log == full_log and len(full_log.nonprivate.steps) == len(full_log.steps)
    assert [row["nonprivate/batch_size"] for row in full_log.nonprivate.steps[:3]] != [256] * 3  # realised sizes


@pytest.mark.parametrize("written_with", [True, False])
def test_resuming_with_the_other_nonprivate_setting_is_refused(tmp_path, written_with):
    ckpt = tmp_path / "run.pt"
    make_trainer("adam", checkpoint=ckpt, nonprivate_diagnostics=written_with).run(max_steps=2)
    with pytest.raises(ValueError, match="nonprivate_diagnostics setting"):
        make_trainer("adam", checkpoint=ckpt, nonprivate_diagnostics=not written_with).run()


def test_checkpoint_is_written_atomically(tmp_path):
    ckpt = tmp_path / "run.pt"
    make_trainer("adam", checkpoint=ckpt).run(max_steps=3)
    assert ckpt.exists() and not list(tmp_path.glob(".run.pt.*"))  # no temporary file left behind
    state = torch.load(ckpt, weights_only=False)
    assert state["step"] == 3 and state["engine"]["ledger"]


def test_on_step_sees_every_step_with_the_parameters_after_it():
    trainer = make_trainer("adam")
    seen = []
    trainer.run(max_steps=4, on_step=lambda t, row: seen.append((row["step"], t.step,
                                                                  t.model[-1].weight.detach().clone())))
    assert [s for s, _, _ in seen] == [1, 2, 3, 4] and all(a == b for a, b, _ in seen)
    assert not torch.equal(seen[0][2], seen[-1][2])


# --- data a run could not use stops it before the first step ---------------------------------------------------

def _digits_trainer(data, method=None):
    model = digits_cnn()
    return Trainer(model, method or DPSGD(C=1.0, sigma=1.0), torch.optim.SGD(model.parameters(), lr=0.1),
                   data, expected_batch_size=64, epochs=1, delta=1e-5, progress=False)


def _broken(name):
    from dpbook.data import DataSplits

    x, y, xt, yt = load_digits()
    nan = xt.clone()
    nan[3, 0, 0, 0] = float("nan")
    return {
        "float labels": DataSplits(x, y.float(), xt, yt),
        "labels beyond the outputs": DataSplits(x, y + 5, xt, yt),
        "negative labels": DataSplits(x, y - 1, xt, yt),
        "integer images": DataSplits((x * 10).long(), y, (xt * 10).long(), yt),
        "labels shorter": DataSplits(x, y[:-5], xt, yt),
        "2-D labels": DataSplits(x, y[:, None], xt, yt),
        "flat images": DataSplits(x.flatten(1), y, xt.flatten(1), yt),
        "train and test differ": DataSplits(x, y, xt.flatten(1), yt),
        "empty test set": DataSplits(x, y, xt[:0], yt[:0]),
        "NaN in the test set": DataSplits(x, y, nan, yt),
    }[name]


@pytest.mark.parametrize("case, message", [
    ("float labels", r"y_train must hold integer class indices \(torch.long\), got dtype torch.float32: use y.long"),
    ("labels beyond the outputs", r"y_train holds labels from 5 to 14, but the model has 10 outputs \(labels 0..9\)"),
    ("negative labels", r"y_train holds labels from -1 to 8"),
    ("integer images", r"the model cannot take the training inputs \(shape \(1, 8, 8\) per example, dtype torch.int64"),
    ("labels shorter", r"y_train must be one class index per example \(1-D, length 1437 like x_train\), got shape "
                       r"\(1432,\)"),
    ("2-D labels", r"got shape \(1437, 1\)"),
    ("flat images", r"the model cannot take the training inputs \(shape \(64,\) per example"),
    ("train and test differ", r"x_train and x_test differ: \(1, 8, 8\) torch.float32 against \(64,\)"),
    ("empty test set", r"the test set is empty"),
    ("NaN in the test set", r"x_test holds NaN or infinite values \(examples \[3\]"),
])
def test_unusable_data_stops_before_training(case, message):
    with pytest.raises(ValueError, match=message):
        _digits_trainer(_broken(case))


def test_a_method_object_trains_one_run_only():
    from dpbook.methods import make_method

    method = make_method("dpdr", C_perp=1.0, C_alpha=1.0, sigma_perp=1.0, sigma_alpha=3.0, C_g=1.0, sigma_g=1.0, s=5)
    _digits_trainer(load_digits(), method).run(max_steps=3)
    with pytest.raises(ValueError, match=r"this 'dpdr' method object has already taken 3 step\(s\) in another run; "
                                         r"make a new one for every run"):
        _digits_trainer(load_digits(), method)


# --- a delta that would not rule out publishing an example ------------------------------------------------------

@pytest.mark.parametrize("delta", [1e-2, 0.5, 1 / 1437])
def test_a_delta_of_at_least_1_over_N_is_refused_naming_the_risk(delta):
    model = digits_cnn()
    with pytest.raises(ValueError, match=rf"delta={delta:g} is at least 1/N = 0.000695894 \(N = 1437\): a run that "
                                         r"publishes one training example in the clear is \(0, 1/N\)-DP"):
        Trainer(model, DPSGD(C=1.0, sigma=1.0), torch.optim.SGD(model.parameters(), lr=0.1), load_digits(),
                expected_batch_size=64, epochs=1, delta=delta)


def test_a_weak_delta_accepted_explicitly_reports_a_positive_epsilon():
    model = digits_cnn()
    trainer = Trainer(model, DPSGD(C=1.0, sigma=1.0), torch.optim.SGD(model.parameters(), lr=0.1), load_digits(),
                      expected_batch_size=64, epochs=1, delta=1 / 1437, allow_weak_delta=True, progress=False)
    log = trainer.run(max_steps=trainer.steps_per_epoch)
    assert log.epochs[-1]["epsilon"] > 0


def test_an_experiment_with_a_delta_of_at_least_1_over_N_is_refused_when_planned():
    from dpbook.repro.experiment import Experiment, plan_of

    exp = Experiment(study="t", dataset="digits", model="digits_mlp", method="dpsgd", hyperparameters={"C": 1.0},
                     epsilon=4.0, delta=1e-2, epochs=1)
    with pytest.raises(ValueError, match=r"delta=0.01 is at least 1/N"):
        plan_of(exp, 1437)
    assert plan_of(exp.replace(delta=None), 1437).per_run_delta == 1 / 1437  # 1/N, chosen knowingly
