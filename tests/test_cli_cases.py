"""The mistakes and edge cases a new user met (the sweep, the audit, the bench, the chapters' parameters, the
Trainer's checkpoints), each with the message or behaviour it now gets: refused at the door with the option, the
problem and the fix, or done right instead of silently wrong."""

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from dpbook import accounting, checks
from dpbook.audit.__main__ import main as audit_main
from dpbook.data import DatasetNotFoundError, load_digits
from dpbook.methods import METHODS
from dpbook.models import digits_mlp
from dpbook.repro import bench, benchmark_report, papers, params, results
from dpbook.repro.digits_benchmark import BENCHMARK
from dpbook.repro.sweep import __main__ as sweep_cli
from dpbook.train import StaleCheckpointError, Trainer

ROOT = Path(__file__).resolve().parents[1]


def exit_and_message(main, argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stop:
        main(argv)
    return stop.value.code, err.getvalue().strip().splitlines()[-1]


#: (command, its arguments, the message's end) for the cases met at 84e3521, then the other edges of the same options.
REFUSED = [
    (sweep_cli.main, ["digits", "--seeds", "0"], "argument --seeds: must be an integer >= 1 (seeds per cell), got '0'"),
    (sweep_cli.main, ["digits", "--seeds", "-1"], "argument --seeds: must be an integer >= 1 (seeds per cell), "
                                                 "got '-1'"),
    (sweep_cli.main, ["digits", "--epochs", "0"], "argument --epochs: must be an integer >= 1 (epochs per run), "
                                                  "got '0'"),
    (sweep_cli.main, ["digits", "--epsilons", "0"], "argument --epsilons: must be a finite number > 0 (privacy "
                                                    "budgets), got '0'"),
    (sweep_cli.main, ["digits", "--epsilons", "abc"], "argument --epsilons: must be a finite number > 0 (privacy "
                                                      "budgets), got 'abc'"),
    (sweep_cli.main, ["digits", "--epsilons", ""], "argument --epsilons: must be a comma-separated list, each a finite "
                                                     "number > 0 (privacy budgets), got ''"),
    (sweep_cli.main, ["digits", "--methods", "dpsdg"], "argument --methods: unknown method 'dpsdg' (did you mean "
                                                       "'dpsgd'?)"),
    (sweep_cli.main, ["digits", "--jobs", "0"], "argument --jobs: must be an integer >= 1 (runs at once), got '0'"),
    (sweep_cli.main, ["digits", "--per-sample", "vamp"], "argument --per-sample: unknown per-sample engine 'vamp' "
                                                         "(did you mean 'vmap'?); valid: auto, book-keeping, vmap"),
    (sweep_cli.main, ["digits", "--results-dir", "/dev/null/results"], "argument --results-dir: cannot write in "
                                                                        "'/dev/null/results' (NotADirectoryError"),
    (sweep_cli.main, ["status", "no-such/manifest.json"], "argument manifest: 'no-such/manifest.json' does not exist"),
    (sweep_cli.main, ["notebook", "notebooks/nope.ipynb"], "argument notebook: 'notebooks/nope.ipynb' does not exist"),
    (bench.main, ["--repeats", "0"], "argument --repeats: must be an integer >= 1 (interleaved rounds per "
                                     "cell), got '0'"),
    (bench.main, ["--repeats", "-1"], "argument --repeats: must be an integer >= 1 (interleaved rounds per "
                                      "cell), got '-1'"),
    (bench.main, ["--batch-sizes", "0"], "argument --batch-sizes: must be an integer >= 1 (expected batch "
                                         "sizes B), got '0'"),
    (bench.main, ["--table", "no-such.json"], "argument --table: 'no-such.json' does not exist: give the path of a "
                                              "record of this benchmark"),
    (bench.main, ["--table", "README.md"], "argument --table: README.md is not a record of this benchmark "
                                           "(JSONDecodeError"),
    (audit_main, ["--method", "dpsgd", "--output", "."], "argument --output: '.' is a folder, not a file"),
    (audit_main, ["--method", "dpsgd", "--trials", "3"], "argument --trials: must be an integer >= 4 (plays per "
                                                          "world), got '3'"),
]


@pytest.mark.parametrize("main, argv, message", REFUSED, ids=[" ".join(argv) for _, argv, _ in REFUSED])
def test_a_mistake_exits_2_naming_the_option(main, argv, message, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, last = exit_and_message(main, argv)
    assert code == 2 and message in last, last


def test_bench_table_refuses_a_json_file_of_something_else(tmp_path):
    other = tmp_path / "audit.json"
    other.write_text(json.dumps({"parameters": {}, "results": []}))
    code, last = exit_and_message(bench.main, ["--table", str(other)])
    assert code == 2 and "is not a record of this benchmark (ValueError: its 'study' is not 'bench')" in last


def test_a_slurm_config_that_is_not_toml_is_named(tmp_path):
    config = tmp_path / "slurm.toml"
    config.write_text("partition = gpu\n")  # a bare word: TOML wants "gpu"
    code, last = exit_and_message(sweep_cli.main, ["digits", "--executor", "slurm", "--slurm-config", str(config)])
    assert code == 2 and f"argument --slurm-config: {config} is not valid TOML (" in last and "line 1" in last


def test_a_slurm_config_with_a_value_out_of_range_is_named(tmp_path):
    config = tmp_path / "slurm.toml"
    config.write_text("gpus = -1\n")
    code, last = exit_and_message(sweep_cli.main, ["digits", "--executor", "slurm", "--slurm-config", str(config)])
    assert code == 2 and "gpus must be an integer >= 0 (GPUs per array task), got -1" in last


def test_a_results_folder_under_a_file_is_refused_before_any_run(tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("a file where the folder should be")
    code, last = exit_and_message(sweep_cli.main, ["digits", "--results-dir", str(blocker / "digits")])
    assert code == 2 and "argument --results-dir: cannot write in" in last
    assert "choose a folder you can write to" in last


def test_a_run_into_a_folder_it_cannot_write_stops_before_any_run(tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("a file where the folder should be")
    chapter = papers.chapters()["dcsgd"](table="IV", datasets=["mnist"], methods=["dcsgd-e"], epsilons=[1.0],
                                         stand_ins=True, results_dir=str(blocker / "dcsgd"))
    with pytest.raises(ValueError, match=r"^cannot write in .*: choose a folder you can write to \(the chapter's"):
        chapter.run()
    with pytest.raises(ValueError, match=r"^cannot write in .*: choose a folder you can write to \(results_dir"):
        BENCHMARK.run(results_dir=blocker / "digits", methods=["dpsgd"], seeds=1, epochs=1, jobs=1)


def test_noise_multiplier_names_the_target_epsilon_when_it_asks_for_too_little_noise():
    with pytest.raises(ValueError) as refused:
        accounting.noise_multiplier(1e6, 1e-5, sample_rate=0.01, steps=100)
    assert str(refused.value).startswith("target_epsilon=1000000.0 asks for so little noise (sigma = ")
    assert str(refused.value).endswith("use a smaller target_epsilon") and "more noise" not in str(refused.value)


def test_one_method_is_not_called_identical_to_itself():
    assert benchmark_report.identical_counts({}, ["dpsgd"], [1.0], 5) == {}
    assert benchmark_report.identical_table({}, ["dpsgd"], [1.0], 5) == ("The comparison needs two methods or more; "
                                                                        "this run has DP-SGD only.")


@pytest.mark.parametrize("seeds", [0, -1])
def test_a_benchmark_never_reads_zero_seeds_as_the_default(seeds):
    with pytest.raises(ValueError, match=f"seeds must be an integer >= 1, got {seeds}"):
        BENCHMARK.plan(seeds=seeds)
    with pytest.raises(ValueError, match="seeds must be an integer >= 1"):
        benchmark_report.cells(BENCHMARK, seeds=seeds)
    with pytest.raises(ValueError, match="methods is empty"):
        BENCHMARK.plan(methods=[])


@pytest.mark.parametrize("study, name, domain, bad",
                         [(study, name, domain, bad) for study, cls in papers.chapters().items()
                          for name, domain in cls.domains().items() for bad in domain.bad],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_numeric_chapter_parameter_is_checked_before_anything_runs(study, name, domain, bad):
    """papermill's ``-p epochs -3`` reaches the chapter's Reproduction as -3 (or as text): refused with its name."""
    value = papers.chapters()[study].__dataclass_fields__[name]
    typed = {"0": 0, "-1": -1, "1": 1, "2.5": 2.5, "nan": float("nan")}.get(bad, bad)
    given = [typed] if isinstance(value.default, list) or "list" in str(value.type) else typed
    with pytest.raises(ValueError, match=f"^{name} must be "):
        papers.chapters()[study](**{name: given})


def test_every_numeric_chapter_parameter_has_a_domain():
    """(``cells`` lists names, which the chapter checks, with budgets, which its plan checks.)"""
    for study, cls in papers.chapters().items():
        for field in (f for f in cls.__dataclass_fields__.values() if f.name != "cells"):
            numeric = any(kind in str(field.type) for kind in ("int", "float")) and field.type != "bool"
            assert not numeric or field.name in cls.domains(), f"{study}: {field.name} ({field.type}) has no domain"


def test_a_reproduction_without_its_dataset_says_so_once_before_any_run(tmp_path):
    chapter = papers.chapters()["dcsgd"](table="IV", datasets=["mnist"], methods=["dcsgd-e"], epsilons=[1.0],
                                         results_dir=str(tmp_path / "results"), data_root=str(tmp_path / "none"))
    with pytest.raises(DatasetNotFoundError) as missing:
        chapter.run()
    assert "MNIST not found" in str(missing.value) and "-p stand_ins True" in str(missing.value)
    assert not (tmp_path / "results").exists()  # nothing ran


def test_a_notebook_sweep_refuses_a_misspelt_method_before_any_kernel(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "executed"
    code = sweep_cli.main(["notebook", "notebooks/reproduce_dcsgd.ipynb", "--grid", "methods=['dpsdg'],['dcsgd-e']",
                           "--set", "mode=run", "--output-dir", str(out)])
    assert code == 2
    assert "unknown method(s) ['dpsdg'] (did you mean 'dpsgd'?)" in capsys.readouterr().err
    assert not list(out.glob("*.ipynb"))  # no kernel started


def test_a_notebook_sweep_refuses_a_parameter_out_of_range(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = sweep_cli.main(["notebook", "notebooks/reproduce_psasc.ipynb", "--grid", "epochs=0,2", "--set", "mode=run",
                           "--output-dir", str(tmp_path)])
    assert code == 2 and "epochs must be an integer >= 1, got 0" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints: every hyperparameter in the fingerprint

#: A different valid value of each hyperparameter that is not a plain number (None, a word).
OTHER = {"sigma_b": 2.0, "R_0": 2.0, "C_g": 0.5, "sigma_restart": 2.0, "r_num": 0.5, "reading": "scale-then-update"}


def other_value(name, value):
    if name in OTHER:
        return OTHER[name]
    return value + 1 if isinstance(value, int) and not isinstance(value, bool) else value * 0.5


def trainer(method, path) -> Trainer:
    torch.manual_seed(0)
    model = digits_mlp()
    B = len(DIGITS.x_train) if method.full_batch else 256
    return Trainer(model, method, torch.optim.SGD(model.parameters(), lr=0.1), DIGITS, expected_batch_size=B,
                   epochs=1, delta=1e-5, checkpoint=path)


DIGITS = load_digits()
CHANGES = [(name, key) for name, cls in METHODS.items()
           for key in cls(**cls.declaration.audit.hyperparameters).hyperparameters]


@pytest.mark.parametrize("method, name", CHANGES, ids=[f"{m}:{k}" for m, k in CHANGES])
def test_a_checkpoint_refuses_a_run_with_any_other_hyperparameter(method, name, tmp_path):
    cls = METHODS[method]
    given = cls(**cls.declaration.audit.hyperparameters).hyperparameters
    trainer(cls(**given), tmp_path / "run.pt").run(max_steps=1)
    changed = {**given, name: other_value(name, given[name])}
    with pytest.raises(StaleCheckpointError) as refused:
        trainer(cls(**changed), tmp_path / "run.pt").run()
    assert f"hyperparameter {name}: checkpoint {repr(given[name])!r}" in str(refused.value)
    trainer(cls(**given), tmp_path / "run.pt").run(max_steps=2)  # the same configuration resumes


def test_the_first_case_dcsgd_e_resumed_under_another_C_0(tmp_path):
    make = METHODS["dcsgd-e"]
    trainer(make(sigma=1.0, C_0=1.0), tmp_path / "run.pt").run(max_steps=1)
    with pytest.raises(StaleCheckpointError, match=r"hyperparameter C_0: checkpoint '1.0', this run '5.0'"):
        trainer(make(sigma=1.0, C_0=5.0), tmp_path / "run.pt").run()


# ---------------------------------------------------------------------------------------------------------------
# Resume finishes what an uninterrupted sweep does, in whichever phase it was killed

SMALL = ["digits", "--methods", "dpsgd", "--epsilons", "4", "--seeds", "2", "--epochs", "1", "--jobs", "1"]


def recorded(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*.json") if ".sweeps" not in p.parts}


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the sweep's in-process worker sets one


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[set[str], int, Path]:
    """The result files of the small sweep run to its end, how many runs its first phase has, and their folder."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    threads = torch.get_num_threads()
    assert sweep_cli.main([*SMALL, "--results-dir", str(folder)]) == 0
    torch.set_num_threads(threads)
    phase1, _ = BENCHMARK.phase1(**BENCHMARK.plan(methods=["dpsgd"], epsilons=[4.0], seeds=2, epochs=1))
    return recorded(folder), len({run.key() for run in phase1}), folder


def test_the_vmap_path_from_the_command_line_trains_the_same_runs(uninterrupted, tmp_path, one_thread):
    """``--per-sample vmap``: the same result files (the path is not part of a run's key), the same accuracies and
    losses to float rounding, and the manifest keeps the path for ``resume``."""
    expected, _, folder = uninterrupted
    assert sweep_cli.main([*SMALL, "--per-sample", "vmap", "--results-dir", str(tmp_path)]) == 0
    assert recorded(tmp_path) == expected
    manifest = json.loads(next((tmp_path / ".sweeps").glob("*/manifest.json")).read_text())
    assert manifest["run_kwargs"]["per_sample"] == "vmap"
    for name in expected:
        ours, theirs = (results.read_result(f / name)["final"] for f in (tmp_path, folder))
        assert ours.keys() == theirs.keys()
        for key, value in theirs.items():
            assert ours[key] == pytest.approx(value, rel=1e-3, abs=1e-3), (name, key)


def killed_after(runs: int, monkeypatch):
    """Make the sweep's in-process runner stop the sweep (as Ctrl-C or kill would) when it starts run ``runs + 1``."""
    from dpbook.repro import sweep

    started, real = [], sweep.run_one

    def run_one(exp, kwargs, wait=False):
        if len(started) == runs:
            raise KeyboardInterrupt
        started.append(exp)
        return real(exp, kwargs, wait)

    monkeypatch.setattr(sweep, "run_one", run_one)


@pytest.mark.parametrize("where", ["in phase 1", "after phase 1", "in phase 2"])
def test_resume_after_a_kill_finishes_the_same_runs(where, uninterrupted, tmp_path, monkeypatch, capsys, one_thread):
    expected, phase1, _ = uninterrupted
    runs = {"in phase 1": 3, "after phase 1": phase1, "in phase 2": phase1 + 1}[where]
    killed_after(runs, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sweep_cli.main([*SMALL, "--results-dir", str(tmp_path)])
    monkeypatch.undo()
    assert len(recorded(tmp_path)) == runs
    manifest = next((tmp_path / ".sweeps").glob("*/manifest.json"))
    capsys.readouterr()
    assert sweep_cli.main(["status", str(manifest)]) == 1
    status = capsys.readouterr().out
    if where == "in phase 1":  # the re-runs are not known yet, and status says which cells wait
        assert "phase 2: 1 cell(s) wait for their grid to finish before their re-runs are planned: dpsgd eps=4" \
            in status
    else:  # every re-run is counted, planned or done
        assert f": {len(expected)} run(s), " in status.splitlines()[0]
    assert sweep_cli.main(["resume", str(manifest), "--jobs", "1"]) == 0
    assert recorded(tmp_path) == expected
    assert sweep_cli.main(["status", str(manifest)]) == 0
    assert f": {len(expected)} run(s), done {len(expected)}" in capsys.readouterr().out


def test_a_moved_results_folder_keeps_its_sweeps(uninterrupted, tmp_path, capsys, one_thread):
    """A results folder moved with its .sweeps: status finds every run done where the folder now is, resume trains
    nothing and makes nothing at the old place."""
    expected, _, folder = uninterrupted
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(folder, old)
    old.rename(new)
    manifest = next((new / ".sweeps").glob("*/manifest.json"))
    capsys.readouterr()
    assert sweep_cli.main(["status", str(manifest)]) == 0
    assert f": {len(expected)} run(s), done {len(expected)}" in capsys.readouterr().out
    assert sweep_cli.main(["resume", str(manifest), "--jobs", "1"]) == 0
    assert "done 0, skipped" in capsys.readouterr().out
    assert recorded(new) == expected and not old.exists()


def test_a_manifest_whose_results_folder_is_gone_names_both_places(tmp_path, one_thread):
    """A manifest kept apart from its results folder reads the folder where it was while that is there; once that
    is gone, status and resume stop, naming both places, and train nothing anywhere."""
    from dpbook.repro import sweep
    from dpbook.repro.experiment import Experiment

    run = Experiment(study="apart", dataset="digits", model="digits_mlp", method="dpsgd", hyperparameters={"C": 1.0},
                     epsilon=4.0, epochs=1, batch_size=256, lr=0.05)
    summary = sweep.run_all([run], results_dir=tmp_path / "results", progress=False)
    apart = tmp_path / "apart" / "manifest.json"
    apart.parent.mkdir()
    shutil.copy(summary["manifest"], apart)
    assert sweep_cli.main(["status", str(apart)]) == 0
    shutil.rmtree(tmp_path / "results")
    for command in ("status", "resume"):
        code, last = exit_and_message(sweep_cli.main, [command, str(apart)])
        assert code == 2 and f"{apart}: the sweep's results folder is gone: it was {tmp_path / 'results'}" in last
        assert f"a results folder it moved with ({tmp_path.parent})" in last
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["apart", "manifest.json"]


def test_a_sweep_with_nothing_to_run_exits_2_with_every_reason_in_full(tmp_path, capsys):
    code = sweep_cli.main(["digits", "--methods", "dpsgd", "--epsilons", "1e9", "--seeds", "1", "--epochs", "1",
                           "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "nothing to run: every cell above is unreachable" in err
    assert "unreachable dpsgd eps=1e+09 rdp: " in err
    assert "Use a larger epsilon, a smaller grid or protocol='lt'." in err  # the reason in full, not cut


@pytest.mark.parametrize("cpus, memory_gb, cap, why", [
    (2, 64.0, 2, "this machine has 2 CPU(s) and 64.0 GB of memory available (0.65 GB a worker)"),
    (16, 2.0, 3, "this machine has 16 CPU(s) and 2.0 GB of memory available (0.65 GB a worker)"),
    (4, None, 4, "this machine has 4 CPU(s)"),
])
def test_jobs_beyond_the_machine_are_capped_saying_so(cpus, memory_gb, cap, why, monkeypatch):
    from dpbook.repro import sweep

    monkeypatch.setattr(sweep.os, "cpu_count", lambda: cpus)
    monkeypatch.setattr(sweep, "_available_memory_gb", lambda: memory_gb)
    assert sweep.worker_cap(1000) == (cap, f"--jobs 1000 capped to {cap}: {why}")
    assert sweep.worker_cap(1) == (1, "")


def test_a_manifest_of_an_older_dpbook_says_how_to_go_on(tmp_path):
    old = tmp_path / "manifest.json"
    old.write_text(json.dumps({"kind": "runs", "executor": "local", "results_dir": str(tmp_path), "run_kwargs": {},
                               "slurm": None, "entries": []}))
    code, last = exit_and_message(sweep_cli.main, ["status", str(old)])
    assert code == 2 and "was written by an older dpbook (manifest version 1" in last
    assert "run the sweep's own command again" in last


# ---------------------------------------------------------------------------------------------------------------
# papermill's parameters: each notebook's parameters cell writes every numeric parameter's range

def parameters_of(path: Path) -> tuple[str, dict, dict]:
    notebook = json.loads(path.read_text())
    source = next("".join(c["source"]) for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", []))
    return (source, *params.parameters_cell(source))


NOTEBOOKS = {p.stem: parameters_of(p) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))}


def numeric(default) -> bool:
    kind = repr(params.infer_type(default))
    return not isinstance(default, bool) and ("int" in kind or "float" in kind) and "Any" not in kind


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_every_numeric_notebook_parameter_declares_its_range(stem):
    """A reproduction chapter's ranges are its Reproduction's (checked in the cell after the check); every other
    notebook writes them in its parameters cell (``epochs: Count = 8``, :mod:`dpbook.checks`'s ranges)."""
    _, declared, annotations = NOTEBOOKS[stem]
    chapter = papers.chapters().get(stem.removeprefix("reproduce_"))
    ranges = chapter.domains() if chapter is not None else {}
    missing = [name for name, default in declared.items() if numeric(default) and name not in ranges
               and name != "cells" and checks.domain_of(annotations.get(name)) is None]
    assert not missing, f"{stem}: numeric parameters without a range (e.g. epochs: Count = 8): {missing}"


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_papermill_reads_every_parameter_of_every_notebook(stem, caplog):
    """papermill's own reader of a parameters cell finds every parameter, so that papermill never warns "Passed
    unknown parameter" for one it then applies (its reader knows no annotation written with ``|``, nor a line with
    a second ``=``, in a comment: the cells write ``Optional[...]`` and ``Union[...]``)."""
    import nbformat
    from papermill.translators import PythonTranslator

    source, declared, _ = NOTEBOOKS[stem]
    seen = {p.name for p in PythonTranslator.inspect(nbformat.v4.new_code_cell(source))}
    assert not [name for name in declared if name not in seen], caplog.text


NOTEBOOK_CASES = [(stem, name, bad) for stem, (_, declared, annotations) in NOTEBOOKS.items()
                  for name, annotation in annotations.items() if checks.domain_of(annotation) is not None
                  for bad in checks.domain_of(annotation).bad]


@pytest.mark.parametrize("stem, name, bad", NOTEBOOK_CASES, ids=[f"{s}:{n}={b!r}" for s, n, b in NOTEBOOK_CASES])
def test_a_notebook_parameter_outside_its_range_stops_at_the_check_cell(stem, name, bad):
    """What ``papermill NOTEBOOK out.ipynb -p NAME BAD`` gives the check cell, refused there with the parameter's
    name, before any work."""
    from papermill.cli import _resolve_type
    from papermill.translators import PythonTranslator

    source, declared, _ = NOTEBOOKS[stem]
    given = _resolve_type(bad)  # what papermill's -p makes of the text, and the cell it injects
    namespace = {**declared, name: given}
    cells = ["setup", source, PythonTranslator.codify({name: given}), params.CHECK_CELL]
    with pytest.raises(ValueError, match=f"^(parameter '{name}' = .* must be|{name} must be)"):
        params.notebook_parameters(namespace, cells)
