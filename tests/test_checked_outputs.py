"""``tests/checked_outputs.py``: the checked cells of a notebook's one execution are compared with their recorded
outputs as nbval compares them, and every way of not reproducing them is reported."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from . import checked_outputs

CHECKED = {"tags": ["nbval-check-output"]}


def executed(tmp_path, *outputs_of_checked, unchecked_output="anything\n"):
    cells = [new_code_cell("print(1)", id="free", outputs=[new_output("stream", name="stdout", text=unchecked_output)])]
    cells += [new_code_cell("x", id=f"c{i}", metadata=CHECKED, outputs=outputs)
              for i, outputs in enumerate(outputs_of_checked)]
    path = tmp_path / "chapter.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    return path


def claim(text):
    return [new_output("stream", name="stdout", text=text)]


def test_streams_are_merged_and_what_nbval_skips_is_left_out():
    outputs = [new_output("stream", name="stdout", text="a: "), new_output("stream", name="stdout", text="True\n"),
               new_output("display_data", data={"text/markdown": "| t |", "text/plain": "<Markdown>",
                                                "image/png": "iVBOR"}, metadata={"width": 3}),
               new_output("stream", name="stderr", text="warning\n")]
    assert checked_outputs.comparable(outputs) == {"stdout": ["a: True\n"], "stderr": ["warning\n"],
                                                   "text/markdown": ["| t |"], "text/plain": ["<Markdown>"]}


def test_reproduced_outputs_pass_and_unchecked_cells_are_free(tmp_path):
    record = {"chapter": {"c0": {"stdout": ["claim: True\n"]}}}
    assert checked_outputs.differences("chapter", executed(tmp_path, claim("claim: True\n")), record) == []
    path = executed(tmp_path, claim("claim: True\n"), unchecked_output="something else\n")
    assert checked_outputs.differences("chapter", path, record) == []


def test_every_way_of_not_reproducing_is_reported(tmp_path):
    record = {"chapter": {"c0": {"stdout": ["claim: True\n"]}, "gone": {"stdout": ["x\n"]}}}
    found = checked_outputs.differences("chapter", executed(tmp_path, claim("claim: False\n"), claim("new\n")), record)
    assert len(found) == 3, found
    changed = next(f for f in found if f.startswith("cell 'c0'"))
    assert "claim: False" in changed and "claim: True" in changed and "--update chapter" in changed
    assert any("'gone' is checked but not in the notebook" in f for f in found)
    assert any("'c1' is checked but not in checked_outputs.json" in f for f in found)
    assert "no outputs recorded" in checked_outputs.differences("other", executed(tmp_path, claim("a\n")), record)[0]


def test_the_record_covers_every_notebook_with_checked_cells():
    from .test_notebooks import NOTEBOOKS, has_checked_cells

    expected = {p.stem for p in NOTEBOOKS if has_checked_cells(p)}
    assert set(checked_outputs.recorded()) == expected
    for path in NOTEBOOKS:
        ids = {c["id"] for c in nbformat.read(path, as_version=4).cells
               if "nbval-check-output" in c.metadata.get("tags", [])}
        assert ids == set(checked_outputs.recorded().get(path.stem, {})), path.name
