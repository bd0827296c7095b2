"""``python -m dpbook.repro.bench`` at tiny sizes: every contender runs, the record resumes, the tables render. Timing
itself belongs to the benchmark, never to a test: nothing here asserts a speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dpbook.repro import bench

TINY = ["--models", "mnist_cnn", "--batch-sizes", "8", "--repeats", "1", "--skip-memory", "--profile-models",
        "--method-models"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "dpbook.repro.bench", *args], capture_output=True, text=True)


@pytest.mark.slow
def test_every_contender_runs_and_a_rerun_resumes(tmp_path, capsys):
    out = tmp_path / "bench.json"
    bench.main([*TINY, "--output", str(out)])  # in this process: the command line's main, as ``-m`` runs it
    record = json.loads(out.read_text())
    (cell,) = record["cells"]
    assert (cell["model"], cell["B"], cell["micro_batch"], cell["micro_batch_why"]) == ("mnist_cnn", 8, None, "")
    assert set(cell["ms"]) == set(cell["rounds"]) == set(bench.CONTENDERS) and all(v > 0 for v in cell["ms"].values())
    assert cell["ms"] == bench.medians(cell["rounds"]) and all(len(t) == 1 for t in cell["rounds"].values())
    assert record["provenance"]["versions"]["torch"] == torch.__version__
    capsys.readouterr()
    bench.main([*TINY, "--output", str(out)])
    assert "mnist_cnn B=8" not in capsys.readouterr().err  # nothing re-run
    assert json.loads(out.read_text())["cells"] == record["cells"]
    with pytest.raises(SystemExit) as other:  # other --method-models: refused before running
        bench.main([*TINY, "mnist_cnn", "--output", str(out)])
    assert other.value.code == 2 and "recorded with other method_models" in capsys.readouterr().err
    table = run("--table", str(out))  # the documented command line itself
    assert table.returncode == 0 and table.stdout.strip() == bench.tables(record)
    del record["parameters"]["schema"]  # a record from before every round's times were kept
    out.write_text(json.dumps(record))
    with pytest.raises(SystemExit) as old:
        bench.main(["--table", str(out)])
    error = capsys.readouterr().err
    assert old.value.code == 2 and "layout of schema 1, not 2" in error and "--force" in error


@pytest.mark.parametrize("contender", ["non-private", "dpbook book-keeping"])
def test_memory_child_measures_the_steady_state_step(contender):
    peak = bench.memory_child("mnist_cnn", 8, contender, torch.device("cpu"))["peak_mib"]
    assert 0 <= peak < 500


def test_micro_batches_cover_the_logical_batch():
    assert bench._slices(10, 4) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert bench.SETTINGS["resnet18_gn"].micro(64) is None and bench.SETTINGS["resnet18_gn"].micro(256) == 64


def test_a_gpu_micro_batches_only_when_asked_or_out_of_memory(monkeypatch):
    resnet = bench.SETTINGS["resnet18_gn"]
    micro, why = bench.physical_batch(resnet, 256, "cpu")
    assert micro == 64 and "on a CPU" in why and bench.physical_batch(resnet, 64, "cpu") == (None, "")
    assert bench.physical_batch(resnet, 256, "cuda") == (None, "")  # the engine's step, like with like
    assert bench.physical_batch(resnet, 256, "cuda", asked=32) == (32, "asked (--micro-batch)")
    assert bench.physical_batch(bench.SETTINGS["mnist_cnn"], 8, "cpu", asked=8) == (None, "")

    built = []

    def step(contender, setting, x, y, device, *, method="dpsgd", micro=None):
        built.append(micro)
        if micro is None:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return lambda: None

    monkeypatch.setattr(bench, "batch", lambda setting, B, device: (torch.zeros(B, 1), torch.zeros(B)))
    monkeypatch.setattr(bench, "make_step", step)
    monkeypatch.setattr(bench, "interleaved_rounds_ms", lambda steps, repeats, device: {c: [1.0] for c in steps})
    rounds, micro, why = bench.engine_rounds("resnet18_gn", 256, ["non-private"], 1, "cuda")
    assert (micro, built) == (64, [None, 64]) and "ran out of the GPU's memory" in why and rounds
    with pytest.raises(torch.cuda.OutOfMemoryError):  # a model without a fallback says so
        bench.engine_rounds("mnist_cnn", 256, ["non-private"], 1, "cuda")


def test_the_table_says_which_cells_micro_batch_and_why():
    cell = {"model": "resnet18_gn", "B": 256, "micro_batch": 64, "ms": {"non-private": 2.0},
            "rounds": {"non-private": [2.0]}}
    text = bench.tables({"cells": [cell]})
    assert "| 256 (micro-batches of 64) |" in text
    assert f"ResNet18-GN, 32x32 (11.2M) at B = 256: {bench.MICRO_WHY}" in text
    text = bench.tables({"cells": [cell | {"micro_batch_why": "asked (--micro-batch)"}]})
    assert "at B = 256: asked (--micro-batch)." in text
    assert "ran at once (no micro-batches)" in bench.tables({"cells": [cell | {"micro_batch": None}]})


def test_methods_table_and_search_share():
    times = bench.method_times("mnist_cnn", 16, 2, torch.device("cpu"))
    assert set(times["rounds"]) == {*bench.BENCH_METHODS, *(f"{m} (vmap)" for m in bench.BENCH_METHODS)}
    assert all(len(t) == 2 for t in times["rounds"].values()) and times["search"] > 0
    ms = bench.medians(times["rounds"])
    text = bench.tables({"cells": [], "methods": [{"model": "mnist_cnn", "B": 16, "ms": ms, **times}]})
    assert all(f"| {m} |" in text for m in bench.BENCH_METHODS) and "DC-SGD-E's threshold search" in text
    assert f"| dpsgd | {ms['dpsgd']:,.1f} ms | 1.00x (1.00 to 1.00) |" in text
    diff2 = bench.paired(times["rounds"], ["diff2"], "dpsgd")
    assert f"| diff2 | {ms['diff2']:,.1f} ms | {diff2} |" in text


def test_a_ratio_is_paired_round_by_round():
    """Each round's ratio, then its median and quartiles: a slow stretch of the machine (rounds 4 and 5 here) slows
    both sides of those rounds' ratios, where a ratio of the medians would mix a slow step with a fast base."""
    rounds = {"step": [2.0, 2.0, 2.2, 6.0, 7.0], "base": [1.0, 1.0, 1.0, 3.0, 3.0]}
    spread = bench.paired(rounds, ["step"], "base")
    assert (spread.low, spread.median, spread.high) == (2.0, 2.0, pytest.approx(2.2))
    assert bench.medians(rounds)["step"] / bench.medians(rounds)["base"] == pytest.approx(2.2)
    assert str(spread) == "2.00x (2.00 to 2.20)"
    # parts add up within a round: 2/1, 7/2 and 6/2, median 3; not each part's median ratio added (1 + 1), nor the
    # summed medians over the base's (3 / 2)
    rounds = {"a": [1.0, 6.0, 2.0], "b": [1.0, 1.0, 4.0], "base": [1.0, 2.0, 2.0]}
    parts = bench.paired(rounds, ["a", "b"], "base")
    assert (parts.low, parts.median, parts.high) == (2.5, 3.0, 3.25)
    assert bench.paired(rounds, ["a"], "base").median + bench.paired(rounds, ["b"], "base").median == 2.0
    assert (bench.medians(rounds)["a"] + bench.medians(rounds)["b"]) / bench.medians(rounds)["base"] == 1.5


def test_the_profile_times_every_stage_of_the_step_and_every_layer():
    profile = bench.step_profile("mnist_cnn", 8, 1, torch.device("cpu"))
    layers = ["conv1", "conv2", "fc1", "fc2"]
    assert list(profile["strategies"]) == layers and profile["strategies"]["conv2"] == "ghost norm"
    stages = {"non-private", "dpbook book-keeping", bench.SHARED, "noise",
              *(f"{layer} {part}" for layer in layers for part in ("norms", "sum"))}
    assert set(profile["ms"]) == set(profile["rounds"]) == stages and all(v > 0 for v in profile["ms"].values())
    rounds = profile["rounds"]  # one round: every ratio is that round's
    floor = sum(t[0] for k, t in rounds.items() if k not in ("non-private", "dpbook book-keeping")) \
        / rounds["non-private"][0]
    assert all(getattr(bench.profile_floor(profile), q) == pytest.approx(floor) for q in ("low", "median", "high"))
    assert bench.profile_share(profile, "norms") == pytest.approx(
        sum(rounds[f"{layer} norms"][0] for layer in layers) / rounds["non-private"][0])
    text = bench.tables({"cells": [], "methods": [], "profile": [profile]})
    assert "| conv2: norms (ghost norm) |" in text
    assert f"together: {floor:.2f}x ({floor:.2f} to {floor:.2f}) the non-private step" in text
    rows = bench.profile_table(profile).splitlines()[2:]
    assert rows[0].startswith("| non-private step") and rows[-1].startswith("| noise")
    assert len(rows) == 2 + 1 + 2 * len(layers) + 1 and all(r in text for r in rows)  # steps, shared, layers, noise


def test_the_bench_times_every_minibatch_method():
    from dpbook.methods import METHODS
    assert set(bench.BENCH_METHODS) == {n for n, cls in METHODS.items() if not cls.full_batch}


RECORD = Path(__file__).resolve().parents[1] / "data" / "results" / "bench" / "analysis" / "cpu.json"
COSTS_PAGE = RECORD.parents[4] / "book" / "costs.md"


def test_the_cost_pages_tables_are_the_recorded_benchmark():
    record = json.loads(RECORD.read_text())
    block = COSTS_PAGE.read_text().split("<!-- bench:start -->")[1].split("<!-- bench:end -->")[0]
    assert block.strip() == bench.tables(record), "rerun: python -m dpbook.repro.bench --table " + str(RECORD)


def test_the_recorded_benchmark_is_complete():
    record = json.loads(RECORD.read_text())
    cells = {(c["model"], c["B"]) for c in record["cells"]}
    assert cells == {(m, B) for m, s in bench.SETTINGS.items() for B in s.batch_sizes}
    assert all(set(c["ms"]) == set(c["rounds"]) == set(c["peak_mib"]) == set(bench.CONTENDERS) for c in record["cells"])
    assert record["parameters"]["schema"] == bench.SCHEMA
    assert {m["model"] for m in record["methods"]} == {"mnist_cnn", "cifar10_cnn"}
    assert [(p["model"], p["B"]) for p in record["profile"]] == [("mnist_cnn", 256), ("cifar10_cnn", 256)]
