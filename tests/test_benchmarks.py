"""The benchmarks: their grids scale the DC-SGD paper's, every method is in them, their reports name methods as the
book does, and an incomplete benchmark is refused with its cells and command (the chapters check their committed
results with it as they render them)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from dpbook.methods import METHODS
from dpbook.repro import benchmark_report as report
from dpbook.repro import digits_benchmark, mnist5k_benchmark
from dpbook.repro.plotting import method_label

#: name -> (module, the command that regenerates its results, the scale of the DC-SGD paper's grid sizes).
BENCHMARKS = {
    "digits": (digits_benchmark, "python -m dpbook.repro.sweep digits --jobs 2", 0.4),
    "mnist5k": (mnist5k_benchmark, "python -m dpbook.repro.sweep mnist5k --jobs 2", 0.2),
}

#: Registered methods the benchmarks leave out, each with its reason.
NOT_BENCHMARKED = {
    name: "full-batch (sample rate 1): the benchmark's Poisson minibatch setting, at a shared epoch budget, does not "
          "apply to it" for name, cls in METHODS.items() if cls.full_batch
}


def test_not_benchmarked_is_only_the_full_batch_method():
    assert set(NOT_BENCHMARKED) == {"psasc-momentum-gd"}  # DP-PSASC's Algorithm 2, the only full-batch method


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_method_of_the_book_is_benchmarked(name):
    bench = BENCHMARKS[name][0].BENCHMARK
    assert set(bench.grids) == set(METHODS) - set(NOT_BENCHMARKED)
    assert bench.seeds >= 5


@pytest.mark.parametrize("name", BENCHMARKS)
def test_grids_scale_the_papers_adam_grids_in_proportion(name):
    module, _, scale = BENCHMARKS[name]
    for method, G in module.BENCHMARK.paper_G.items():
        ours = len(module.GRIDS[method])
        assert ours == 1 if G == 1 else abs(ours / G - scale) <= 0.05, (name, method, ours, G)


def test_mnist5k_is_the_papers_mnist_setting_scaled():
    """The MNIST CNN at B = 256 on MNIST-5k, delta = 1/N, at the budgets the papers' MNIST tables share."""
    bench = mnist5k_benchmark.BENCHMARK
    assert (bench.setting["dataset"], bench.setting["model"], bench.setting["batch_size"]) == \
        ("mnist5k", "mnist_cnn", 256)
    assert bench.setting["delta"] is None and bench.epsilons == (1.0, 2.0, 3.0, 8.0)
    assert bench.study == "mnist5k"  # results under data/results/mnist5k/


def synthetic_cells(module) -> dict:
    """Every cell of the benchmark's whole grid, complete, without a calibration: what its committed results give the
    report (two seeds, the grid's first point chosen)."""
    bench = module.BENCHMARK
    return {(m, e, p): {"status": "ok", "values": [0.8, 0.81], "chosen": [module.GRIDS[m][0]] * 2, "sigma": 1.0,
                        "K": [] if p == "none" else [2, 2]}
            for m in bench.methods for e in bench.epsilons for p in bench.protocols}


@pytest.mark.parametrize("name", BENCHMARKS)
def test_tables_and_legends_name_methods_as_the_book_does(name):
    """The benchmarks' tables and figures show each method's label (plotting.method_label), never the registry's
    key. (That the committed results are complete, the chapters check as they render them:
    benchmark_report.check_complete, in the book build.)"""
    module = BENCHMARKS[name][0]
    cells = synthetic_cells(module)
    methods, epsilons = list(module.METHODS), list(module.BENCHMARK.epsilons)
    tables = [report.accuracy_table(cells, methods, epsilons, "none"),
              report.chosen_table(cells, module.GRIDS, methods, epsilons),
              report.versus_baseline(cells, methods, epsilons, "none")]
    first_column = {line.split("|")[1].strip() for table in tables for line in table.splitlines()[2:]
                    if line.startswith("|")}
    assert first_column == {method_label(m) for m in methods}
    fig = report.plot_accuracy(cells, methods, epsilons, delta="δ", title="t")
    legend = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    plt.close(fig)
    assert legend == {method_label(m) for m in methods}


@pytest.mark.parametrize("name", BENCHMARKS)
def test_an_incomplete_benchmark_names_its_cells_and_the_command(name):
    module, command, _ = BENCHMARKS[name]
    bench, cells = module.BENCHMARK, synthetic_cells(module)
    seeds, epochs = bench.seeds, bench.setting["epochs"]
    eps = bench.epsilons[0]
    allowed = {("adaclip", eps, "none"): {"status": "unreachable", "reason": "2 sigma_b = 0.2 must exceed sigma"},
               ("dpdr", eps, "rdp"): {"status": "unreachable", "reason": "the s - 1 = 4 GDR steps alone cost 1.2"}}
    report.check_complete(bench, cells | allowed, seeds=seeds, epochs=epochs, command=command)  # the cast's reasons
    broken = cells | {("dynamic", eps, "rdp"): {"status": "not run yet"},
                      ("dpsgd", bench.epsilons[-1], "lt"): {"status": "unreachable", "reason": "LT per-run budget"},
                      ("adaclip", eps, "lt"): {"status": "unreachable", "reason": "LT per-run budget"}}
    with pytest.raises(ValueError, match=rf"^rerun `{command}`: ") as refused:
        report.check_complete(bench, broken, seeds=seeds, epochs=epochs, command=command)
    assert f"Du et al. eps={eps:g} rdp is not run yet" in str(refused.value)
    assert f"DP-SGD eps={bench.epsilons[-1]:g} lt is unreachable: LT per-run budget" in str(refused.value)
    assert f"{method_label('adaclip')} eps={eps:g} lt is unreachable: LT per-run budget" in str(refused.value)
    report.check_complete(bench, broken, seeds=seeds - 1, epochs=epochs, command=command)  # a reader's subset


def test_the_digits_chapters_claims_pass_over_a_benchmark_still_running():
    """The chapter rendered from a results folder whose cells are not all done (a sweep still running) checks its
    prose's claims on a complete benchmark only: its claims cell passes over incomplete cells instead of failing on
    a cell without a mean (it raised a TypeError)."""
    import json
    from pathlib import Path

    import numpy as np

    from dpbook.repro import results

    pages = (Path(__file__).resolve().parents[1] / "notebooks").glob("digits_benchmark*.ipynb")  # the chapter's pages
    (claims,) = ["".join(c["source"]) for page in pages for c in json.loads(page.read_text())["cells"]
                 if c["cell_type"] == "code" and "".join(c["source"]).startswith("# The summary's claims, checked")]
    bench = digits_benchmark.BENCHMARK
    running = synthetic_cells(digits_benchmark) | {("dpsgd", bench.epsilons[0], "lt"): {"status": "partial",
                                                                                          "values": [0.8]}}
    namespace = {"cells": running, "methods": list(digits_benchmark.METHODS), "epsilons": list(bench.epsilons),
                 "seeds": 5, "z": 2.0, "db": digits_benchmark, "report": report, "results": results, "np": np}
    exec(claims, namespace)  # noqa: S102 (the notebook's own cell)
    assert not report.complete(running) and report.complete(synthetic_cells(digits_benchmark))


def test_an_accuracy_table_states_its_seed_count_once():
    """Every cell of a benchmark's table has the same number of seeds: the count is said once, under the table,
    and a cell that has fewer (still training) says how many it has."""
    module = BENCHMARKS["digits"][0]
    cells = synthetic_cells(module)
    methods, epsilons = list(module.METHODS), list(module.BENCHMARK.epsilons)
    text = report.accuracy_table(cells, methods, epsilons, "none")
    assert "(n=" not in text and text.endswith("Test accuracy (%), mean ± standard deviation over 2 seeds.")
    cells[(methods[0], epsilons[0], "none")] = {**cells[(methods[0], epsilons[0], "none")], "values": [0.8]}
    text = report.accuracy_table(cells, methods, epsilons, "none")
    assert text.count("(n=1)") == 1 and text.endswith("over 2 seeds; a cell with fewer says how many.")
