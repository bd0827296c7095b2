"""The reproduction chapters' harness (dpbook.repro.papers): each chapter's parameters are its module's
``Reproduction`` fields, and the cells, grids and tables it builds, on an empty results directory (the notebook
tests train and render real smoke runs through the same calls)."""

import dataclasses
import json
from pathlib import Path

import matplotlib
import pytest

from dpbook.repro.papers import dcsgd, dcsgd_figures, dpdr, psasc
from dpbook.repro.params import parameters_cell

matplotlib.use("Agg")
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def parameters_of(notebook: str) -> dict:
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    cell = next(c for c in cells if "parameters" in c["metadata"].get("tags", []))
    return parameters_cell("".join(cell["source"]))[0]


@pytest.mark.parametrize("module, notebook", [(dcsgd, "reproduce_dcsgd"), (dpdr, "reproduce_dpdr"),
                                              (psasc, "reproduce_psasc")])
def test_the_chapters_parameters_are_the_fields_with_the_same_defaults(module, notebook):
    """Same names, values and types; ``mode`` (render or run) is the notebook's, not the harness's."""
    declared = parameters_of(notebook)
    fields = {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
              for f in dataclasses.fields(module.Reproduction)}
    assert set(declared) - set(fields) == {"mode"} and set(fields) <= set(declared)
    for name, value in fields.items():
        assert value == declared[name] and type(value) is type(declared[name]), name


# -- DP-PSASC ---------------------------------------------------------------------------------------------------

def test_psasc_cells_and_a_misspelt_name():
    rep = psasc.Reproduction()
    assert len(rep.cells) == 25 and rep.cells[0] == ("mnist", "dpsgd")
    with pytest.raises(ValueError, match=r"unknown method\(s\) \['psas'\] \(did you mean 'psasc'\?\)"):
        psasc.Reproduction(methods=["psas"])
    with pytest.raises(ValueError, match="unknown lr_scaling .*; valid: sensitivity, none"):
        psasc.Reproduction(lr_scaling="sens")


@pytest.mark.parametrize("method", list(psasc.LABELS))
def test_psasc_grid_values_are_effective_learning_rates(method):
    """Every grid run's lr is eta_eff * gamma1 / sensitivity, and eta_of inverts it."""
    rep = psasc.Reproduction(lr_grid=[0.5, 2.0])
    base, grid = rep.spec(("celeba", method))
    runs = [base.replace(lr=p["lr"], hyperparameters={k: v for k, v in p.items() if k != "lr"}) for p in grid]
    assert sorted({rep.eta_of(run) for run in runs}) == [0.5, 2.0]
    unscaled = psasc.Reproduction(lr_grid=[0.5, 2.0], lr_scaling="none")
    assert sorted({p["lr"] for p in unscaled.spec(("celeba", method))[1]}) == [0.5, 2.0]


def test_psasc_table_and_figure_on_no_results(tmp_path):
    rep = psasc.Reproduction(datasets=["mnist", "celeba"], results_dir=str(tmp_path))
    text = rep.table()
    # compact while nothing has run: the paper's value and the status, one short line per cell
    assert text.count("not run yet") == len(rep.cells) and "reproduced" not in text
    assert f"No cell has results yet (0 of {len(rep.cells)})" in text
    assert "| MNIST | CNN | DP-PSASC | 0.9 |" in text
    settings_text = rep.settings_table()  # two tables of two rows each, every column's header once
    assert "σ" in settings_text and settings_text.count("\n") == 8 and settings_text.count("| MNIST, CNN |") == 2
    assert rep.curves_figure() == (None, ["mnist", "celeba"])  # no empty panels: the benchmarks are named instead


# -- DC-SGD -----------------------------------------------------------------------------------------------------

def test_dcsgd_grids_are_table_vii_and_sgd_multiplies_them_by_the_learning_rates():
    rep = dcsgd.Reproduction()
    assert rep.grids_are_table_vii()
    for method in dcsgd.TUNED_HYPERPARAMETERS:
        adam, sgd = rep.grid_of("IV", method), rep.grid_of("V", method)
        assert len(sgd) == 20 * len(adam) and {p["lr"] for p in sgd} == set(rep.lr_grid)
    assert rep.grid_of("VIII", "autos") == [{}]
    override = dcsgd.Reproduction(grids={"dpsgd": [{"C": 0.5}]}, sgd_lrs=[0.1])
    assert override.grid_of("V", "dpsgd") == [{"C": 0.5, "lr": 0.1}]


def test_dcsgd_selection_and_bad_names():
    rep = dcsgd.Reproduction(table=["II", "IV"], datasets=["mnist"], methods=["dcsgd-e"], epsilons=[2.0])
    assert [(c.table, c.model, c.epsilon) for c in rep.selected] == [("II", "mnist_cnn", 2.0),
                                                                     ("IV", "mnist_cnn", 2.0)]
    for bad, message in (({"table": "IX"}, r"table\(s\) \['IX'\]"), ({"figures": ["12"]}, r"figure\(s\) \['12'\]"),
                         ({"models": ["resnet18"]}, "did you mean 'resnet18_gn'"),
                         ({"fresh": True}, "only allowed with smoke=True")):
        with pytest.raises(ValueError, match=message):
            dcsgd.Reproduction(**bad)


def test_dcsgd_tables_on_no_results(tmp_path):
    rep = dcsgd.Reproduction(results_dir=str(tmp_path), data_root=str(tmp_path), datasets=["names"])
    text = rep.table_text("IV")
    assert f"Cells with results: 0 of {len(dcsgd.table_cells('IV'))}" in text
    rows = [line for line in text.splitlines() if line.startswith("| ")][2:]
    assert rows and not any("→" in row or "not run yet" in row for row in rows)  # the paper's values alone
    names = next(c for c in dcsgd.table_cells("VIII") if c.dataset == "names")
    summary = rep.summary(names)  # its size N is unknown while its files are missing
    assert summary["status"] == "not run yet" and "names" in summary["reason"].lower()
    assert rep.selected_detail(only_with_results=True) is None
    for method in ("dpsgd", "dcsgd-e"):  # a grid, then 5 re-runs of its best point (seed 0 is a grid run); no grid
        cell = dcsgd.Cell("IV", "mnist_cnn", "mnist", 2.0, method)
        G = len(rep.grid_of("IV", method))
        assert len(rep.runs_to_fill(cell)) == (G + rep.seeds - 1 if G > 1 else rep.seeds)
    assert rep.table_i().count("not run yet") == len(dcsgd.paper_table("I")["rows"])


def test_dcsgd_figures_on_no_results(tmp_path):
    rep = dcsgd.Reproduction(results_dir=str(tmp_path), figure_datasets=["mnist"])
    # Fig. 10's MNIST panel is selected but has no results: no figure, the setting is named instead
    assert dcsgd_figures.sensitivity_figure(rep, "10") == (None, ["MNIST/CNN"])
    assert dcsgd_figures.sensitivity_figure(rep, "5") is None  # SVHN and QNLI only
    assert dcsgd_figures.fig8_figure(rep) is None  # Fig. 8's settings are CIFAR10 and SVHN
    assert dcsgd_figures.fig4_figure(rep) == (None, ["MNIST/CNN"])
    assert dcsgd_figures.load_analysis(rep, "fig4", "mnist", "mnist_cnn") is None
