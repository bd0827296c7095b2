"""``tools/live_timing.py``: no notebook and no test checks a time measured while it runs (such a check fails on a
busy machine), and the lint finds each way such a check has been written."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import live_timing  # noqa: E402


def test_no_notebook_or_test_checks_a_live_timing():
    paths = live_timing.default_paths()
    assert any(p.suffix == ".ipynb" for p in paths) and Path(__file__) in paths
    found = [str(f) for p in paths for f in live_timing.check(p)]
    assert not found, "\n".join(found)


def lines(source: str) -> list[str]:
    """The lines of the checks the lint reports in one module's source."""
    return [f.source.strip() for f in live_timing.find([("", textwrap.dedent(source))], "x.py")]


CAUGHT = {
    "a clock, directly": """
        import time
        t0 = time.perf_counter()
        work()
        assert time.perf_counter() - t0 < 1.0
        """,
    "through names and a loop (the DC-SGD chapter's first form)": """
        import statistics, time
        spent = {name: [] for name in METHODS}
        for r in range(10):
            for name in METHODS:
                t0 = time.perf_counter()
                step(name)
                spent[name].append(time.perf_counter() - t0)
        own_us = {name: 1e6 * statistics.median(v) for name, v in spent.items()}
        assert max(own_us[name] - own_us["dpsgd"] for name in METHODS) < 1000
        """,
    "the bench's live rounds, through functions (the DPDR chapter's first form)": """
        from dpbook.repro.bench import interleaved_rounds_ms, medians, paired

        def step_times(B, repeats):
            return interleaved_rounds_ms(steps(B), repeats, "cpu")

        def over_dpsgd(rounds, name):
            return paired(rounds, [name], "dpsgd").median

        timings = {}
        for B in (64, 256):
            rounds = timings[B] = step_times(B, 15)
        if repeats >= 10:
            for rounds in timings.values():
                ms = medians(rounds)
                assert ms["diff2"] > ms["dpsgd"]
        """,
    "one element of a returned tuple": """
        import time

        def train(name):
            tic = time.perf_counter()
            log = run(name)
            return log, time.perf_counter() - tic

        log, seconds = train("dpsgd")
        assert seconds < 60
        """,
    "time.time in a test, failing through pytest.fail": """
        import time
        import pytest

        def test_fast():
            start = time.time()
            work()
            elapsed = time.time() - start
            if elapsed > 5:
                pytest.fail("too slow")
        """,
    "a comprehension over measured times": """
        from timeit import timeit
        times = [timeit(f, number=10) for f in steps]
        assert all(t < 0.1 for t in times)
        """,
}


@pytest.mark.parametrize("source", CAUGHT.values(), ids=CAUGHT.keys())
def test_a_check_of_a_live_timing_is_found(source):
    assert len(lines(source)) == 1, lines(source)


NOT_CAUGHT = {
    "a recorded benchmark's ratios (the chapters' form)": """
        from dpbook.repro.bench import paired, recorded
        for m in recorded()["methods"]:
            assert paired(m["rounds"], ["dpdr"], "dpsgd").median < 1.25
        """,
    "a deadline that sizes a wait": """
        import time
        deadline = time.time() + 120
        while time.time() < deadline and not done():
            time.sleep(0.5)
        assert done()
        """,
    "a printed time": """
        import time
        started = time.perf_counter()
        print(f"ran in {time.perf_counter() - started:.0f} s")
        assert result == 4
        """,
    "the other element of a returned tuple": """
        import time

        def train(name):
            tic = time.perf_counter()
            return run(name), time.perf_counter() - tic

        log, seconds = train("dpsgd")
        assert log.epochs[-1]["epsilon"] <= 4
        """,
    "a name that is local to another function": """
        import time

        def timed():
            x = time.perf_counter()
            return 1

        def test_values():
            x = compute()
            assert x == 2
        """,
    "a key, not a value": """
        import time
        order = {time.perf_counter(): "a"}
        for name in METHODS:
            spent = time.perf_counter()
        table = {name: accuracy[name] for name in METHODS}
        assert table["dpsgd"] > 0.5
        """,
}


@pytest.mark.parametrize("source", NOT_CAUGHT.values(), ids=NOT_CAUGHT.keys())
def test_what_is_not_a_check_of_a_live_timing_is_not_reported(source):
    assert lines(source) == []


def test_a_notebook_is_one_namespace_and_its_magics_are_skipped(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("%matplotlib inline\nimport time\nt0 = time.perf_counter()"),
        nbformat.v4.new_markdown_cell("text"),
        nbformat.v4.new_code_cell("!ls\nspent = time.perf_counter() - t0"),
        nbformat.v4.new_code_cell("x = 1\nassert spent < 2"),
    ])
    path = tmp_path / "chapter.ipynb"
    nbformat.write(nb, path)
    found = live_timing.check(path)
    assert [f.where for f in found] == ["cell 2, line 2"], found
    assert live_timing.main([str(path)]) == 1
