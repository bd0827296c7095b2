"""The checker of contributed result files (dpbook.repro.contributed): a real run's file passes and its chapter renders
it; each way of tampering with a copy (its configuration, a non-private key, its privacy numbers, its provenance, its
name or place) is rejected with a message that names the problem, and the command line exits 1."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dpbook.repro import contributed, results
from dpbook.repro.experiment import Experiment, run_experiment
from dpbook.repro.papers import dcsgd, psasc

ROOT = Path(__file__).resolve().parents[1]

#: The DP-PSASC chapter's parameters for one real run on a CPU: Table III's MNIST DP-SGD cell on the MNIST-5k
#: stand-in, one epoch (8 steps), one learning rate, one seed.
STAND_IN = {"cells": [["mnist", "dpsgd"]], "stand_ins": True, "epochs": 1, "lr_grid": [1.0], "seeds": 1}


def contribute(root: Path) -> Path:
    """Train the run the DP-PSASC chapter plans with :data:`STAND_IN` under ``root`` (about 5 s); its file."""
    run = psasc.Reproduction(**STAND_IN, results_dir=str(root)).wanted()[0]
    run_experiment(run, results_dir=root, progress=False)
    return run.path(root)


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    return contribute(tmp_path_factory.mktemp("contributed"))


@pytest.fixture
def copy(original, tmp_path) -> Path:
    """A copy of the contributed results folder to tamper with; the copied file."""
    shutil.copytree(original.parents[2], tmp_path / "results")
    return tmp_path / "results" / original.relative_to(original.parents[2])


def edit(path: Path, change) -> Path:
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    return path


def test_a_real_run_passes_and_its_chapter_renders_it(original):
    verdict = contributed.check_file(original, STAND_IN)
    assert verdict[:2] == ("benchmark MNIST, model CNN, method DP-SGD", [])  # notes: this checkout's
    accuracy = results.final_metric(results.read_result(original))
    table = psasc.Reproduction(**STAND_IN, results_dir=str(original.parents[2])).table()
    assert f"| {100 * accuracy:.2f} (n=1) |" in table


def test_a_figure_point_of_another_method_and_chapter_passes(tmp_path):
    """DC-SGD-P (two releases a step, composed) at a point of the DC-SGD chapter's Fig. 9, on MNIST-5k."""
    figure = {"datasets": ["svhn"], "figures": ["9"], "figure_datasets": ["mnist"], "figure_epsilons": [8.0],
              "figure_seeds": 1, "p_values": [0.5], "stand_ins": True, "epochs": 1}
    (run,) = dcsgd.Reproduction(**figure, results_dir=str(tmp_path)).figure_runs()
    run_experiment(run, results_dir=tmp_path, progress=False)
    verdicts = contributed.check([tmp_path], figure)
    assert {path: verdict[:2] for path, verdict in verdicts.items()} == {
        run.path(tmp_path): ("a point of the chapter's figures", [])}


def test_a_path_relative_to_the_results_folder_passes(original, monkeypatch):
    monkeypatch.chdir(original.parents[2])
    assert contributed.check_file(original.relative_to(original.parents[2]), STAND_IN).problems == []


def test_without_the_parameters_it_ran_with_the_chapter_plans_no_such_run(original):
    (problem,) = contributed.check_file(original).problems
    assert problem.startswith("no cell of the psasc chapter at its defaults (the paper's settings) plans this run: "
                              "the nearest cell, benchmark MNIST, model CNN, method DP-SGD, differs in "
                              "dataset 'mnist5k' (the cell's 'mnist'); epochs 1 (the cell's 20)")
    assert "-p NAME VALUE" in problem


def rename_to_its_experiment(path: Path) -> Path:
    """Give an edited record the key and the file name of its edited experiment, as a careful forger would."""
    record = json.loads(path.read_text())
    exp = Experiment(**record["experiment"])
    edit(path, lambda r: r.update(key=exp.key()))
    return path.rename(exp.path(path.parents[2]))


def set_in(keys: tuple, value):
    def change(record):
        for key in keys[:-1]:
            record = record[key]
        record[keys[-1]] = value
    return change


def drop(*keys):
    def change(record):
        for key in keys[:-1]:
            record = record[key]
        del record[keys[-1]]
    return change


TAMPERED = {
    "a hyperparameter edited": (set_in(("experiment", "hyperparameters", "C"), 1.0), [
        r"key '\w+' is not its experiment's \('\w+'\): the configuration was edited",
        r"its experiment's file is <results>/psasc/dpsgd/mnist5k_eps3_none_seed0_\w+\.json, not",
        r"no cell of the psasc chapter run with .* plans this run: .* differs in its grid point and seed: "
        r"\{'C': 1\.0, 'lr': 3\.33333\} with seed 0 is not a run the cell plans"]),
    "epsilon edited": (set_in(("experiment", "epsilon"), 8.0), [
        r"key '\w+' is not its experiment's", r"sigma=1\.14\d*, but its configuration's plan gives 0\.6",
        r"differs in epsilon 8\.0 \(the cell's 3\.0\)"]),
    "a non-private key added": (set_in(("final", "train_accuracy"), 0.99), [
        r"non-private statistic\(s\) final\.train_accuracy, which no DP guarantee covers"]),
    "epsilon_spent above the budget": (set_in(("epsilon_spent",), 3.5), [
        r"epsilon_spent=3\.5, but its configuration's noise \(sigma=1\.14\d*, q=0\.128, T=8, dpsgd\) spends "
        r"epsilon=2\.9951 at delta=1e-05 \(recomputed with dpbook.accounting\): an edited number"]),
    "epsilon_spent lowered": (set_in(("epsilon_spent",), 2.5), [
        r"epsilon_spent=2\.5, but its configuration's noise .* spends epsilon=2\.9951 .*: an edited number"]),
    "the epsilon curve rewritten": (set_in(("epochs", "epsilon"), [0.5]), [
        r"epochs\.epsilon\[0\]=0\.5 at step 8, but the history's first 8 steps spend epsilon=2\.9951 at "
        r"delta=1e-05: an edited curve"]),
    "sigma lowered": (set_in(("sigma",), 0.5), [r"sigma=0\.5, but its configuration's plan gives 1\.14"]),
    "steps edited": (set_in(("steps",), 4), [r"steps=4, but its configuration's plan gives 8"]),
    "sigma not a number": (set_in(("sigma",), "1.14"), [r"its privacy numbers do not read \(.*\): rerun the cell"]),
    "the commit removed": (drop("git", "commit"), [r"missing provenance: git\.commit \(a run outside a git clone"]),
    "a fake commit": (set_in(("git", "commit"), "not-a-commit"), [
        r"git\.commit 'not-a-commit' is not a commit hash \(40 hexadecimal digits"]),
    "a short commit": (set_in(("git", "commit"), "3ee7953d"), [r"git\.commit '3ee7953d' is not a commit hash"]),
    "a commit this repository lacks": (set_in(("git", "commit"), "0123456789" * 4), [
        r"git\.commit 0123456789\w+ is not a commit of this repository: push the commit"]),
    "the provenance removed": (lambda r: [r.pop(k) for k in ("device", "versions", "git")], [
        r"missing provenance: device, versions, git; rerun the cell from a clone"]),
    "a library version removed": (drop("versions", "torch"), [r"missing provenance: versions\.torch;"]),
    "the privacy numbers removed": (drop("sample_rate"), [r"no sample_rate: rerun the cell with run_experiment"]),
    "an older schema": (set_in(("schema",), 0), [r"schema 0, not 1"]),
    "a smoke run": (set_in(("experiment", "smoke"), True), [r"a smoke run \(generated data .*\) is no result"]),
    "another study": (set_in(("experiment", "study"), "mine"), [
        r"its experiment's file is <results>/mine/dpsgd/", r"study 'mine' is not a reproduction chapter's"]),
}


@pytest.mark.parametrize("name", list(TAMPERED))
def test_a_tampered_file_is_rejected_naming_the_problem(copy, name):
    change, expected = TAMPERED[name]
    problems = contributed.check_file(edit(copy, change), STAND_IN).problems
    for pattern in expected:
        assert any(re.search(pattern, p) for p in problems), (pattern, problems)


@pytest.mark.parametrize("dirty", [True, False])
def test_a_run_from_a_checkout_with_uncommitted_changes_is_reported_not_rejected(copy, dirty):
    verdict = contributed.check_file(edit(copy, set_in(("git", "dirty"), dirty)), STAND_IN)
    assert verdict.problems == []
    assert verdict.notes == (["made from a checkout with uncommitted changes to tracked files (git.dirty): its "
                              "commit alone does not say what code ran"] if dirty else [])


def test_an_edited_configuration_with_its_own_key_and_name_is_still_caught(copy):
    moved = rename_to_its_experiment(edit(copy, set_in(("experiment", "epsilon"), 8.0)))
    problems = contributed.check_file(moved, STAND_IN).problems
    assert any(p.startswith("sigma=1.14") and "plan gives 0.6" in p for p in problems), problems
    assert any("differs in epsilon 8.0 (the cell's 3.0)" in p for p in problems), problems
    assert not any("key" in p or "file is" in p for p in problems), problems


@pytest.mark.parametrize("move", [
    lambda path: path.rename(path.with_name("mnist5k_eps3_none_seed1_0123456789.json")),
    lambda path: path.rename(path.parents[1] / path.name),
    lambda path: shutil.move(path, path.parents[2] / "psasc" / "autos" / path.name),
], ids=["renamed", "out of its method's folder", "in another method's folder"])
def test_a_renamed_or_moved_file_is_rejected(copy, move):
    (copy.parents[2] / "psasc" / "autos").mkdir()
    moved = Path(move(copy))
    (problem,) = contributed.check_file(moved, STAND_IN).problems
    assert problem.startswith(f"its experiment's file is <results>/{copy.relative_to(copy.parents[2]).as_posix()}, "
                              f"not {moved.name} in {moved.parent}: a renamed or moved file is not what it claims")


def test_a_damaged_file_and_a_bad_parameter_are_named(copy):
    copy.write_text(copy.read_text()[:100])
    (problem,) = contributed.check_file(copy).problems
    assert problem.startswith("corrupted result file (not valid JSON:") and problem.endswith("rerun the cell, or "
                                                                                             "send the file as the "
                                                                                             "run wrote it")
    with pytest.raises(ValueError, match="unknown parameter 'stand_in' .did you mean 'stand_ins'.. of the psasc"):
        contributed.chapter_for("psasc", {"stand_in": True}, copy.parents[2])


@pytest.mark.slow
def test_the_command_line_prints_a_line_per_problem_and_exits_1(original, copy, capsys):
    args = [arg for name, value in STAND_IN.items() for arg in ("-p", name, json.dumps(value))]
    assert contributed.main(["check", str(original.parents[2]), *args]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if ": note: " not in line]  # this checkout's
    assert printed == [f"{original}: ok, benchmark MNIST, model CNN, method DP-SGD",
                       "1 file(s) checked, 0 with problems"]
    edit(copy, set_in(("final", "train_loss"), 0.1))
    edit(copy, set_in(("epsilon_spent",), 3.5))
    run = subprocess.run([sys.executable, "-m", "dpbook.repro.contributed", "check", str(copy.parents[2]), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if ": note: " not in line]
    assert run.returncode == 1, run.stderr
    problems = [line.split(": ", 2)[1] for line in lines[:-1]]
    assert problems[0] == "non-private statistic(s) final.train_loss, which no DP guarantee covers"
    assert len(problems) == 2
    assert problems[1].startswith("epsilon_spent=3.5, but its configuration's noise (sigma=1.140")
    assert all(line.startswith(f"{copy}: ") for line in lines[:-1])
    assert lines[-1] == "1 file(s) checked, 1 with problems"


def test_the_command_line_refuses_a_missing_folder_and_reports_an_empty_one(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        contributed.main(["check", str(tmp_path / "nowhere")])
    assert stop.value.code == 2
    assert f"argument paths: '{tmp_path / 'nowhere'}' does not exist" in capsys.readouterr().err
    assert contributed.main(["check", str(tmp_path)]) == 1
    assert capsys.readouterr().out == f"no result files (*.json) under {tmp_path}\n"
    with pytest.raises(SystemExit) as stop:  # a misspelt -p stops before any file is read
        contributed.main(["check", str(tmp_path), "-p", "stand_in", "True"])
    assert stop.value.code == 2
    assert "unknown parameter 'stand_in' (did you mean 'stand_ins'?)" in capsys.readouterr().err
