"""The papers' tables transcribed under ``data/paper/``: schema, canonical names, and the consistency the papers imply.

The numbers themselves are not re-typed here. The tests check the structure of every file, and the relations
between cells that the papers state or imply (a column repeated in another table, a full grid of settings x
methods, the cell counts of each table).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from dpbook.methods import METHODS as REGISTERED
from dpbook.models import MODELS as MODEL_BUILDERS
from dpbook.tasks import TASKS

PAPER_DIR = Path(__file__).resolve().parents[1] / "data" / "paper"

PAPERS = {"dcsgd", "dpdr", "psasc"}
READING_PREFIX = {"dcsgd": "DCSGD", "dpdr": "DPDR", "psasc": "PSASC"}  # ids of the Readings (book/readings_*.md)
METHODS = set(REGISTERED)  # a row names a method of the registry, a dataset of the task registry, a registered model
DATASETS = set(TASKS)
MODELS = set(MODEL_BUILDERS)
OPTIMIZERS = {"adam", "sgd", "sgd-momentum"}
PROTOCOLS = {"none", "rdp", "lt"}
QUANTITIES = {"sigma_perp", "sigma_alpha", "sigma_g"}
METRICS = {"test_accuracy": "%", "time_seconds": "s", "noise_multiplier": "", "hyperparameters": "",
           "candidates": ""}

TOP_KEYS = {"paper", "table", "title", "source", "metric", "units", "statistic", "notes", "rows"}
ROW_KEYS = {"model", "dataset", "epsilon", "delta", "method", "optimizer", "protocol", "value", "std", "G", "s",
            "bold", "quantity"}
HYPER_KEYS = {"dataset", "model", "N", "batch_size", "epochs", "r", "C", "epsilon", "delta"}
# A table of tuning candidates: a hyperparameter's values (Table VII) or a method's tuned symbols (Table VI).
CANDIDATE_KEYS = ({"hyperparameter", "values"}, {"method", "hyperparameters"})
# Keys that are measurements or annotations of a cell rather than coordinates identifying it.
NON_KEY = {"value", "std", "bold", "G", "s"}

ROMAN = {"I": 1, "II": 2, "III": 3, "IV": 4, "V": 5, "VI": 6, "VII": 7, "VIII": 8}

# (paper, table id) -> number of cells printed in the table.
CELLS = {
    ("dcsgd", "I"): 20, ("dcsgd", "II"): 90, ("dcsgd", "III"): 90, ("dcsgd", "IV"): 90, ("dcsgd", "V"): 90,
    ("dcsgd", "VI"): 5, ("dcsgd", "VII"): 5, ("dcsgd", "VIII"): 84, ("dpdr", "1"): 36, ("dpdr", "2"): 18,
    ("psasc", "II"): 5, ("psasc", "III"): 25,
}

FILES = sorted(PAPER_DIR.glob("*.json"))


def _load(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)


TABLES = {path.stem: _load(path) for path in FILES}


def table(paper: str, tid: str) -> dict:
    found = [t for t in TABLES.values() if t["paper"] == paper and t["table"] == tid]
    assert len(found) == 1, f"expected one file for {paper} Table {tid}, found {len(found)}"
    return found[0]


def cell_key(row: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in row.items() if k not in NON_KEY))


def setting(row: dict) -> tuple:
    """The row of the printed table a cell sits in (everything but the method column and the cell's numbers)."""
    return tuple(sorted((k, v) for k, v in row.items() if k not in NON_KEY | {"method", "optimizer"}))


def by_key(rows, drop=()) -> dict:
    return {tuple(p for p in cell_key(r) if p[0] not in drop): r for r in rows}


def is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ----------------------------------------------------------------------------------------------------------------
# (a) Schema
# ----------------------------------------------------------------------------------------------------------------

def test_every_expected_table_is_present():
    assert {(t["paper"], t["table"]) for t in TABLES.values()} == set(CELLS)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_top_level_schema(name):
    t = TABLES[name]
    assert set(t) == TOP_KEYS
    assert t["paper"] in PAPERS
    assert t["metric"] in METRICS and t["units"] == METRICS[t["metric"]]
    for key in ("table", "title", "source", "statistic"):
        assert isinstance(t[key], str) and t[key].strip()
    assert isinstance(t["notes"], list) and all(isinstance(n, str) and n for n in t["notes"])
    assert f"Table {t['table']}" in t["source"] and "arXiv" in t["source"]
    # File name <paper>_table<arabic id>.json, the id printed as in the paper (roman or arabic).
    number = ROMAN.get(t["table"]) or int(t["table"])
    assert name == f"{t['paper']}_table{number}"
    # Readings are cited by their id in the book's Readings chapter, e.g. "[DCSGD-32] ...", with the paper's prefix.
    for note in t["notes"]:
        if note.startswith("["):
            assert re.match(rf"\[{READING_PREFIX[t['paper']]}-\d+\] ", note), note
    assert isinstance(t["rows"], list) and t["rows"]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_rows_use_known_keys_canonical_names_and_finite_numbers(name):
    t = TABLES[name]
    hyper = t["metric"] == "hyperparameters"
    for row in t["rows"]:
        if t["metric"] == "candidates":
            assert set(row) in CANDIDATE_KEYS, row
            assert row.get("method", "dpsgd") in METHODS, row
            assert all(is_number(v) and v > 0 for v in row.get("values", [])), row
        elif hyper:
            assert set(row) == HYPER_KEYS, row
            assert all(is_number(row[k]) for k in HYPER_KEYS - {"dataset", "model"}), row
        else:
            assert set(row) <= ROW_KEYS, set(row) - ROW_KEYS
            assert "value" in row and is_number(row["value"]), row
            for k in ("std", "G", "s", "epsilon", "delta"):
                if k in row:
                    assert is_number(row[k]) and row[k] > 0, row
            if "bold" in row:
                assert row["bold"] is True, "bold is either true or omitted"
            for key, allowed in (("optimizer", OPTIMIZERS), ("protocol", PROTOCOLS), ("quantity", QUANTITIES),
                                 ("method", METHODS)):
                if key in row:
                    assert row[key] in allowed, row
        for key, allowed in (("dataset", DATASETS), ("model", MODELS)):
            if key in row:
                assert row[key] in allowed, row


@pytest.mark.parametrize("name", sorted(TABLES))
def test_no_duplicate_cells(name):
    rows = TABLES[name]["rows"]
    keys = [repr(cell_key(r)) for r in rows]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_cell_counts(name):
    t = TABLES[name]
    assert len(t["rows"]) == CELLS[(t["paper"], t["table"])]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_table_is_a_full_grid_of_settings_by_methods(name):
    t = TABLES[name]
    if t["metric"] in ("hyperparameters", "noise_multiplier", "candidates"):
        return
    settings = {setting(r) for r in t["rows"]}
    methods = {(r["method"], r.get("optimizer")) for r in t["rows"]}
    assert len(settings) * len(methods) == len(t["rows"])


# ----------------------------------------------------------------------------------------------------------------
# (b) Consistency the papers imply
# ----------------------------------------------------------------------------------------------------------------

def test_dcsgd_table_shapes():
    for tid, n_settings, n_methods in (("II", 18, 5), ("III", 18, 5), ("IV", 18, 5), ("V", 18, 5), ("VIII", 21, 4)):
        rows = table("dcsgd", tid)["rows"]
        assert len({setting(r) for r in rows}) == n_settings
        assert len({r["method"] for r in rows}) == n_methods
    assert {r["method"] for r in table("dcsgd", "VIII")["rows"]} == {"dpsgd", "dcsgd-p", "dcsgd-e", "autos"}


def test_dcsgd_accuracy_tables_have_one_optimizer_and_protocol_each():
    expected = {"II": ("adam", "lt"), "III": ("adam", "rdp"), "IV": ("adam", "none"), "V": ("sgd-momentum", "none"),
                "VIII": ("adam", "none")}
    for tid, (optimizer, protocol) in expected.items():
        rows = table("dcsgd", tid)["rows"]
        assert {(r["optimizer"], r["protocol"]) for r in rows} == {(optimizer, protocol)}


def test_dcsgd_tuning_cost_tables_share_settings_and_tables_iv_v_share_settings():
    settings = lambda tid: {setting(r) for r in table("dcsgd", tid)["rows"]}  # noqa: E731
    strip = lambda ss: {tuple(p for p in s if p[0] != "protocol") for s in ss}  # noqa: E731
    assert strip(settings("II")) == strip(settings("III"))
    assert strip(settings("IV")) == strip(settings("V"))
    # Table VIII = Table IV's settings + the new LSTM/NAMES rows.
    extra = strip(settings("VIII")) - strip(settings("IV"))
    assert strip(settings("IV")) <= strip(settings("VIII"))
    assert {dict(s)["dataset"] for s in extra} == {"names"} and len(extra) == 3


def test_dcsgd_e_column_of_table_iii_equals_table_ii():
    """DC-SGD-E is trained once (G = 1): charging the tuning by LT or by RDP changes nothing."""
    drop = ("protocol",)
    two = by_key([r for r in table("dcsgd", "II")["rows"] if r["method"] == "dcsgd-e"], drop)
    three = by_key([r for r in table("dcsgd", "III")["rows"] if r["method"] == "dcsgd-e"], drop)
    assert two.keys() == three.keys() and len(two) == 18
    assert all(two[k]["value"] == three[k]["value"] for k in two)


def test_table_viii_repeats_table_iv_dpsgd_p_e_columns():
    four = by_key([r for r in table("dcsgd", "IV")["rows"] if r["method"] in ("dpsgd", "dcsgd-p", "dcsgd-e")])
    eight = by_key([r for r in table("dcsgd", "VIII")["rows"]
                    if r["method"] in ("dpsgd", "dcsgd-p", "dcsgd-e") and r["dataset"] != "names"])
    assert four.keys() == eight.keys() and len(four) == 54
    for k in four:
        assert (four[k]["value"], four[k]["std"]) == (eight[k]["value"], eight[k]["std"]), k


@pytest.mark.parametrize("tid", ["IV", "V", "VIII"])
def test_dcsgd_bold_marks_a_row_maximum_at_most_once_per_row(tid):
    rows = table("dcsgd", tid)["rows"]
    for s in {setting(r) for r in rows}:
        cells = [r for r in rows if setting(r) == s]
        bold = [r for r in cells if r.get("bold")]
        assert len(bold) <= 1, s
        if bold:
            assert bold[0]["value"] == max(r["value"] for r in cells), s
    assert all("std" in r for r in rows)


def test_dcsgd_table_i_grid_multipliers():
    rows = table("dcsgd", "I")["rows"]
    assert len({r["model"] for r in rows}) == 4
    by_method = {}
    for r in rows:
        assert isinstance(r["value"], int) and r["value"] > 0 and isinstance(r["G"], int)
        by_method.setdefault(r["method"], set()).add(r["G"])
    # One grid size per method, the same for every model; DC-SGD-E is trained once.
    assert all(len(g) == 1 for g in by_method.values())
    assert by_method["dcsgd-e"] == {1}
    assert len(by_method) == 5


def test_dcsgd_table_vi_names_table_vii_rows_and_gives_table_i_grid_sizes():
    candidates = {r["hyperparameter"]: r["values"] for r in table("dcsgd", "VII")["rows"]}
    assert candidates["lr"] == [round(2 ** i * 1e-5, 10) for i in range(20)]   # printed as 2^i x 1e-5, i = 0..19
    sizes = {}
    for r in table("dcsgd", "VI")["rows"]:
        assert set(r["hyperparameters"].values()) <= set(candidates) - {"lr"}, r
        sizes[r["method"]] = math.prod(len(candidates[row]) for row in r["hyperparameters"].values())
    assert sizes == {r["method"]: r["G"] for r in table("dcsgd", "I")["rows"]}


def test_dpdr_tables():
    one, two = table("dpdr", "1")["rows"], table("dpdr", "2")["rows"]
    assert {r["epsilon"] for r in one} == {r["epsilon"] for r in two} == {3, 8}
    assert {r["dataset"] for r in one} == {r["dataset"] for r in two} == {"mnist", "cifar10", "svhn"}
    assert {r["delta"] for r in one} == {r["delta"] for r in two} == {1e-5}
    # 12 printed rows (6 methods x 2 epsilons) x 3 datasets; DPAdam is DP-SGD with Adam.
    assert len({(r["epsilon"], r["method"], r["optimizer"]) for r in one}) == 12
    assert {(r["method"], r["optimizer"]) for r in one if r["method"] == "dpsgd"} == {("dpsgd", "sgd"),
                                                                                       ("dpsgd", "adam")}
    assert all(0 < r["value"] <= 100 for r in one)
    # One model per dataset.
    assert all(len({r["model"] for r in one if r["dataset"] == d}) == 1 for d in ("mnist", "cifar10", "svhn"))
    # Table 2: every (epsilon, dataset) has the three multipliers.
    assert {(r["epsilon"], r["dataset"], r["quantity"]) for r in two} == {
        (e, d, q) for e in (3, 8) for d in ("mnist", "cifar10", "svhn") for q in QUANTITIES}
    # A larger epsilon needs less noise, for every dataset and mechanism.
    lookup = {(r["epsilon"], r["dataset"], r["quantity"]): r["value"] for r in two}
    assert all(lookup[(8, d, q)] < lookup[(3, d, q)] for (_, d, q) in lookup)


def test_psasc_table_iii_matches_table_ii_settings():
    hyper = {r["dataset"]: r for r in table("psasc", "II")["rows"]}
    rows = table("psasc", "III")["rows"]
    assert set(hyper) == {r["dataset"] for r in rows} and len(hyper) == 5
    for r in rows:
        h = hyper[r["dataset"]]
        assert (r["model"], r["epsilon"], r["delta"]) == (h["model"], h["epsilon"], h["delta"])
        assert "optimizer" not in r, "the paper never states the optimizer [PSASC-29]"
    assert {r["method"] for r in rows} == {"dpsgd", "autos", "psac", "psasc", "psasc-momentum"}


def test_psasc_s_is_printed_for_both_psasc_columns_and_agrees():
    rows = table("psasc", "III")["rows"]
    for r in rows:
        assert ("s" in r) == (r["method"] in ("psasc", "psasc-momentum")), r
    for d in {r["dataset"] for r in rows}:
        assert len({r["s"] for r in rows if r["dataset"] == d and "s" in r}) == 1


def test_psasc_table_ii_settings_are_sane():
    for r in table("psasc", "II")["rows"]:
        assert isinstance(r["N"], int) and isinstance(r["batch_size"], int) and isinstance(r["epochs"], int)
        assert r["batch_size"] < r["N"] and 0 < r["delta"] < 1 / r["N"]
