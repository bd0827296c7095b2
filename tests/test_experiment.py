"""The reproduction harness: runs, result files, resume, privacy checks, searches, cells and sweeps."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
import torch

from dpbook.accounting import epsilon_of_history
from dpbook.methods import METHODS
from dpbook.repro import dispatch, experiment, reproduce, results, sweep
from dpbook.repro.experiment import Experiment, check_spent, plan_of, run_experiment
from dpbook.repro.sweep import __main__ as sweep_cli
from dpbook.train import Trainer
from dpbook.tuning import tuning_plan

DIGITS = dict(study="test", dataset="digits", model="digits_mlp", epsilon=4.0, delta=1e-5, epochs=1,
              batch_size=256, lr=0.01)

def test_run_writes_a_complete_record_and_is_not_repeated(tmp_path):
    exp = Experiment(method="dpsgd", hyperparameters={"C": 1.0}, **DIGITS)
    record = run_experiment(exp, results_dir=tmp_path, progress=False)
    path = exp.path(tmp_path)
    assert path.exists() and path.parent.name == "dpsgd" and path.parent.parent.name == "test"
    for key in ("experiment", "plan", "sigma", "epsilon_spent", "epochs", "final", "wall_time_s", "device",
                "versions", "git", "created", "N", "steps", "schema"):
        assert key in record, key
    assert record["experiment"]["seed"] == 0 and record["N"] == 1437 and record["steps"] == 6
    assert record["epsilon_spent"] <= 4.0 and record["epsilon_spent"] > 3.9
    assert record["epochs"]["epoch"] == [1]
    assert record["final"]["test_accuracy"] == record["epochs"]["test_accuracy"][-1]
    assert {"torch", "opacus", "numpy", "python", "dpbook"} <= set(record["versions"])
    mtime = path.stat().st_mtime_ns
    assert run_experiment(exp, results_dir=tmp_path) == record
    assert path.stat().st_mtime_ns == mtime  # found, not retrained
    assert not list(tmp_path.rglob("*.pt"))  # the checkpoint is removed once the result is written


def test_key_ignores_study_and_micro_batches_but_not_the_rest():
    exp = Experiment(method="dpsgd", hyperparameters={"C": 1.0}, **DIGITS)
    assert exp.key() == exp.replace(study="other", micro_batch_size=7).key()
    assert exp.key() != exp.replace(seed=1).key() != exp.replace(hyperparameters={"C": 2.0}).key()
    assert Experiment(method="dpsgd", protocol="none", G=9, **DIGITS).G == 1  # free tuning: G does not matter


@pytest.mark.parametrize("change, message", [
    (dict(dataset="imagenet"), "unknown dataset"), (dict(method="sgd"), "unknown method"),
    (dict(optimizer="rmsprop"), "optimizer"), (dict(protocol="bonferroni"), "protocol"),
    (dict(epsilon=0.0), "epsilon"), (dict(delta=1.5), "delta"), (dict(batch_size=-1), "batch_size"),
])
def test_bad_experiments_are_refused_with_a_clear_message(change, message):
    with pytest.raises(ValueError, match=message):
        Experiment(**{**DIGITS, "method": "dpsgd", **change})


def test_interrupted_run_resumes_to_the_same_result(tmp_path, monkeypatch):
    exp = Experiment(method="dcsgd-e", **{**DIGITS, "epochs": 2})
    reference = run_experiment(exp, results_dir=tmp_path / "a", progress=False)

    original = Trainer.run

    def interrupted(self, **kwargs):
        original(self, max_steps=7)  # checkpoints at step 7, then the "machine" goes away
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(exp, results_dir=tmp_path / "b", checkpoint_every=1, progress=False)
    assert not exp.path(tmp_path / "b").exists() and list((tmp_path / "b").rglob("*.pt"))
    monkeypatch.setattr(Trainer, "run", original)
    resumed = run_experiment(exp, results_dir=tmp_path / "b", progress=False)
    assert resumed["resumed"] is True
    assert resumed["epochs"] == reference["epochs"] and resumed["epsilon_spent"] == reference["epsilon_spent"]


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("protocol", ["rdp", "lt", "ps"])
def test_every_method_spends_no_more_than_a_charged_search_allows(tmp_path, method, protocol):
    """from_plan of each method against the accountant: G = 3 runs of its exact history fit the budget."""
    batch_size = 1437 if METHODS[method].full_batch else 512  # full batch: B = N, q = 1
    exp = Experiment(method=method, hyperparameters=METHODS[method].declaration.run, protocol=protocol, G=3,
                     **{**DIGITS, "epochs": 1, "batch_size": batch_size})
    record = run_experiment(exp, results_dir=tmp_path, progress=False)  # check_spent raises on overspending
    plan = plan_of(exp, record["N"])
    assert record["sigma"] == plan.sigma
    if protocol == "lt":
        assert record["epsilon_spent"] <= plan.per_run_epsilon * (1 + 1e-9)


def test_check_spent_refuses_a_run_that_overspends():
    plan = tuning_plan(4.0, 1e-5, sample_rate=0.1, steps=100, G=3, protocol="rdp")
    honest = [(plan.sigma, 0.1, 100)]
    assert check_spent(honest, plan) == pytest.approx(epsilon_of_history(honest, 1e-5))
    with pytest.raises(RuntimeError, match="charges"):
        check_spent([(0.9 * plan.sigma, 0.1, 100)], plan)


@pytest.mark.slow
@pytest.mark.parametrize("dataset, model, method", [
    ("mnist", "mnist_cnn", "dpsgd"), ("cifar10-simclr", "linear_classifier", "psasc"),
    ("names", "char_lstm", "dcsgd-p"), ("qnli", "bert_base", "autos"), ("celeba", "resnet9", "psac"),
])
def test_smoke_runs_every_kind_of_task(tmp_path, dataset, model, method):
    exp = Experiment(study="smoke", dataset=dataset, model=model, method=method,
                     hyperparameters=METHODS[method].declaration.run, epochs=1, batch_size=16, smoke=True)
    record = run_experiment(exp, results_dir=tmp_path, progress=False)
    assert record["experiment"]["smoke"] and record["steps"] >= 1 and exp.path(tmp_path).name.startswith("smoke_")
    assert results.load_results("smoke", root=tmp_path) == []  # pages never mix smoke runs with real ones
    assert len(results.load_results("smoke", root=tmp_path, smoke=True)) == 1


def test_a_real_mnist5k_run(tmp_path):
    """MNIST-5k is a dataset like any other: real images, its fixed test set, the MNIST CNN; its size is known to
    a search without loading it."""
    exp = Experiment(study="m5k", dataset="mnist5k", model="mnist_cnn", method="dpsgd", hyperparameters={"C": 1.0},
                     epsilon=8.0, epochs=1, batch_size=64, lr=0.01, train_size=256)
    record = run_experiment(exp, results_dir=tmp_path, progress=False)
    assert (record["N"], record["N_test"], record["parameters"], record["steps"]) == (256, 1000, 26010, 4)
    assert record["delta_spent"] == 1 / 256 and 0 <= record["final"]["test_accuracy"] <= 1
    full = exp.replace(train_size=None)
    assert reproduce.training_size(full) == len(experiment.load_task_data(full).x_train) == 4000


def test_missing_real_dataset_names_the_fix(tmp_path):
    exp = Experiment(study="x", dataset="mnist", model="mnist_cnn", method="dpsgd", hyperparameters={"C": 1.0})
    with pytest.raises(FileNotFoundError, match="download=True"):
        run_experiment(exp, results_dir=tmp_path, data_root=tmp_path / "nowhere")


def test_train_size_keeps_the_same_subset_for_every_seed():
    exp = Experiment(method="dpsgd", train_size=500, **DIGITS)
    a = experiment.load_task_data(exp)
    b = experiment.load_task_data(exp.replace(seed=3))
    assert len(a.x_train) == 500 and torch.equal(a.x_train, b.x_train) and len(a.x_test) == 360


# ----------------------------------------------------------------------------------------------------------------
# Searches and cells
# ----------------------------------------------------------------------------------------------------------------

GRID = [{"C": 0.5}, {"C": 1.0}, {"C": 4.0}]


@pytest.mark.parametrize("protocol", ["lt", "ps"])
def test_random_searches_are_fixed_in_advance_and_independent(protocol):
    base = Experiment(method="dpsgd", protocol=protocol, **DIGITS)
    first, again = reproduce.search(base, GRID, rep=0), reproduce.search(base, GRID, rep=0)
    assert first == again and all(r.G == 3 for r in first)
    seeds = [{r.seed for r in reproduce.search(base, GRID, rep)} for rep in range(3)]
    assert not (seeds[0] & seeds[1]) and not (seeds[1] & seeds[2])
    lengths = {len(reproduce.search(base, GRID, rep)) for rep in range(20)}
    assert len(lengths) > 1 and min(lengths) >= 1  # the number of runs varies; "ps" draws it logarithmic, K >= 1


def test_grid_points_may_set_the_learning_rate():
    base = Experiment(method="dpsgd", protocol="rdp", **DIGITS)
    runs = reproduce.search(base, [{"C": 1.0, "lr": 0.1}, {"C": 1.0, "lr": 0.01}])
    assert [(r.lr, r.hyperparameters) for r in runs] == [(0.1, {"C": 1.0}), (0.01, {"C": 1.0})]
    assert reproduce.chosen_point(runs[0], base) == {"C": 1.0, "lr": 0.1}


@pytest.mark.slow
def test_unreachable_cells_say_why():
    # epsilon_1 = 3.3e-4 at delta_1 ~ 1e-17 needs an RDP order beyond the grid's 65,536
    base = Experiment(method="dpsgd", protocol="lt", **{**DIGITS, "epsilon": 1e-3})
    with pytest.raises(ValueError, match="LT per-run budget"):
        reproduce.search(base, GRID)
    assert reproduce.cell(base, GRID, 2)["status"] == "unreachable"
    andrew = Experiment(method="adaclip", protocol="rdp", **{**DIGITS, "epsilon": 0.3, "batch_size": 16})
    assert "sigma_b" in reproduce.cell(andrew, [{"p": 0.5}, {"p": 0.7}], 1)["reason"]


def test_cell_goes_from_not_run_to_ok(tmp_path):
    base = Experiment(method="dpsgd", protocol="none", **DIGITS)
    assert reproduce.cell(base, GRID, 2, tmp_path)["status"] == "not run yet"
    assert reproduce.reruns(base, GRID, 2, tmp_path) == []
    sweep.run_all(reproduce.planned_runs(base, GRID, 2), results_dir=tmp_path, progress=False)
    best = reproduce.best_of(reproduce.search(base, GRID), tmp_path)
    runs = reproduce.reruns(base, GRID, 2, tmp_path)
    assert [r.seed for r in runs] == [0, 1] and runs[0].hyperparameters == best[0].hyperparameters
    assert reproduce.cell(base, GRID, 2, tmp_path)["status"] in ("partial", "ok")
    summary = sweep.run_all(runs, results_dir=tmp_path, progress=False)
    assert summary["done"] + summary["skipped"] == 2
    cell = reproduce.cell(base, GRID, 2, tmp_path)
    assert cell["status"] == "ok" and len(cell["values"]) == 2 and cell["chosen"] == [best[0].hyperparameters]


def test_charged_cell_is_the_best_run_of_each_search(tmp_path):
    base = Experiment(method="dpsgd", protocol="rdp", **DIGITS)
    sweep.run_all(reproduce.planned_runs(base, GRID, 2), results_dir=tmp_path, progress=False)
    cell = reproduce.cell(base, GRID, 2, tmp_path)
    expected = [reproduce.best_of(reproduce.search(base, GRID, rep), tmp_path)[1] for rep in range(2)]
    assert cell["status"] == "ok" and cell["values"] == expected
    assert cell["sigma"] == plan_of(base.replace(G=3), 1437).sigma


def test_train_until_done_trains_the_grid_then_the_reruns_it_unlocks(tmp_path, capsys):
    base, grid = Experiment(method="dpsgd", protocol="none", **DIGITS), GRID[:2]
    assert reproduce.summarise(base, grid, 2, tmp_path)["status"] == "not run yet"
    assert reproduce.best_run(base, grid, tmp_path) is None
    assert reproduce.cell_runs(base, grid, 2, tmp_path) == reproduce.search(base, grid)  # no re-runs yet
    sweep.run_all(reproduce.search(base, grid)[:1], results_dir=tmp_path, progress=False)
    assert reproduce.summarise(base, grid, 2, tmp_path)["status"] == "grid 1/2 done"
    done = reproduce.train_until_done(lambda: reproduce.cell_runs(base, grid, 2, tmp_path), tmp_path, progress=False)
    assert done == {"rounds": 2, "failed": {}}  # round 1: the rest of the grid; round 2: the best point's seeds
    assert "round 2: 1 run(s) trained, 0 failed" in capsys.readouterr().out
    best = reproduce.best_run(base, grid, tmp_path)
    assert best == reproduce.best_of(reproduce.search(base, grid), tmp_path)[0]
    summary = reproduce.summarise(base, grid, 2, tmp_path)
    assert summary["status"] == "done" and summary["best"] == best and len(summary["records"]) == 2
    assert summary["values"] == [r["final"]["test_accuracy"] for r in summary["records"]]


def test_train_until_done_does_not_retry_a_failed_run(tmp_path, capsys):
    bad = Experiment(method="dpsgd", hyperparameters={"C": -1.0}, **DIGITS)
    done = reproduce.train_until_done(lambda: [bad], tmp_path, progress=False)
    assert done["rounds"] == 1 and list(done["failed"]) == [str(bad.path(tmp_path))]
    assert "FAILED (1 run(s), e.g. " in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------------------------
# Sweeps and results
# ----------------------------------------------------------------------------------------------------------------

def test_sweep_reports_failures_and_goes_on(tmp_path):
    good = Experiment(method="dpsgd", hyperparameters={"C": 1.0}, **DIGITS)
    bad = Experiment(method="dpsgd", hyperparameters={"C": -1.0}, **DIGITS)
    summary = sweep.run_all([good, bad, good], results_dir=tmp_path, progress=False)
    assert summary["planned"] == 2 and summary["done"] == 1 and len(summary["failed"]) == 1
    assert "C (clipping threshold)" in summary["failed"][0][1]
    assert sweep.run_all([good], results_dir=tmp_path, progress=False)["skipped"] == 1


def test_notebook_grid_runs_papermill_once_per_point(tmp_path):
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("x = 0\nout = ''", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("open(out, 'w').write(str(x))")]
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    summary = sweep.run_notebook_grid(path, {"x": [1, 2]}, {"out": str(tmp_path / "x.txt")},
                                      output_dir=tmp_path / "executed", jobs=2, progress=False)
    assert summary["done"] == 2 and not summary["failed"]
    names = sorted(p.name for p in (tmp_path / "executed").glob("*.ipynb"))
    assert [re.sub(r"_[0-9a-f]{10}\.ipynb$", "", name) for name in names] == ["tiny_x=1", "tiny_x=2"], names


def tiny_notebook(path, body: str):
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("x = 0\nout = ''", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, path)
    return path


def test_a_sweep_with_a_wrong_parameter_starts_nothing(tmp_path, capsys):
    path = tiny_notebook(tmp_path / "tiny.ipynb", "open(out, 'w').write(str(x))")
    code = sweep_cli.main(["notebook", str(path), "--grid", "y=1,2", "--grid", "x=1,two", "--set", f"out={tmp_path}/o",
                       "--output-dir", str(tmp_path / "executed")])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "executed").exists()
    assert "the sweep was not started" in err and "unknown parameter 'y'" in err
    assert "parameter 'x' = 'two' must be int" in err and "tiny.ipynb's parameters: x, out" in err


def test_a_sweep_value_that_is_no_python_literal_starts_nothing(tmp_path, capsys):
    path = tiny_notebook(tmp_path / "tiny.ipynb", "open(out, 'w').write(str(x))")
    code = sweep_cli.main(["notebook", str(path), "--grid", "x=[1, 2", "--output-dir", str(tmp_path / "executed")])
    assert code == 2 and not (tmp_path / "executed").exists()
    assert "parameter 'x' = '[1, 2' is not a Python literal (SyntaxError" in capsys.readouterr().err


def test_a_failed_run_of_a_sweep_is_one_line_naming_its_cell(tmp_path, capsys):
    body = "if x == 2:\n    raise ValueError('x must not be two')"
    path = tiny_notebook(tmp_path / "tiny.ipynb", body)
    code = sweep_cli.main(["notebook", str(path), "--grid", "x=1,2", "--output-dir", str(tmp_path / "executed")])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    executed = tmp_path / "executed" / sweep.executed_name(path, {"x": 2}, {"x": 2})
    manifest = next((tmp_path / "executed" / ".sweeps").glob("*/manifest.json"))
    assert f"sweep of 2 notebook execution(s) on local; manifest {manifest}" in out  # a local sweep says where
    assert out[-2:] == ["planned 2: done 1, failed 1",
                        f"  FAILED {executed}: the cell 'if x == 2:' raised ValueError: x must not be two"]


def test_two_notebook_sweeps_never_overwrite_each_others_executions(tmp_path, capsys):
    """The same grid point with other fixed parameters, into the same folder: each sweep keeps its own executed
    notebook, and the first sweep's status still reports its own execution (not the second's) as done."""
    path = tiny_notebook(tmp_path / "tiny.ipynb", "open(out, 'w').write(str(x))")
    first = ["notebook", str(path), "--grid", "x=1", "--output-dir", str(tmp_path / "executed")]
    assert sweep_cli.main([*first, "--set", f"out={tmp_path / 'a'}"]) == 0
    manifest = next((tmp_path / "executed" / ".sweeps").glob("*/manifest.json"))
    assert sweep_cli.main([*first, "--set", f"out={tmp_path / 'b'}"]) == 0
    assert len(list((tmp_path / "executed").glob("tiny_x=1_*.ipynb"))) == 2
    capsys.readouterr()
    assert sweep_cli.main(["status", str(manifest)]) == 0
    assert "1 notebook(s), done 1" in capsys.readouterr().out
    # the first sweep's file replaced by an execution with other parameters is not done
    mine = Path(dispatch.Manifest.read(manifest).entries[0]["result"])
    theirs = next(p for p in (tmp_path / "executed").glob("tiny_x=1_*.ipynb") if p != mine)
    mine.write_bytes(theirs.read_bytes())
    assert sweep_cli.main(["status", str(manifest)]) == 1
    assert "1 notebook(s), not done 1" in capsys.readouterr().out


def test_a_notebook_sweep_resumes_from_another_folder(tmp_path, monkeypatch, capsys):
    """The sweep ran with relative paths from one folder; resume, from another, finds the notebook and the
    executions (and executes only the one that failed)."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    tiny_notebook(here / "tiny.ipynb", "assert x != 2, 'x must not be two'")
    assert sweep_cli.main(["notebook", "tiny.ipynb", "--grid", "x=1,2", "--output-dir", "executed"]) == 1
    manifest = next((here / "executed" / ".sweeps").glob("*/manifest.json"))
    tiny_notebook(here / "tiny.ipynb", "assert x in (1, 2)")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert sweep_cli.main(["resume", str(manifest)]) == 0
    assert "planned 2: done 1, skipped 1 (already recorded), failed 0" in capsys.readouterr().out
    assert not (tmp_path / "executed").exists()


def test_compare_never_invents_a_number():
    paper = {"rows": [{"dataset": "mnist", "method": "dpsgd", "value": 95.0, "std": 0.2}]}
    cells = [{"dataset": "mnist", "method": "dpsgd"}, {"dataset": "mnist", "method": "dcsgd-e"}]
    rows = results.compare(cells, reproduced=lambda c: [0.94, 0.96] if c["method"] == "dpsgd" else [],
                           paper=lambda c: (results.paper_rows(paper, **c) or [None])[0])
    assert rows[0]["reproduced"].startswith("95.00 ± 1.41 (n=2)") and rows[0]["difference"] == "+0.00"
    assert rows[1]["reproduced"] == "not run yet" and rows[1]["paper"] == "not in the paper"
    table = results.markdown_table(rows, ["method", "paper", "reproduced"])
    assert table.splitlines()[0] == "| method | paper | reproduced |" and "not run yet" in table


def test_paper_tables_load_and_missing_ones_are_named():
    table = results.load_paper_table("dcsgd_table4")
    assert table["table"] == "IV" and results.paper_rows(table, dataset="mnist", epsilon=1, method="dpsgd")
    with pytest.raises(FileNotFoundError, match="dcsgd_table4"):
        results.load_paper_table("dcsgd_table99")


def test_result_files_are_single_json_lines(tmp_path):
    path = results.write_result({"a": [1, 2]}, tmp_path / "r.json")
    text = path.read_text()
    assert text.count("\n") == 1 and json.loads(text) == {"a": [1, 2], "schema": results.SCHEMA_VERSION}


# --- names and values are checked when the experiment is made, before any training ------------------------------

def digits_run(**changes) -> Experiment:
    fields = dict(study="s", dataset="digits", model="digits_cnn", method="dpsgd", hyperparameters={"C": 1.0},
                  epsilon=4.0, epochs=1, batch_size=64, optimizer="sgd", lr=0.1)
    return Experiment(**{**fields, **changes})


@pytest.mark.parametrize("changes, message", [
    (dict(dataset="mnistt"), r"unknown dataset 'mnistt' \(did you mean 'mnist'\?\); valid: digits, mnist"),
    (dict(model="digits_cn"), r"unknown model 'digits_cn' \(did you mean 'digits_cnn'\?\); valid: mnist_cnn"),
    (dict(method="dpsgdd"), r"unknown method 'dpsgdd' \(did you mean 'dpsgd'\?\); valid: adaclip"),
    (dict(optimizer="sgdd"), r"unknown optimizer 'sgdd' \(did you mean 'sgd'\?\); valid: adam, sgd, sgd-momentum"),
    (dict(protocol="rdpp"), r"unknown protocol 'rdpp' \(did you mean 'rdp'\?\); valid: "),
    (dict(accountant="rpd"), r"unknown accountant 'rpd' \(did you mean 'rdp'\?\); valid: rdp, prv"),
    (dict(hyperparameters={"c": 1.0}), r"method 'dpsgd' has no hyperparameter 'c' \(did you mean 'C'\?\)"),
    (dict(hyperparameters={"C": "one"}), r"dpsgd's C. = 'one' must be float"),
    (dict(method="dcsgd-e", hyperparameters={"b": 2.5}), r"dcsgd-e's b. = 2.5 must be int"),
])
def test_a_wrong_name_or_value_stops_the_experiment(changes, message):
    with pytest.raises(ValueError, match=message):
        digits_run(**changes)


def test_one_run_has_one_key_whatever_the_number_types():
    import numpy as np

    plain = digits_run()
    same = [digits_run(epsilon=4), digits_run(hyperparameters={"C": 1}), digits_run(epsilon=np.float32(4.0)),
            digits_run(hyperparameters={"C": np.float64(1.0)}), digits_run(epochs=np.int64(1), lr=np.float32(0.1))]
    assert all(e.key() == plain.key() and e.path() == plain.path() for e in same)
    assert json.loads(json.dumps(same[3].hyperparameters)) == {"C": 1.0}  # plain JSON in the result file
    assert digits_run(hyperparameters={"C": 2.0}).key() != plain.key()


def test_the_recorded_results_keep_their_keys():
    """Converting the numbers changes no recorded run's key: every result file is still found."""
    runs = [path for path in sorted(results.RESULTS_DIR.glob("[!.]*/**/*.json")) if not results.is_analysis(path)]
    for path in runs[::50]:
        record = json.loads(path.read_text())
        assert Experiment(**record["experiment"]).key() == record["key"], path


@pytest.mark.parametrize("name, hyperparameters, message", [
    ("dcsgd-x", {"sigma": 1.0}, r"unknown method 'dcsgd-x' \(did you mean 'dcsgd-[ep]'\?\); registered methods"),
    ("dpsgd", {"C": 1.0, "sigma": 1.0, "Cc": 2.0}, r"no hyperparameter 'Cc' \(did you mean 'C'\?\); its "
                                                    r"hyperparameters: C, sigma"),
    ("dpdr", {"sigma": 1.0}, r"'dpdr' has no hyperparameter 'sigma' \(did you mean 'sigma_g'\?\)"),
    ("dpsgd", {"C": 1.0}, r"method 'dpsgd' needs the hyperparameter\(s\) sigma"),
])
def test_make_method_names_the_wrong_or_missing_hyperparameter(name, hyperparameters, message):
    from dpbook.methods import make_method

    with pytest.raises(ValueError, match=message):
        make_method(name, **hyperparameters)
