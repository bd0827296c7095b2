"""The task registry (dpbook.tasks) holds every dataset fact once; the loaders, the models and the papers' settings
agree with it."""

import pytest
import torch

from dpbook import data, models
from dpbook.repro import reproduce
from dpbook.repro.experiment import Experiment, build_task_model, load_task_data, smoke_data
from dpbook.repro.papers.dcsgd import DCSGD_SETTINGS
from dpbook.repro.reproduce import training_size
from dpbook.tasks import TASKS


@pytest.mark.parametrize("name", ["digits", "mnist5k"])
def test_an_offline_task_is_what_its_loader_returns(name):
    task = TASKS[name]
    splits = task.load(None, False)
    assert len(splits.x_train) == task.train_size
    assert tuple(splits.x_train.shape[1:]) == task.shape
    assert int(splits.y_train.max()) + 1 == task.classes


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_default_model_is_registered_and_fits_the_task(name):
    task = TASKS[name]
    assert task.model in models.MODELS
    exp = Experiment(study="t", dataset=name, model=task.model, method="dpsgd", smoke=True)
    if task.model == "bert_base":
        pytest.importorskip("transformers")
    model = build_task_model(exp)
    x = smoke_data(task).x_train[:2]
    out = model(x)
    logits = out.logits if hasattr(out, "logits") else out
    assert tuple(logits.shape) == (2, task.classes)


def test_planning_sizes_come_from_the_registry():
    for name, task in TASKS.items():
        exp = Experiment(study="t", dataset=name, model=task.model, method="dpsgd")
        if task.train_size is not None:
            assert training_size(exp) == task.train_size
            assert training_size(exp.replace(train_size=100)) == 100
        assert training_size(exp.replace(smoke=True)) == task.smoke_sizes[0]
    for key, setting in DCSGD_SETTINGS.items():
        assert (setting.N, setting.name) == (TASKS[key].train_size, TASKS[key].title)


def test_a_task_without_a_fixed_size_is_measured_from_its_files(tmp_path, monkeypatch):
    folder = tmp_path / "names"
    folder.mkdir()
    for k, language in enumerate(data.NAMES_LANGUAGES):
        (folder / f"{language}.txt").write_text("\n".join(f"Name{chr(97 + k)}{i}" for i in range(10)) + "\n")
    exp = Experiment(study="t", dataset="names", model="char_lstm", method="dpsgd")
    monkeypatch.setattr(reproduce, "_MEASURED", {})  # this process's memory of measured sizes, for this test only
    assert reproduce.measured_size("names", tmp_path) == len(load_task_data(exp, root=tmp_path).y_train) == 18 * 8
    assert training_size(exp) == 18 * 8  # remembered for planning
    assert torch.equal(load_task_data(exp, root=tmp_path).y_train.unique(), torch.arange(18))
