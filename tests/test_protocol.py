"""A toy paper through the reproduction protocol, from the code blocks of ``book/new_paper.md`` ("Reproducing another
paper") as a reader copies them: its transcribed table, its ``Reproduction(Chapter)`` and its notebook cells. The
cells train for real on digits (a few seconds), the table sets the measured mean ± std next to the paper's value,
render mode reads the same table back from the result files, and a second run trains nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpbook.repro import results

PAGE = Path(__file__).resolve().parents[1] / "book" / "new_paper.md"


def blocks(language: str) -> list[str]:
    """The page's ``{code-block}`` blocks in ``language``, in order."""
    return re.findall(rf"^```{{code-block}} {language}\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)


def test_the_page_shows_a_table_a_module_and_a_notebook():
    assert [len(blocks(language)) for language in ("json", "python", "text")] == [1, 4, 1]


def run(code: str, namespace: dict) -> None:
    """Execute ``code`` from the page as a module of its own would (no ``__future__`` import of this file)."""
    exec(compile(code, str(PAGE), "exec", dont_inherit=True), namespace)


@pytest.fixture
def toy(tmp_path) -> dict:
    """The page's module and its notebook's parameters, run mode, results in ``tmp_path`` (``data/paper`` and
    ``data/results`` stay untouched: the transcribed table is read from ``tmp_path``)."""
    (tmp_path / "toy_table1.json").write_text(json.dumps(json.loads(blocks("json")[0])))
    facts, reproduction, parameters, _ = blocks("python")
    namespace: dict = {"__name__": "toy"}
    run(facts + reproduction, namespace)
    namespace["paper_table"] = lambda: results.load_paper_table("toy_table1", root=tmp_path)
    run(parameters, namespace)
    namespace.update(mode="run", results_dir=str(tmp_path / "results"))
    return namespace


def columns(line: str) -> list[str]:
    return [text.strip() for text in line.strip().strip("|").split("|")]


def chapter_cell(namespace: dict, capsys) -> str:
    """Run the page's notebook cell; what it printed and displayed (the Markdown of its table)."""
    shown = []
    namespace.update(Markdown=lambda text: text, display=shown.append)
    run(blocks("python")[3], namespace)
    return capsys.readouterr().out + "\n".join(shown)


def test_a_toy_paper_trains_shows_paper_vs_reproduced_and_resumes(toy, capsys):
    out = chapter_cell(toy, capsys)
    chapter = toy["chapter"]
    assert toy["failed"] == [] and "run mode: 2 round(s); 0 run(s) failed" in out
    table = chapter.table()
    assert table in out
    lines, shown = table.splitlines(), blocks("text")[0].splitlines()  # the status line, a blank line, the table
    assert lines[:4] == shown[:4] and len(lines) == len(shown) == 4 + len(chapter.selected)
    for cell, line, page_line in zip(chapter.selected, lines[4:], shown[4:]):
        summary = chapter.summaries[cell]
        values = [100 * results.final_metric(record) for record in summary["records"]]
        mean, std, n = results.mean_std(values)
        paper = chapter.paper_row(cell)
        epsilon, method, paper_text, reproduced, difference, status = columns(line)
        page = columns(page_line)
        assert (epsilon, method, paper_text, status) == (page[0], page[1], page[2], page[5])
        assert n == chapter.seeds and reproduced.startswith(results.format_mean_std(mean, std, n))
        assert difference == f"{mean - paper['value']:+.2f}" and status == "done"

    files = {path: path.stat().st_mtime_ns for path in chapter.results.glob("toy/**/*.json")}
    assert chapter.run() == [] and "run mode: 0 round(s)" in capsys.readouterr().out
    assert {path: path.stat().st_mtime_ns for path in chapter.results.glob("toy/**/*.json")} == files

    toy["mode"] = "render"   # a fresh chapter reads the same table back from the result files
    assert table in chapter_cell(toy, capsys) and toy["chapter"] is not chapter


def test_the_paper_layout_sets_ours_next_to_the_papers_value_in_the_papers_rows_and_columns(toy, capsys):
    """The layout every reproduction page shows first: a row per setting, a column per method, each cell with
    results "paper → mean ± std, Δ difference", the count above it."""
    chapter_cell(toy, capsys)
    chapter = toy["chapter"]
    text = chapter.layout_table()
    n = len(chapter.selected)
    assert f"*Cells with results: {n} of {n}.* A cell with results reads" in text
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header, body = columns(lines[0]), lines[2:]
    methods = list(dict.fromkeys(str(chapter.label(cell)["method"]) for cell in chapter.selected))
    assert header[-len(methods):] == methods and len(body) == len({tuple(columns(b)[:-len(methods)]) for b in body})
    for cell in chapter.selected:
        label, paper = chapter.label(cell), chapter.paper_row(cell)
        values = [100 * results.final_metric(r) for r in chapter.summaries[cell]["records"]]
        mean, std, _ = results.mean_std(values)
        row = next(columns(b) for b in body if all(str(label[k]) in columns(b) for k in header[:-len(methods)]))
        printed = f"{paper['value']:.2f}" + (f" ± {paper['std']:.2f}" if paper.get("std") is not None else "")
        assert row[header.index(str(label["method"]))] == (f"{printed} → {mean:.2f} ± {std:.2f}, "
                                                          f"Δ {mean - paper['value']:+.2f}")


def test_one_more_seed_trains_only_the_missing_re_runs(toy, capsys):
    """The page's third exercise: after a run mode with seeds = 2, seeds = 3 trains one run per cell, seed 2 of its
    best grid point, and nothing else."""
    chapter_cell(toy, capsys)
    before = set(toy["chapter"].results.glob("toy/**/*.json"))
    toy["seeds"] = 3
    chapter_cell(toy, capsys)
    chapter = toy["chapter"]
    added = set(chapter.results.glob("toy/**/*.json")) - before
    assert chapter.seeds == 3 and len(added) == len(chapter.selected)
    assert {results.read_result(path)["experiment"]["seed"] for path in added} == {2}
