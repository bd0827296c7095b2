"""Every command the README and the book show is run, from the text a reader copies, once, unless another test
runs it already.

The commands are extracted from the files (fenced code blocks and inline code of ``README.md`` and ``book/*.md``):
papermill calls, ``python -m`` entry points and the library example. Each runs from the repository root as typed (an
entry point through its module's ``main``, in this process: :func:`run_module`), with only its sizes made small: the
entry points get the size options of :data:`SMALL`; a notebook sweep gets the notebook's smoke parameters for the
parameters the documentation does not set and for its training length (:data:`SIZES`), and runs with ``--plan``
(every grid point checked against the notebook and its chapter, every execution listed: the executions themselves
are the notebook tests' and the sweep tests'). A documented command that another test runs at the same small sizes
is not run twice: :data:`RUN_ELSEWHERE` names that test (papermill calls: the notebook's own test, and every
documented value is checked against the notebook's parameters below). Two commands that become the same run at small
sizes run once. A documented command of a kind this file does not know fails the test: add a rule, so that the
documentation cannot drift from the code again.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch

from dpbook.repro.params import checked, parameters_cell

from .test_contributed import STAND_IN, contribute
from .test_notebooks import PAPERMILL, shell_text, smoke_parameters

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]
PREFIXES = ("papermill ", ".venv/bin/papermill ", "python -m ", ".venv/bin/python -m ")

#: Notebook parameters that only set how long a documented run trains (epochs, repetitions over seeds): the test
#: trains at the smoke value instead; the documented value is still converted by its parameter check
#: (test_documented_parameters_are_the_notebooks).
SIZES = {"epochs", "seeds"}

#: Size options for entry points that are not notebooks (the documented options come first and still apply).
SMALL = {
    "dpbook.repro.sweep digits": ["--methods", "dcsgd-e", "--epsilons", "4", "--seeds", "1", "--epochs", "1"],
    "dpbook.repro.sweep mnist5k": ["--methods", "dcsgd-e", "--epsilons", "8", "--seeds", "1", "--epochs", "1"],
    "dpbook.repro.bench": ["--repeats", "1", "--skip-memory", "--models", "mnist_cnn", "--batch-sizes", "8",
                           "--method-models", "--profile-models"],
    # 200 plays, one step, 1 process, 64 random canary norms
    "dpbook.audit": ["--trials", "200", "--steps", "1", "--jobs", "1", "--random-norms", "64"],
    "dpbook.audit.one_run": ["--seeds", "1", "--epsilons", "8", "--canaries", "100"],
    # the dry run of one cell of one chapter at B = 2 (tests/test_dry_run.py builds every chapter's sample)
    "dpbook.repro.dry_run": ["psasc", "--sample", "--steps", "1", "--set", "batch_size=2",
                             "--set", "cells=[['mnist', 'dpsgd']]", "--device", "cpu"],
}

#: Documented commands whose small run another test makes (a pattern of the command: the test that runs it).
RUN_ELSEWHERE = {
    r"^(\.venv/bin/)?papermill ": "tests/test_notebooks.py::test_notebook",  # its values: the parameter check below
    r"-m dpbook\.repro\.bench\b": "tests/test_bench.py::test_every_contender_runs_and_a_rerun_resumes",  # --table too
    r"-m dpbook\.repro\.gpu_check\b": "tests/test_dry_run.py::test_the_gpu_check_path_on_the_cpu",  # on the CPU
    # a benchmark's sweep on the cluster and on the debug executor (the local pool runs the documented mnist5k one)
    r"-m dpbook\.repro\.sweep (digits|mnist5k) .*--executor slurm": (
        "tests/test_dispatch.py::test_slurm_from_the_command_line_and_status"),
    r"-m dpbook\.repro\.sweep (digits|mnist5k) .*--executor debug": (
        "tests/test_dispatch.py::test_debug_executor_runs_in_this_process_and_writes_a_manifest"),
    r"-m dpbook\.audit --method dpsgd$": (
        "tests/test_audit.py::test_cli_audits_a_method_over_one_and_two_steps_and_exits_zero"),
    r"-m dpbook\.audit --broken all$": "tests/test_audit.py::test_cli_audits_every_control_on_the_method_it_breaks",
    r"-m dpbook\.audit --method all --json$": "tests/test_audit.py::test_cli_output_resumes_and_bounds_hold_jointly",
    # the digits benchmark's sweep from the command line (its module fixture; the pool of --jobs 2: mnist5k's below)
    r"-m dpbook\.repro\.sweep digits --jobs 2$": (
        "tests/test_cli_cases.py::test_the_vmap_path_from_the_command_line_trains_the_same_runs"),
}

#: Entry points whose documented use exits 1 on purpose (the audit of the broken controls flags them).
EXPECTED_EXIT = {"dpbook.audit": lambda args: 1 if "--broken" in args else 0}


def documented_commands() -> list[tuple[str, str]]:
    """(file, command) for every command line of the documents, backslash continuations joined; a command that
    several files show comes once, with the first file that shows it."""
    found = []
    for doc in DOCUMENTS:
        text = doc.read_text()
        blocks = re.findall(r"^ *```[a-z]*\n(.*?)^ *```", text, flags=re.S | re.M)
        lines = [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]
        lines += re.findall(r"`([^`\n]+)`", re.sub(r"^ *```.*?^ *```", "", text, flags=re.S | re.M))
        found += [(doc.name, " ".join(line.split())) for line in lines if line.startswith(PREFIXES)]
    first: dict[str, str] = {}
    for doc, command in found:
        first.setdefault(command, doc)
    return [(doc, command) for command, doc in first.items()]


def library_examples() -> list[tuple[str, str]]:
    return [(doc.name, block) for doc in DOCUMENTS
            for block in re.findall(r"^```python\n(.*?)^```", doc.read_text(), flags=re.S | re.M)]


def test_the_documents_show_commands():
    kinds = {c.split()[0].split("/")[-1] + (" " + c.split()[2] if " -m " in c else "")
             for _, c in documented_commands()}
    assert {"papermill", "python dpbook.repro.sweep", "python dpbook.repro.bench"} <= kinds, kinds
    assert library_examples()


def small(command: str, tmp_path: Path) -> list[str]:
    """The documented command as an argument list, run from the repository root, at small sizes."""
    words = shlex.split(command)
    if words[0].endswith("papermill"):
        notebook, options = words[1], papermill_options(command)
        smoke = smoke_parameters(ROOT / notebook)
        options |= {name: shell_text(value) for name, value in smoke.items() if name not in options or name in SIZES}
        if "results_dir" in options:  # a run of its own: the notebook tests use (and clean) the smoke directory
            options["results_dir"] = str(tmp_path / "results")
        return [*PAPERMILL, notebook, str(tmp_path / "out.ipynb"),
                *(a for name, text in options.items() for a in ("-p", name, text))]
    module = words[words.index("-m") + 1]
    args = words[words.index("-m") + 2:]
    if module == "dpbook.repro.sweep" and args[0] == "notebook":
        given = {args[i + 1].split("=")[0] for i, a in enumerate(args) if a in ("--grid", "--set")}
        smoke = smoke_parameters(ROOT / args[1]) | ({"results_dir": str(tmp_path / "results")}
                                                     if "results_dir" in smoke_parameters(ROOT / args[1]) else {})
        extra = [a for name, value in smoke.items() if name not in given
                 for a in ("--set", f"{name}={shell_text(value)}")]
        return [sys.executable, "-m", module, *args, *extra, "--output-dir", str(tmp_path / "executed"), "--plan"]
    if module == "dpbook.repro.contributed":
        return contributed_check(args)
    key = f"{module} {args[0]}" if module == "dpbook.repro.sweep" else module
    if key not in SMALL:
        pytest.fail(f"no rule to run the documented command {command!r} at small sizes: add one to SMALL")
    extra = (["--results-dir", str(tmp_path / "results")] if module == "dpbook.repro.sweep" else
             ["--output", str(tmp_path / "record.json")] if "--output" in args else
             ["--output-dir", str(tmp_path / "records")] if module == "dpbook.repro.dry_run" else [])
    # (never the recorded files)
    return [sys.executable, "-m", module, *args, *SMALL[key], *extra]


#: Where a documented check of a reader's folder reads: the folder of :func:`contributed_folder` at run time.
CONTRIBUTED = "<a folder holding a real contributed run>"


def contributed_check(args: list[str]) -> list[str]:
    """The documented check of a reader's folder, run on a folder holding a real contributed run instead
    (:data:`CONTRIBUTED`), with the chapter parameters it ran with after the documented ones (which still apply,
    sizes aside)."""
    options = args[args.index("-p"):] if "-p" in args else []
    sizes = [a for name, value in STAND_IN.items() for a in ("-p", name, repr(value))]
    return [sys.executable, "-m", "dpbook.repro.contributed", args[0], CONTRIBUTED, *options, *sizes]


@pytest.fixture(scope="module")
def contributed_folder(tmp_path_factory) -> str:
    """The DP-PSASC chapter's MNIST-5k cell of tests/test_contributed.py trained once (about 5 s): the folder the
    checks read (a check writes nothing)."""
    return str(contribute(tmp_path_factory.mktemp("contributed") / "results").parents[1])


def papermill_options(command: str) -> dict[str, str]:
    words = shlex.split(command)
    assert all(w == "-p" for w in words[3::3]), f"only -p name value options are expected in {command!r}"
    return dict(zip(words[4::3], words[5::3]))


@pytest.mark.parametrize("doc, command", [(d, c) for d, c in documented_commands() if "papermill " in c])
def test_documented_parameters_are_the_notebooks(doc, command):
    """Every ``-p`` of a documented papermill call names a parameter of the notebook and converts to its type
    (the sizes replaced in the run below included), as the notebook's parameter check will read it."""
    check_parameters(doc, command)


def check_parameters(doc: str, command: str) -> None:
    from papermill.cli import _resolve_type  # what papermill's -p makes of the text

    notebook = json.loads((ROOT / shlex.split(command)[1]).read_text())
    source = next("".join(c["source"]) for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", []))
    declared, annotations = parameters_cell(source)
    for name, text in papermill_options(command).items():
        assert name in declared, f"{doc}: `{command}` sets {name!r}, not a parameter of the notebook"
        checked(name, _resolve_type(text), declared[name], annotations.get(name))


@pytest.mark.parametrize("command, message", [
    ("papermill notebooks/dpsgd_from_scratch.ipynb out.ipynb -p epoch 3", "sets 'epoch', not a parameter"),
    ("papermill notebooks/dpsgd_from_scratch.ipynb out.ipynb -p seeds 0.5", "parameter 'seeds' = 0.5 must be"),
])
def test_a_wrong_documented_parameter_is_caught(command, message):
    with pytest.raises((AssertionError, ValueError), match=message):
        check_parameters("doc", command)


def test_a_documented_command_without_a_rule_is_caught(tmp_path):
    with pytest.raises(pytest.fail.Exception, match="no rule to run the documented command"):
        small("python -m dpbook.tuning --everything", tmp_path)


def distinct_runs(commands: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The documented commands whose small runs differ: two commands that become the same run at small sizes (the
    dry run on the CPU and with ``--device cuda``, which the size options send to the CPU; the same check of a
    reader's folder shown twice) run once."""
    seen, out = set(), []
    for doc, command in commands:
        key = effective(small(command, Path("/tmp/dpbook-documented")))
        if key not in seen:
            seen.add(key)
            out.append((doc, command))
    return out


#: Options that may be given several times, each adding a value (the others: the last one given counts).
REPEATED = ("--set", "--grid", "-p")


def effective(args: list[str]) -> tuple:
    """What a command line asks for: its positional words in order and its options, the last value of an option
    counting (argparse's rule) except for the :data:`REPEATED` ones.

    >>> effective(["python", "-m", "x", "--device", "cuda", "a", "--device", "cpu", "--sample"])
    (('python', '-m', 'x', 'a'), (('--device', 'cpu'), ('--sample', '')))
    """
    positional, options, i = [], {}, 0
    while i < len(args):
        word = args[i]
        if word.startswith("--") or word == "-p":
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
            if word in REPEATED:
                options[word] = (*options.get(word, ()), value)
            else:
                options[word] = value
            i += 2 if value else 1
        else:
            positional.append(word)
            i += 1
    return tuple(positional), tuple(sorted(options.items()))


def run_elsewhere(command: str) -> str | None:
    """The test that runs ``command``'s small run (:data:`RUN_ELSEWHERE`), or None.

    >>> run_elsewhere(".venv/bin/papermill a.ipynb b.ipynb"), run_elsewhere("python -m dpbook.audit --method all")
    ('tests/test_notebooks.py::test_notebook', None)
    """
    return next((test for pattern, test in RUN_ELSEWHERE.items() if re.search(pattern, command)), None)


def test_a_command_run_elsewhere_names_a_test_that_runs_it():

    commands = [c for _, c in documented_commands()]
    for pattern, test in RUN_ELSEWHERE.items():
        assert any(re.search(pattern, c) for c in commands), f"RUN_ELSEWHERE's {pattern!r} matches no document"
        path, function = test.split("::")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert callable(getattr(module, function, None)), f"{test} does not exist"


def test_commands_that_run_alike_run_once():
    commands = [("a.md", "python -m dpbook.repro.dry_run"), ("b.md", "python -m dpbook.repro.dry_run --device cuda"),
                ("c.md", "python -m dpbook.repro.bench")]
    assert [c for _, c in distinct_runs(commands)] == ["python -m dpbook.repro.dry_run", "python -m dpbook.repro.bench"]


@pytest.mark.notebook
@pytest.mark.documented
@pytest.mark.parametrize("doc, command", distinct_runs([(d, c) for d, c in documented_commands()
                                                        if run_elsewhere(c) is None]),
                         ids=lambda x: x if len(x) < 40 else x[:40])
def test_documented_command_runs(doc, command, tmp_path, request, monkeypatch, capsys):
    args = small(command, tmp_path)
    if CONTRIBUTED in args:
        args[args.index(CONTRIBUTED)] = request.getfixturevalue("contributed_folder")
    if "--executor slurm" in command:  # a stand-in cluster runs the jobs here (tests/fake_slurm.py)
        from . import fake_slurm

        monkeypatch.setenv("PATH", f"{fake_slurm.install(tmp_path / 'bin')}:{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_SLURM_DIR", str(tmp_path / "slurm"))
    status = run_module(args, monkeypatch)
    expected = EXPECTED_EXIT.get(args[2], lambda _: 0)(args)
    assert status == expected, f"{doc}: `{command}` exited {status}:\n{capsys.readouterr().err[-3000:]}"


def run_module(args: list[str], monkeypatch) -> int:
    """``python -m MODULE ARG...`` (``args``) in this process, from the repository root (a new interpreter would
    import torch again for every command): the module's ``main`` with the arguments, as its ``__main__`` block calls
    it (checked: :func:`main_block`), and the exit status that block gives (None is 0)."""
    assert args[:2] == [sys.executable, "-m"], args
    module = args[2]
    if importlib.util.find_spec(module).submodule_search_locations:  # a package: python -m runs its __main__
        module += ".__main__"
    assert main_block(Path(importlib.util.find_spec(module).origin).read_text()), f"{module} ends in no main() call"
    monkeypatch.chdir(ROOT)
    try:
        status = importlib.import_module(module).main(args[3:])
    except SystemExit as stop:  # argparse's refusal, or an entry point that exits itself
        status = stop.code
    return 0 if status is None else status


@pytest.mark.parametrize("doc, code", library_examples(), ids=lambda x: x if len(x) < 20 else "example")
def test_library_example_runs(doc, code, capsys):
    """It runs, and prints the same numbers every time (its model's initial weights are seeded)."""
    printed = []
    for before in (1, 2):
        torch.manual_seed(before)  # whatever ran before: the example seeds what it needs itself
        exec(compile(code, f"{doc} example", "exec"), {"__name__": "example"})
        printed.append(capsys.readouterr().out.split()[-2:])
    accuracy, spent = (float(x) for x in printed[0])
    assert 0.5 < accuracy <= 1.0 and spent <= 4.0 + 1e-9
    assert printed[0] == printed[1]


def main_block(source: str) -> bool:
    """Whether a module ends with ``if __name__ == "__main__":`` and one statement that calls ``main()`` with no
    argument (``main()``, ``sys.exit(main())`` or ``raise SystemExit(main())``): what ``python -m`` runs.

    >>> main_block('def main(): pass\\nif __name__ == "__main__":\\n    raise SystemExit(main())\\n')
    True
    >>> main_block('def main(): pass\\nif __name__ == "__main__":\\n    main(["--all"])\\n')
    False
    """
    last = ast.parse(source).body[-1]
    if not (isinstance(last, ast.If) and ast.unparse(last.test) == "__name__ == '__main__'" and len(last.body) == 1):
        return False
    calls = [n for n in ast.walk(last.body[0]) if isinstance(n, ast.Call)]
    return any(ast.unparse(c) == "main()" for c in calls) and len(calls) <= 2
