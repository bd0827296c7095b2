"""Result files coming back from readers' runs: is a contributed file what it claims to be?

A reader runs a chapter's cells on Colab, a laptop or a cluster, and sends the result files back (``book/running.md``,
"Bringing results back"). Before a chapter renders them, :func:`check_file` reads each one and lists its problems:

- **schema**: valid JSON with the keys every record has (:data:`dpbook.repro.results.REQUIRED_KEYS`), the schema
  version this code writes, and the numbers its privacy is checked from (:data:`ACCOUNTING_KEYS`);
- **provenance**: the device, the library versions and the git commit that :func:`dpbook.repro.results.provenance`
  records (:data:`PROVENANCE`); the commit is a full hash and, where this code runs from a clone, a commit of that
  clone; a run from a checkout with uncommitted changes is reported in a note (its commit alone does not say what
  code ran);
- **only private statistics**: no key :func:`dpbook.repro.results.nonprivate_keys` finds (privacy hygiene rule 8);
- **a real run**: not a smoke run on generated data;
- **identity**: the recorded experiment rebuilds an :class:`~dpbook.repro.experiment.Experiment` whose key is the
  file's and whose path is the file's name and place (an edited configuration, a renamed or moved file is caught);
- **privacy**: the training size, sigma, sample rate, steps and delta are those the experiment's plan gives
  (:func:`dpbook.repro.experiment.plan_of`); the noise history the method releases over those steps
  (:meth:`~dpbook.methods.base.Method.planned_history`) is charged within the budget, and ``epsilon_spent`` and the
  per-epoch epsilon curve are what :mod:`dpbook.accounting` recomputes from it (within :data:`RECOMPUTED`, either
  way: a lowered epsilon is caught like a raised one);
- **the paper's cell**: the study is a reproduction chapter's (a module of :mod:`dpbook.repro.papers` with a
  ``Reproduction``), and one of its selected cells plans exactly this run (same dataset, model, method, budget,
  B, epochs, protocol, a point of its grid and a seed it trains), with the chapter's parameters (its defaults,
  the paper's settings, unless others are given, as a reader gives papermill ``-p NAME VALUE``).

The command line checks folders and files, prints one line per problem (the file, the problem, the fix), and exits 1
when any file has a problem::

    python -m dpbook.repro.contributed check data/results/psasc -p stand_ins True

>>> check_file(Path("no-such-result.json"))
Verdict(cell=None, problems=['no such file'], notes=[])
"""

from __future__ import annotations

__all__ = [
    "ACCOUNTING_KEYS", "PROVENANCE", "CELL_FIELDS", "RECOMPUTED", "Verdict", "result_files", "provenance_notes",
    "schema_problems", "provenance_problems", "nonprivate_problems", "smoke_problems", "place_problems",
    "privacy_problems", "chapter_for", "cell_of", "check_file", "check", "parser", "main"
]

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from dpbook import accounting, checks, io
from dpbook.methods import METHODS
from dpbook.repro import papers, params, reproduce, results
from dpbook.repro.experiment import SPENT_TOLERANCE, Experiment, charged_epsilon, plan_of
from dpbook.repro.papers.chapter import Chapter

#: What a record holds besides :data:`dpbook.repro.results.REQUIRED_KEYS`: the numbers its privacy is checked from.
ACCOUNTING_KEYS = ("N", "steps", "sample_rate", "delta_spent")

#: The provenance :func:`dpbook.repro.results.provenance` records: each key and the entries it must hold.
PROVENANCE = {"device": (), "versions": ("python", "torch", "dpbook"), "git": ("commit",)}

#: Relative tolerance of a recorded epsilon against its recomputation: the files round per-epoch values to 6
#: significant digits, and another machine's numpy may differ in the last bits.
RECOMPUTED = 1e-5

#: The fields a cell's base run fixes (its grid varies the hyperparameters, learning rate, optimizer and seed).
CELL_FIELDS = ("dataset", "model", "method", "epsilon", "delta", "epochs", "batch_size", "protocol", "train_size",
               "accountant", "smoke")


class Verdict(NamedTuple):
    """What :func:`check_file` found: the cell (or figure) of the chapter that plans the run, the problems (any one
    rejects the file), and notes (reported, not rejected)."""

    cell: str | None
    problems: list[str]
    notes: list[str] = []


def result_files(paths: Iterable[str | Path]) -> list[Path]:
    """The result files among ``paths``: a file itself, every ``*.json`` under a folder except analysis records
    (``<study>/analysis/``) and hidden folders (``.sweeps``, ``.checkpoints``). A missing path is a
    FileNotFoundError naming it.

    >>> result_files([results.RESULTS_DIR / "audit"])
    []
    """
    found = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or folder; give the folder the result files are in, "
                                    f"e.g. data/results/psasc")
        candidates = [path] if path.is_file() else sorted(path.rglob("*.json"))
        found += [p for p in candidates if path.is_file() or not any(
            part.startswith(".") or part == results.ANALYSIS_DIR for part in p.relative_to(path).parts[:-1])]
    return found


# ----------------------------------------------------------------------------------------------------------------
# The checks, each a list of problems
# ----------------------------------------------------------------------------------------------------------------

def schema_problems(record: Mapping) -> list[str]:
    """The schema version this code writes, and the numbers the privacy checks read.

    >>> schema_problems({"schema": 0, "N": 10})
    ['schema 0, not 1: rerun the cell with this version of dpbook', 'no steps, sample_rate, delta_spent: rerun the \
cell with run_experiment, which records them']
    """
    problems = []
    if record.get("schema") != results.SCHEMA_VERSION:
        problems.append(f"schema {record.get('schema')!r}, not {results.SCHEMA_VERSION}: rerun the cell with this "
                        f"version of dpbook")
    missing = [key for key in ACCOUNTING_KEYS if key not in record]
    if missing:
        problems.append(f"no {', '.join(missing)}: rerun the cell with run_experiment, which records them")
    return problems


def provenance_problems(record: Mapping) -> list[str]:
    """Device, library versions and git commit, as :func:`dpbook.repro.results.provenance` records them.

    >>> provenance_problems({"device": "cpu: x86_64 (2 threads)", "versions": {"python": "3.11", "torch": "2.4"},
    ...                      "git": {"commit": None}})
    ['missing provenance: versions.dpbook, git.commit (a run outside a git clone has none); rerun the cell from a \
clone of the repository with run_experiment, which records them (dpbook.repro.results.provenance)']
    """
    missing = []
    for key, entries in PROVENANCE.items():
        value = record.get(key)
        if not value:
            missing.append(key)
        elif entries:
            missing += [f"{key}.{entry}" for entry in entries if not isinstance(value, Mapping) or not value.get(entry)]
    if missing:
        outside_git = " (a run outside a git clone has none)" if "git.commit" in missing else ""
        return [f"missing provenance: {', '.join(missing)}{outside_git}; rerun the cell from a clone of the "
                f"repository with run_experiment, which records them (dpbook.repro.results.provenance)"]
    commit = str(record["git"]["commit"])
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        return [f"git.commit {commit!r} is not a commit hash (40 hexadecimal digits, as git rev-parse HEAD prints "
                f"it): an edited provenance; send the file as the run wrote it"]
    if results.git("rev-parse", "HEAD") is not None and results.git("cat-file", "-e", f"{commit}^{{commit}}") is None:
        return [f"git.commit {commit} is not a commit of this repository: push the commit the run was made from "
                f"(and fetch it here), or rerun the cell from a clone of this repository"]
    return []


def provenance_notes(record: Mapping) -> list[str]:
    """What the provenance says that does not reject the file: a run from a checkout with uncommitted changes.

    >>> provenance_notes({"git": {"commit": "0" * 40, "dirty": True}})[0][:69]
    'made from a checkout with uncommitted changes to tracked files (git.d'
    """
    git = record.get("git") if isinstance(record.get("git"), Mapping) else {}
    return (["made from a checkout with uncommitted changes to tracked files (git.dirty): its commit alone does not "
             "say what code ran"] if git.get("dirty") else [])


def nonprivate_problems(record: Mapping) -> list[str]:
    """Keys that name non-private statistics (:func:`dpbook.repro.results.nonprivate_keys`).

    >>> nonprivate_problems({"final": {"test_accuracy": 0.9, "train_loss": 0.1}})
    ['non-private statistic(s) final.train_loss, which no DP guarantee covers: result files hold only test-set \
metrics, released quantities and public configuration; rerun the cell without non-private diagnostics']
    """
    leaked = results.nonprivate_keys(record)
    if not leaked:
        return []
    return [f"non-private statistic(s) {', '.join(leaked[:5])}, which no DP guarantee covers: result files hold only "
            f"test-set metrics, released quantities and public configuration; rerun the cell without non-private "
            f"diagnostics"]


def smoke_problems(exp: Experiment) -> list[str]:
    """A smoke run trained on generated data (tests only): no result, whatever its chapter's parameters.

    >>> smoke_problems(Experiment(study="psasc", dataset="mnist", model="mnist_cnn", method="dpsgd", smoke=True))
    ['a smoke run (generated data of the real shapes, for tests) is no result: rerun the cell without smoke=True']
    """
    return ["a smoke run (generated data of the real shapes, for tests) is no result: rerun the cell without "
            "smoke=True"] if exp.smoke else []


def place_problems(path: Path, record: Mapping, exp: Experiment) -> list[str]:
    """The recorded key is the experiment's, and the file is where run_experiment writes it:
    ``<results>/<study>/<method>/<name>`` (:meth:`Experiment.path <dpbook.repro.experiment.Experiment.path>`)."""
    problems = []
    if record["key"] != exp.key():
        problems.append(f"key {record['key']!r} is not its experiment's ({exp.key()!r}): the configuration was edited "
                        f"after the run; rerun the cell instead of editing its file")
    expected = exp.path("").as_posix()
    if not path.resolve().as_posix().endswith("/" + expected):
        problems.append(f"its experiment's file is <results>/{expected}, not {path.name} in {path.parent}: "
                        f"a renamed or moved file is not what it claims; put the files back as the run wrote them")
    return problems


def _training_size(exp: Experiment, record: Mapping) -> int:
    """N of the experiment's training set (the recorded N where the registry cannot know it: NAMES' files)."""
    try:
        return reproduce.training_size(exp)
    except FileNotFoundError:
        return int(record["N"])


def privacy_problems(record: Mapping, exp: Experiment) -> list[str]:
    """The recorded N, sigma, sample rate, steps and delta are the plan's; the history the method releases over
    those steps is charged within the budget; ``epsilon_spent`` and the per-epoch epsilon are what
    :mod:`dpbook.accounting` recomputes from that history (either way, within :data:`RECOMPUTED`)."""
    N = _training_size(exp, record)
    if record["N"] != N:
        return [f"trained on N={record['N']} examples, but its dataset {exp.dataset!r} has N={N}: rerun the cell on "
                f"the dataset's training split"]
    try:
        plan = plan_of(exp, N)
    except ValueError as err:
        return [f"its budget cannot be met: {str(err).splitlines()[0]}"]
    planned = {"sigma": plan.sigma, "sample_rate": plan.sample_rate, "steps": plan.steps,
               "delta_spent": plan.per_run_delta}
    problems = [f"{name}={record[name]!r}, but its configuration's plan gives {value!r}: an edited number, or not "
                f"this configuration's run; rerun the cell" for name, value in planned.items()
                if not math.isclose(record[name], value, rel_tol=SPENT_TOLERANCE)]
    history = METHODS[exp.method].from_plan(plan, **exp.hyperparameters).planned_history(plan.sample_rate,
                                                                                          plan.steps)
    spends = accounting.epsilon_of_history(history, plan.per_run_delta, plan.accountant)
    where = (f"its configuration's noise (sigma={plan.sigma:.6g}, q={plan.sample_rate:.6g}, T={plan.steps}, "
             f"{exp.method}) spends epsilon={spends:.6g} at delta={plan.per_run_delta:.3g} (recomputed with "
             f"dpbook.accounting)")
    charged, target = charged_epsilon(history, plan)
    if charged > target * (1 + SPENT_TOLERANCE):
        problems.append(f"over budget: {where}; its protocol {plan.charged_protocol!r} charges epsilon={charged:.6g}, "
                        f"more than its budget {target:.6g}; rerun the cell")
    if not math.isclose(record["epsilon_spent"], spends, rel_tol=RECOMPUTED):
        problems.append(f"epsilon_spent={record['epsilon_spent']:.6g}, but {where}: an edited number; rerun the cell")
    return problems + _curve_problems(record, history, plan)


def _curve_problems(record: Mapping, history: list, plan) -> list[str]:
    """The per-epoch epsilon (``epochs.epsilon`` at ``epochs.step``) against the history's first steps."""
    epochs = record.get("epochs") if isinstance(record.get("epochs"), Mapping) else {}
    steps, curve = epochs.get("step"), epochs.get("epsilon")
    if curve is None:
        return []
    if not isinstance(steps, list) or not isinstance(curve, list) or len(steps) != len(curve):
        return ["its per-epoch columns epochs.step and epochs.epsilon do not pair up: rerun the cell"]
    for i, (step, recorded) in enumerate(zip(steps, curve)):
        spent = accounting.epsilon_of_history(accounting.first_steps(history, step), plan.per_run_delta,
                                              plan.accountant)
        if not (isinstance(recorded, (int, float)) and math.isclose(recorded, spent, rel_tol=RECOMPUTED)):
            return [f"epochs.epsilon[{i}]={recorded!r} at step {step}, but the history's first {step} steps spend "
                    f"epsilon={spent:.6g} at delta={plan.per_run_delta:.3g}: an edited curve; rerun the cell"]
    return []


# ----------------------------------------------------------------------------------------------------------------
# The paper's cell
# ----------------------------------------------------------------------------------------------------------------

def chapter_for(study: str, parameters: Mapping[str, Any], root: Path) -> Chapter:
    """The chapter of ``study`` with ``parameters`` (its notebook's, as papermill ``-p`` gives them) reading the
    results under ``root``; a ValueError names a study that is no chapter's or a parameter it does not have.

    >>> chapter_for("psasc", {"epochs": 1}, Path("x")).epochs
    1
    >>> chapter_for("psasc", {"epoch": 1}, Path("x"))
    Traceback (most recent call last):
    ...
    ValueError: unknown parameter 'epoch' (did you mean 'epochs'?) of the psasc chapter; give -p only the parameters \
you ran the chapter with
    """
    if study not in papers.chapters():
        raise ValueError(f"study {study!r} is not a reproduction chapter's ({', '.join(papers.chapters())}): "
                         f"only the chapters' cells are checked")
    cls = papers.chapters()[study]
    unknown = params.unknown_parameters(parameters, params.field_names(cls))
    if unknown:
        raise ValueError(f"{unknown} of the {study} chapter; give -p only the parameters you ran the chapter with")
    return cls(**{**parameters, "results_dir": str(root)})


def _differences(exp: Experiment, base: Experiment) -> list[str]:
    return [f"{name} {getattr(exp, name)!r} (the cell's {getattr(base, name)!r})" for name in CELL_FIELDS
            if getattr(exp, name) != getattr(base, name)]


def _off_the_grid(chapter: Chapter, cell, base: Experiment, exp: Experiment) -> list[str]:
    """[] when ``exp`` is one of the runs ``cell`` plans now, else why not (its grid point or its seed)."""
    if exp.key() in {run.key() for run in chapter.cell_runs(cell)}:
        return []
    return [f"its grid point and seed: {reproduce.chosen_point(exp, base)} with seed {exp.seed} is not a run the "
            f"cell plans (a re-run of its best point is one once the grid's files are beside it)"]


def cell_of(chapter: Chapter, exp: Experiment) -> tuple[str | None, str]:
    """(the label of the chapter's selected cell, or figure, whose planned runs include ``exp``, "") or (None, why
    none does: the nearest cell and how it differs, or the cells that wait for another's grid)."""
    nearest, waiting = None, []
    for cell in chapter.selected:
        try:
            found = chapter.spec(cell)
            differences = None if found is None else (_differences(exp, found[0])
                                                      or _off_the_grid(chapter, cell, found[0], exp))
        except (ValueError, FileNotFoundError):
            continue  # a cell that cannot run plans no run
        if found is None:
            waiting.append(f"{chapter.label_text(cell)} waits for the grid of "
                           f"{chapter.label_text(chapter.prerequisite(cell))}")
            continue
        if not differences:
            return chapter.label_text(cell), ""
        if nearest is None or len(differences) < len(nearest[1]):
            nearest = (chapter.label_text(cell), differences)
    if exp.key() in {run.key() for run in chapter.figure_runs()}:
        return "a point of the chapter's figures", ""
    why = [f"the nearest cell, {nearest[0]}, differs in {'; '.join(nearest[1])}"] if nearest else []
    why += [f"{len(waiting)} cell(s) wait for another's grid, e.g. {waiting[0]} (send that grid's result files "
            f"with theirs)"] if waiting else []
    return None, "; ".join(why) or "the chapter selects no cell"


def _results_root(path: Path) -> Path:
    """The results folder of a result file, ``<root>/<study>/<method>/<name>`` (a file too near the file system's
    root to be placed so: its own folder)."""
    parents = path.resolve().parents
    return parents[2] if len(parents) > 2 else path.resolve().parent


def check_file(path: str | Path, parameters: Mapping[str, Any] | None = None, *,
               chapter: Callable[[str, Path], Chapter] | None = None) -> Verdict:
    """Every check of the module docstring on one result file, with the chapter's ``parameters`` (None: its
    defaults, the paper's settings). ``chapter(study, root)`` gives the chapter that reads the results under
    ``root`` (default: :func:`chapter_for`, built for this file alone; :func:`check` builds each once)."""
    path = Path(path)
    chapter = chapter or (lambda study, root: chapter_for(study, dict(parameters or {}), root))
    if not path.is_file():
        return Verdict(None, ["no such file"])
    try:
        record = results.read_result(path)
    except results.CorruptResultError as err:
        reason = str(err).removeprefix(f"{path}: ").split(". It is not counted")[0]
        return Verdict(None, [f"{reason}: rerun the cell, or send the file as the run wrote it"])
    problems = schema_problems(record) + provenance_problems(record) + nonprivate_problems(record)
    try:
        exp = Experiment(**record["experiment"])
    except (TypeError, ValueError) as err:
        return Verdict(None, problems + [f"its experiment does not build an Experiment: {err}"])
    problems += smoke_problems(exp) + place_problems(path, record, exp)
    try:
        problems += privacy_problems(record, exp) if all(key in record for key in ACCOUNTING_KEYS) else []
    except (TypeError, ValueError) as err:
        problems.append(f"its privacy numbers do not read ({err}): rerun the cell")
    try:
        cell, why = cell_of(chapter(exp.study, _results_root(path)), exp)
    except (TypeError, ValueError) as err:
        return Verdict(None, problems + [str(err)])
    if cell is None:
        given = f" run with {dict(parameters)}" if parameters else " at its defaults (the paper's settings)"
        problems.append(f"no cell of the {exp.study} chapter{given} plans this run: {why}; check it with the chapter "
                        f"parameters you ran it with (-p NAME VALUE), or rerun the cell at the paper's settings")
    return Verdict(cell, problems, provenance_notes(record))


def check(paths: Sequence[str | Path], parameters: Mapping[str, Any] | None = None) -> dict[Path, Verdict]:
    """:func:`check_file` of every result file under ``paths`` (:func:`result_files`), each chapter built once per
    study and results folder."""
    built: dict[tuple[str, Path], Chapter] = {}

    def chapter(study: str, root: Path) -> Chapter:
        if (study, root) not in built:
            built[study, root] = chapter_for(study, dict(parameters or {}), root)
        return built[study, root]

    return {path: check_file(path, parameters, chapter=chapter) for path in result_files(paths)}


def parser() -> argparse.ArgumentParser:
    """The command line, every option's domain declared (:mod:`dpbook.checks`)."""
    parser = argparse.ArgumentParser(prog="python -m dpbook.repro.contributed", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check_command = commands.add_parser("check", help="check contributed result files before a chapter renders them")
    check_command.add_argument("paths", nargs="+", type=io.input_file("a result file or a folder of them",
                                                                       folders=True),
                               help="result files, or folders of them (e.g. data/results/psasc)")
    check_command.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                               type=checks.text(),
                               help="a parameter of the chapter you ran, as papermill's -p (e.g. -p stand_ins True)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dpbook.repro.contributed check PATH... [-p NAME VALUE]...``: one line per problem, exit 1 if any."""
    parser_ = parser()
    args = parser_.parse_args(argv)
    parameters = {name: params.text_value(name, value) for name, value in args.p}
    unknown = params.unknown_parameters(parameters, sorted({name for cls in papers.chapters().values()
                                                            for name in params.field_names(cls)}))
    if unknown:
        parser_.error(f"{unknown} of every reproduction chapter; -p takes the parameters you ran the chapter with")
    verdicts = check(args.paths, parameters)
    if not verdicts:
        print(f"no result files (*.json) under {', '.join(map(str, args.paths))}")
        return 1
    for path, (cell, problems, notes) in verdicts.items():
        lines = [f"{path}: {problem}" for problem in problems] or [f"{path}: ok, {cell}"]
        print("\n".join(lines + [f"{path}: note: {note}" for note in notes]))
    failed = sum(bool(verdict.problems) for verdict in verdicts.values())
    print(f"{len(verdicts)} file(s) checked, {failed} with problems")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
