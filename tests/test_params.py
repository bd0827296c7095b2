"""Notebook parameters (dpbook.repro.params): every form papermill, the sweep CLI and a notebook's defaults give."""

from __future__ import annotations

import pytest

from dpbook.repro.params import (
    CHECK_CELL,
    assignments,
    check_known,
    clean_float,
    listing,
    mapping,
    notebook_parameters,
    per_dataset,
)


@pytest.mark.parametrize("value, expected", [
    (["mnist", "svhn"], ["mnist", "svhn"]), (("mnist",), ["mnist"]),
    ("['mnist', 'svhn']", ["mnist", "svhn"]), (" ['mnist'] ", ["mnist"]), ("('a', 'b')", ["a", "b"]),
    ("mnist,svhn", ["mnist", "svhn"]), ("mnist, svhn,", ["mnist", "svhn"]), ("mnist", ["mnist"]),
    (3.0, [3.0]), (None, [None]), ("", []), ([["mnist", 3.0, "dpdr"]], [["mnist", 3.0, "dpdr"]]),
])
def test_listing_accepts_every_form_of_a_list_parameter(value, expected):
    assert listing(value) == expected


def test_listing_casts_every_element():
    assert listing("1, 2.5", float) == [1.0, 2.5]
    assert listing([4, " 8 "], str) == ["4", "8"]
    assert listing("[0.1, 0.30000000000000004]", clean_float) == [0.1, 0.3]


def test_per_dataset_values():
    assert mapping("{'mnist': 64}") == {"mnist": 64} and mapping("adam") == "adam"
    assert per_dataset(None, "mnist", 256) == 256
    assert per_dataset(128, "mnist", 256) == 128
    assert per_dataset({"mnist": 64}, "mnist", 256) == 64 and per_dataset({"mnist": 64}, "svhn", 256) == 256
    assert per_dataset(" {'svhn': 32} ", "svhn", 256) == 32


def test_unknown_names_are_refused_with_the_valid_ones():
    check_known("method(s)", ["dpsgd", "dpdr"], {"dpsgd": 1, "dpdr": 2})
    check_known("method(s)", [], {})
    with pytest.raises(ValueError, match=r"unknown method\(s\) \['sgd'\] \(did you mean 'dpsgd'\?\); "
                                         r"valid: \['dpsgd', 'dpdr'\]"):
        check_known("method(s)", ["dpsgd", "sgd", "sgd"], ["dpsgd", "dpdr"])


def test_clean_floats_give_one_result_key_per_grid_value():
    assert clean_float(0.1 * 3) == 0.3 and clean_float("1e-3") == 0.001 and clean_float(2) == 2.0
    assert clean_float(1 / 3) == 0.333333 and isinstance(clean_float(1), float)


# --- notebook_parameters: the check cell every notebook runs right after its parameters cell -------------------

PARAMETERS = '''seeds = [0, 1]          # a list of int
methods = ["dpsgd"]     # a list of str
epsilon = 4.0
epochs = 2
batch_size: dict[str, int] | int | None = None   # annotated: one value, a per-dataset dict, or None
smoke = False
'''


def run_check(injected: dict | None) -> dict:
    """What the kernel holds after the parameters cell and papermill's injected cell ran, then the check."""
    from papermill.translators import translate_parameters

    namespace: dict = {}
    exec(PARAMETERS, namespace)
    cells = ["", PARAMETERS]
    if injected is not None:
        cell = translate_parameters("python3", "python", injected)
        exec(cell, namespace)
        cells.append(cell)
    namespace["In"] = cells + [CHECK_CELL]
    notebook_parameters(namespace)
    return namespace


@pytest.mark.parametrize("text, expected", [
    ("[3, 4]", [3, 4]), ("(3, 4)", [3, 4]), ("3, 4", [3, 4]), ("3", [3]), ([3, 4], [3, 4]), (3, [3]),
    ("[3.0]", [3]),
])
def test_a_list_parameter_in_every_form(text, expected):
    assert run_check({"seeds": text})["seeds"] == expected


def test_single_names_and_text_numbers_become_the_defaults_types():
    ns = run_check({"methods": "dpsgd", "epsilon": "8", "epochs": 3.0, "smoke": "true"})
    assert ns["methods"] == ["dpsgd"] and ns["epsilon"] == 8.0 and isinstance(ns["epsilon"], float)
    assert ns["epochs"] == 3 and isinstance(ns["epochs"], int) and ns["smoke"] is True
    assert run_check({"methods": "dpsgd, dpdr"})["methods"] == ["dpsgd", "dpdr"]


def test_an_annotated_parameter_takes_each_of_its_forms():
    assert run_check({"batch_size": "{'mnist': 32}"})["batch_size"] == {"mnist": 32}
    assert run_check({"batch_size": {"mnist": "32"}})["batch_size"] == {"mnist": 32}  # -y / -f give dicts
    assert run_check({"batch_size": 64})["batch_size"] == 64
    assert run_check({"batch_size": None})["batch_size"] is None


def test_the_sweeps_values_read_through_params_reach_the_notebook_as_papermills_do():
    """``--grid``/``--set`` values (params.assignments) convert like the same text given to papermill."""
    grid = assignments(["seeds=[0, 1],3", "methods=dpsgd, ['dpsgd', 'dpdr']"], lists=True)
    fixed = assignments(["smoke=true", "batch_size={'mnist': 32}", "epsilon=8"], lists=False)
    assert grid == {"seeds": [[0, 1], 3], "methods": ["dpsgd", ["dpsgd", "dpdr"]]}
    assert fixed == {"smoke": True, "batch_size": {"mnist": 32}, "epsilon": 8}
    ns = run_check({**fixed, "seeds": grid["seeds"][1], "methods": grid["methods"][1]})
    assert ns["seeds"] == [3] and ns["methods"] == ["dpsgd", "dpdr"] and ns["batch_size"] == {"mnist": 32}
    assert ns["smoke"] is True and ns["epsilon"] == 8.0
    with pytest.raises(ValueError, match=r"parameter 'seeds' = '\[0, 1' is not a Python literal"):
        assignments(["seeds=[0, 1"], lists=True)
    with pytest.raises(ValueError, match="expected name=value, got 'seeds'"):
        assignments(["seeds"], lists=False)


def test_without_papermill_the_defaults_stand():
    ns = run_check(None)
    assert ns["seeds"] == [0, 1] and ns["batch_size"] is None


@pytest.mark.parametrize("given, message", [
    ({"seeds": "[0, 1.5]"}, r"parameter 'seeds' = '\[0, 1.5\]' must be list\[int\]: item 1: .*fractional"),
    ({"seeds": "a, b"}, r"parameter 'seeds' = 'a, b' must be list\[int\]: item 0: .*integer"),
    ({"seeds": "[0, 1"}, r"parameter 'seeds' = '\[0, 1' is not a Python literal .*write it like \[0, 1\]"),
    ({"epsilon": "four"}, r"parameter 'epsilon' = 'four' must be float"),
    ({"epochs": 2.5}, r"parameter 'epochs' = 2.5 must be int"),
    ({"batch_size": "{'mnist': 'x'}"}, r"parameter 'batch_size' = .* must be dict\[str, int\] \| int \| None"),
    ({"epoch": 1}, r"unknown parameter 'epoch' \(did you mean 'epochs'\?\); this notebook's parameters: "
                   r"\['seeds', 'methods', 'epsilon', 'epochs', 'batch_size', 'smoke'\]"),
    ({"sedes": 1, "xyz": 2}, r"unknown parameters 'sedes' \(did you mean 'seeds'\?\), 'xyz'; this notebook's"),
])
def test_a_wrong_value_or_name_is_refused_naming_the_parameter(given, message):
    with pytest.raises(ValueError, match=message):
        run_check(given)


def test_the_check_must_follow_the_parameters_cell():
    with pytest.raises(RuntimeError, match="must be the parameters cell"):
        notebook_parameters({"In": ["", "x = 1\nprint(x)", CHECK_CELL]})
    with pytest.raises(RuntimeError, match="run the notebook.s cells in order"):
        notebook_parameters({})


NOTEBOOK_CELLS = [("parameters", PARAMETERS), (None, CHECK_CELL),
                  (None, "print(repr((seeds, methods, epsilon, epochs, batch_size, smoke)))")]


@pytest.fixture(scope="module")
def tiny_notebook(tmp_path_factory):
    import nbformat

    nb = nbformat.v4.new_notebook()
    for tag, source in NOTEBOOK_CELLS:
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"tags": [tag]} if tag else {}))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path_factory.mktemp("nb") / "tiny.ipynb"
    nbformat.write(nb, path)
    return path


def papermill(notebook, *args) -> tuple[int, str]:
    """papermill's command line, as a user types it; the printed parameters (or the error) of the run."""
    import json
    import subprocess

    from .test_notebooks import PAPERMILL

    out = notebook.with_name("out.ipynb")
    run = subprocess.run([*PAPERMILL, str(notebook), str(out), *args], capture_output=True, text=True,
                         cwd=notebook.parent)
    cells = json.loads(out.read_text())["cells"] if out.exists() else []
    texts = ["".join(o.get("text", "")) + "".join(o.get("evalue", "")) for c in cells for o in c.get("outputs", [])]
    return run.returncode, "\n".join(texts)


@pytest.mark.slow
def test_papermill_p_y_and_f_give_the_same_parameters(tiny_notebook):
    expected = "([3, 4], ['dpsgd'], 8.0, 1, {'mnist': 32}, True)"
    code, printed = papermill(tiny_notebook, "-p", "seeds", "[3, 4]", "-p", "methods", "dpsgd", "-p", "epsilon", "8",
                              "-p", "epochs", "1", "-p", "batch_size", "{'mnist': 32}", "-p", "smoke", "True")
    assert code == 0 and expected in printed, printed
    code, printed = papermill(tiny_notebook, "-y", "{seeds: [3, 4], methods: dpsgd, epsilon: 8, epochs: 1, "
                                               "batch_size: {mnist: 32}, smoke: true}")
    assert code == 0 and expected in printed, printed
    (tiny_notebook.parent / "params.yaml").write_text("seeds: 3, 4\nmethods: [dpsgd]\nepsilon: 8.0\nepochs: 1\n"
                                                      "batch_size: {mnist: '32'}\nsmoke: yes\n")
    code, printed = papermill(tiny_notebook, "-f", "params.yaml")
    assert code == 0 and expected in printed, printed


def test_papermill_with_a_misspelt_parameter_stops_naming_it(tiny_notebook):
    code, printed = papermill(tiny_notebook, "-p", "epoch", "1")
    assert code != 0 and "unknown parameter 'epoch' (did you mean 'epochs'?)" in printed, printed


# --- the values a user can write: quotes, empty values, repeated values -------------------------------------------

def test_a_quoted_value_is_one_text_without_its_quotes():
    """The quoting rule of --grid and --set: a comma inside quotes or brackets does not split, quotes are removed."""
    assert assignments(["results_dir='runs/q,1',other"], lists=True) == {"results_dir": ["runs/q,1", "other"]}
    assert assignments(["mode='render'", 'tag="a, b"'], lists=False) == {"mode": "render", "tag": "a, b"}
    assert assignments(["epsilons=[1, 2],[4]"], lists=True) == {"epsilons": [[1, 2], [4]]}


@pytest.mark.parametrize("item, lists, message", [
    ("epochs=", True, r"--grid 'epochs=' gives epochs no value: write epochs=v1,v2 \(quote a text with a comma"),
    ("mode= ", False, r"--set 'mode= ' gives mode no value: write mode=value"),
    ("seed=1,2,1", True, r"--grid seed=1,2,1 repeats 1: give each value once"),
])
def test_an_empty_or_repeated_grid_value_is_refused_naming_the_option(item, lists, message):
    with pytest.raises(ValueError, match=message):
        assignments([item], lists=lists)


@pytest.mark.parametrize("text, message", [
    ("[]", r"seeds is an empty list: give at least one value"),
    ("[0, 0]", r"seeds \[0, 0\] repeats 0: give each value once"),
])
def test_an_empty_or_repeated_list_of_seeds_is_refused(text, message):
    from dpbook.checks import Seed
    from dpbook.repro.params import checked

    with pytest.raises(ValueError, match=message):
        checked("seeds", text, [0, 1], list[Seed])
    assert checked("seeds", "[0, 3]", [0, 1], list[Seed]) == [0, 3]


def test_a_chapter_refuses_a_repeated_budget():
    from dpbook.repro.papers import dpdr

    with pytest.raises(ValueError, match=r"epsilons \[1.0, 1.0\] repeats 1.0: give each value once"):
        dpdr.Reproduction(epsilons=[1.0, 1.0])
