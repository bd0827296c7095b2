"""The DPDR chapter's harness (:mod:`dpbook.repro.papers.dpdr`): its parameters are the notebook's, its cells and
grids are the paper's reading, a cell that waits for DP-SGD's grid takes DP-SGD's best point, and the table and
figures say "not run yet" without results. No notebook is executed here (``tests/test_notebooks.py`` does that)."""

import dataclasses

import matplotlib
import numpy as np
import pytest

from dpbook.repro import reproduce, results
from dpbook.repro.papers import dpdr
from dpbook.repro.papers.chapter import model_title
from dpbook.repro.papers.dpdr import ROWS, Reproduction, crossing, table2

matplotlib.use("Agg")


def test_the_default_cells_are_datasets_x_epsilons_x_methods_in_table_1s_order():
    rep = Reproduction()
    assert len(rep.cells) == 3 * 2 * 6
    assert rep.cells[:4] == [("mnist", 3.0, "dpdr"), ("cifar10", 3.0, "dpdr"), ("svhn", 3.0, "dpdr"),
                             ("mnist", 3.0, "autos")]
    assert rep.cells[-1] == ("svhn", 8.0, "dpsgd")
    assert Reproduction(cells=[["svhn", 8, "diff2"]]).cells == [("svhn", 8.0, "diff2")]
    assert Reproduction(datasets="mnist", epsilons="3", methods="dpsgd, dpdr").cells == [
        ("mnist", 3.0, "dpsgd"), ("mnist", 3.0, "dpdr")]


@pytest.mark.parametrize("changes, named", [
    ({"datasets": ["mnistt"]}, "unknown dataset(s) ['mnistt'] (did you mean 'mnist'?)"),
    ({"methods": ["dpdr", "dpsgdd"]}, "unknown method(s) ['dpsgdd'] (did you mean 'dpsgd'?)"),
    ({"cells": [["cifar10", 3.0, "diff3"]]}, "unknown method(s) ['diff3']"),
    ({"fig_dataset": "cifar100"}, "unknown dataset(s) ['cifar100']"),
])
def test_a_misspelt_name_is_a_value_error_naming_it(changes, named):
    with pytest.raises(ValueError) as err:
        Reproduction(**changes)
    assert named in str(err.value)


def test_the_grids_are_cleaned_and_the_own_grids_are_the_parameters():
    rep = Reproduction(lr_grid="0.1, 0.30000000000000004", C_grid=[1], adam_lr_grid=[0.01], autos_gamma=0.01)
    assert rep.lr_grid == [0.1, 0.3] and rep.C_grid == [1.0]
    base, grid = rep.spec(("cifar10", 8.0, "dpsgd"))
    assert grid == [{"lr": 0.1, "C": 1.0}, {"lr": 0.3, "C": 1.0}]
    assert (base.method, base.optimizer, base.model, base.epochs, base.batch_size, base.protocol) == (
        "dpsgd", "sgd", "cifar10_cnn_gn", 20, 256, "none")
    assert (base.epsilon, base.delta) == (8.0, 1e-5)
    base, grid = rep.spec(("cifar10", 8.0, "dpadam"))
    assert (base.method, base.optimizer, grid) == ("dpsgd", "adam", [{"lr": 0.01, "C": 1.0}])
    base, grid = rep.spec(("mnist", 3.0, "autos"))
    assert (base.method, grid) == ("autos", [{"lr": 0.1, "gamma": 0.01}, {"lr": 0.3, "gamma": 0.01}])


def test_batch_size_and_epochs_per_dataset():
    rep = Reproduction(batch_size={"svhn": 100}, epochs=30, micro_batch_size=8)
    svhn, mnist = rep.base_of("dpsgd", "svhn", 3.0), rep.base_of("dpsgd", "mnist", 3.0)
    assert (svhn.batch_size, svhn.epochs, svhn.micro_batch_size, svhn.model) == (100, 30, 8, "resnet18_gn")
    assert (mnist.batch_size, mnist.epochs) == (256, 30)


@pytest.mark.parametrize("group_norm, trained", [
    (True, {"mnist": "mnist_cnn_gn", "cifar10": "cifar10_cnn_gn", "svhn": "resnet18_gn"}),
    (False, {"mnist": "mnist_cnn", "cifar10": "cifar10_cnn", "svhn": "resnet18_gn"}),
])
def test_group_norm_trains_table_1s_models_with_the_papers_groupnorm(group_norm, trained, tmp_path):
    """[DPDR-21] Every cell, its label and Fig. 6's runs train the ``_gn`` variant of Table 1's CNN (the default),
    or the plain CNN with ``group_norm=False``; ``models()`` stays Table 1's names."""
    assert dpdr.models() == {"mnist": "mnist_cnn", "cifar10": "cifar10_cnn", "svhn": "resnet18_gn"}
    rep = Reproduction(group_norm=group_norm, datasets=["mnist"], epsilons=[3.0], fig_dataset="mnist", lr_grid=[0.5],
                       C_grid=[1.0], batch_size=32, epochs=1, smoke=True, results_dir=str(tmp_path))
    for dataset, model in trained.items():
        assert {rep.base_of(key, dataset, 3.0).model for key in ROWS} == {model}
        assert rep.label((dataset, 3.0, "dpdr"))["model"] == model_title(model)
    fake_results(rep, reproduce.search(*rep.spec(("mnist", 3.0, "dpsgd"))), lambda run: 0.8)
    points, _ = rep.figure6_points()
    assert {run.model for runs in points.values() for _, run in runs} == {trained["mnist"]}


def test_sigma_alpha_ratio_is_table_2s_unless_given():
    rep = Reproduction()
    for dataset in ("mnist", "cifar10", "svhn"):
        for epsilon in (3.0, 8.0):
            ratio = table2(dataset, epsilon, "sigma_alpha") / table2(dataset, epsilon, "sigma_perp")
            assert rep.ratio_of(dataset, epsilon) == pytest.approx(ratio, rel=1e-5)
    assert Reproduction(sigma_alpha_ratio=2.5).ratio_of("mnist", 3.0) == 2.5
    with pytest.raises(ValueError, match="Table 2 has no sigma_alpha / sigma_perp for mnist at epsilon 1"):
        rep.ratio_of("mnist", 1.0)


def fake_results(rep: Reproduction, runs, accuracy) -> None:
    """Result files of ``runs`` (complete records, fake numbers) with the final test accuracy ``accuracy(run)``."""
    for run in runs:
        acc = accuracy(run)
        results.write_result({"experiment": dataclasses.asdict(run), "key": run.key(), "epsilon_spent": run.epsilon,
                              "sigma": 1.0, "final": {"test_accuracy": acc, "epoch": 1},
                              "epochs": {"epoch": [1], "step": [3], "epsilon": [run.epsilon], "test_accuracy": [acc],
                                         "test_loss": [2.0]}}, run.path(rep.results))


def test_dpdr_diff_and_diff2_wait_for_dp_sgds_grid_then_take_its_best_point(tmp_path):
    rep = Reproduction(datasets=["mnist"], epsilons=[3.0], lr_grid=[0.5, 2.0], C_grid=[0.1, 1.0], C_perp_grid=[1.0],
                       C_alpha_grid=[0.3, 1.5], C_d_grid=[0.1], s=2, diff2_restart_every=2, batch_size=32, epochs=1,
                       smoke=True, results_dir=str(tmp_path))
    for key in ("dpdr", "diff", "diff2"):
        assert rep.spec(("mnist", 3.0, key)) is None
    waiting = {"dpdr", "diff", "diff2"}  # the rows that take DP-SGD's best point
    assert {key: rep.summaries["mnist", 3.0, key]["status"] for key in ROWS} == {
        key: "waits for DP-SGD's grid" if key in waiting else "not run yet" for key in ROWS}
    # run mode trains DP-SGD's grid for the cells that wait for it
    grid_runs = reproduce.search(*rep.spec(("mnist", 3.0, "dpsgd")))
    wanted = rep.wanted()
    assert all(run in wanted for run in grid_runs) and all(run.method != "dpdr" for run in wanted)

    # DP-SGD's grid done: its best point is lr 2.0, C 0.1
    fake_results(rep, grid_runs, lambda run: 0.9 if (run.lr, run.hyperparameters["C"]) == (2.0, 0.1) else 0.5)
    base, grid = rep.spec(("mnist", 3.0, "dpdr"))
    assert base.method == "dpdr" and base.optimizer == "sgd"
    assert grid == [{"lr": 2.0, "C_perp": 1.0, "C_alpha": c, "C_g": 0.1, "s": 2,
                     "sigma_alpha_ratio": rep.ratio_of("mnist", 3.0)} for c in (0.3, 1.5)]
    assert rep.spec(("mnist", 3.0, "diff"))[1] == [{"lr": lr, "C_d": 0.1, "C_g": 0.1} for lr in (0.5, 2.0)]
    assert rep.spec(("mnist", 3.0, "diff2"))[1] == [{"lr": lr, "C_d": 0.1, "C_g": 0.1, "restart_every": 2}
                                                   for lr in (0.5, 2.0)]
    assert any(run.method == "dpdr" for run in rep.wanted())


def test_the_table_says_not_run_yet_without_results(tmp_path):
    rep = Reproduction(datasets=["mnist", "cifar10"], epsilons=[3.0], results_dir=str(tmp_path))
    text = rep.table()
    assert text.startswith("**Accuracy Comparison on public datasets")
    rows = [line for line in text.splitlines() if line.startswith("| 3 |")]
    assert len(rows) == len(rep.cells) == 12
    for row in rows:
        waits = any(f"| {dpdr.label(k)} |" in row for k in ("dpdr", "diff", "diff2"))
        assert ("| waits for DP-SGD's grid |" if waits else "| not run yet |") in row, row
    # Table 1's row order: method (as the paper), then dataset
    assert [r.split(" | ")[1:4] for r in rows[:3]] == [["DPDR", "MNIST", "CNN with GroupNorm"],
                                                       ["DPDR", "CIFAR10", "CNN with GroupNorm"],
                                                       ["AutoClip", "MNIST", "CNN with GroupNorm"]]
    assert "stand-in" not in text and "MNIST-5k" in Reproduction(stand_ins=True, datasets=["mnist"],
                                                                 results_dir=str(tmp_path)).table()


def test_the_figures_without_results_are_empty_and_say_why(tmp_path):
    rep = Reproduction(datasets=["mnist"], epsilons=[3.0], fig_dataset="mnist", results_dir=str(tmp_path))
    assert rep.convergence() == {}
    assert rep.fig5_table() == "Fig. 5: no Table 1 run on mnist at epsilon 3 yet (not run yet)"
    assert rep.fig6_notes() == ["DPDR: waits for Table 1's grid on mnist at ε = 3",
                                "DP-SGD: waits for Table 1's grid on mnist at ε = 3"]
    assert rep.fig5_figure() == (None, [])  # fig5_table says why
    assert rep.fig6_figure() == (None, ["(a) Expected batch size", "(b) DPDR's coefficient bound",
                                        "(c) DPDR's GDR length"])


def test_the_noise_table_sets_ours_next_to_table_2():
    text = Reproduction(datasets=["mnist"], epsilons=[3.0], methods=["dpdr"]).noise_table()
    (row,) = [line for line in text.splitlines() if line.startswith("| MNIST")]
    # T = 20 epochs of round(N / B) steps; DP-SGD's sigma is Table 2's sigma_g to 3 digits
    assert row.startswith("| MNIST, CNN with GroupNorm | 3 | 60000 | 256 | 4680 | 0.00427 | 0.8032 |")
    assert row.endswith("| 0.803 / 0.81 / 2 |")
    assert "(ours, s = 50)" in text


def test_crossing_interpolates_between_epochs():
    eps, acc = np.array([0.5, 1.0, 2.0, 3.0]), np.array([20.0, 40.0, 50.0, 70.0])
    assert crossing(eps, acc, 45.0) == "1.500"
    assert crossing(eps, acc, 60.0) == "2.500"
    assert crossing(eps, acc, 70.0) == "3.000"
    assert crossing(eps, acc, 10.0) == "≤ 0.500"
    assert crossing(eps, acc, 80.0) is None


def test_chosen_leaves_out_the_ratio():
    base, _ = Reproduction().spec(("mnist", 3.0, "dpsgd"))
    run = base.replace(method="dpdr", lr=0.5, hyperparameters={"C_perp": 0.3, "C_alpha": 1.5, "C_g": 0.1, "s": 50,
                                                               "sigma_alpha_ratio": 10.0})
    assert Reproduction.chosen(run) == "lr 0.5, C_alpha 1.5, C_g 0.1, C_perp 0.3, s 50"
    assert Reproduction.chosen(None) == ""


def test_fig6_draws_only_the_panels_with_results(tmp_path):
    rep = Reproduction(datasets=["mnist"], epsilons=[3.0], fig_dataset="mnist", fig6_epsilon=3.0, lr_grid=[0.5, 2.0],
                       C_grid=[0.1, 1.0], batch_size=32, epochs=1, smoke=True, results_dir=str(tmp_path))
    fake_results(rep, reproduce.search(*rep.spec(("mnist", 3.0, "dpsgd"))), lambda run: 0.8)
    points, _ = rep.figure6_points()
    fake_results(rep, [run for _, run in points["B", "dpsgd"]], lambda run: 0.7)
    figure, missing = rep.fig6_figure()
    (ax,) = figure.axes  # panel (a), DP-SGD's batch sizes; DPDR's grid has no result, so (b) and (c) are named
    assert ax.get_title().startswith("(a) Expected batch size") and [t.get_text() for t in ax.get_legend().texts] == [
        "DP-SGD"]
    assert missing == ["(b) DPDR's coefficient bound", "(c) DPDR's GDR length"]
    matplotlib.pyplot.close(figure)
