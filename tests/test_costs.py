"""The book's page "What it costs" shows what the costs record holds, and the tool that records a command's costs
records a command that succeeds and refuses one that fails (tools/costs.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import costs  # noqa: E402

PAGE = ROOT / "book" / "costs.md"


def test_the_page_shows_the_record():
    assert costs.block(PAGE.read_text()) == costs.table(costs.read()), "rerun: python tools/costs.py --table"


def test_every_entry_says_when_where_and_how_it_was_measured():
    record = costs.read()
    assert record["commands"] and record["chapters"]
    for name, entry in record["commands"].items():
        assert entry["seconds"] > 0 and entry["measured"][:2] == "20" and entry["where"] and entry["how"], name
    assert all(entry["seconds"] > 0 and entry["measured"][:2] == "20" for entry in record["chapters"].values())


def test_a_command_is_timed_and_recorded_and_a_failing_one_is_not(tmp_path):
    path = tmp_path / "costs.json"
    entry = costs.record("a pause", [sys.executable, "-c", "import time; time.sleep(0.2)"], where="here", path=path)
    assert entry["seconds"] >= 0.2 and entry["cpu_seconds"] >= 0 and entry["how"] == "tools/costs.py record"
    assert json.loads(path.read_text())["commands"] == {"a pause": entry}
    with pytest.raises(SystemExit, match="exited 3: nothing recorded"):
        costs.record("a failure", [sys.executable, "-c", "raise SystemExit(3)"], where="here", path=path)
    assert list(json.loads(path.read_text())["commands"]) == ["a pause"]


def test_a_record_the_tool_did_not_write_stops_it(tmp_path):
    """A damaged record, or another tool's, is never overwritten: the tool stops and names it."""
    path = tmp_path / "costs.json"
    path.write_text('{"parameters": {"steps": 5}, "cells": []}')
    with pytest.raises(SystemExit, match=r"costs: .*costs.json holds results recorded with other holds, steps, "):
        costs.record("a pause", [sys.executable, "-c", "open('ran', 'w')"], where="here", path=path, cwd=tmp_path)
    assert not (tmp_path / "ran").exists()  # refused before the command ran
    path.write_text("{not json")
    with pytest.raises(SystemExit, match=r"costs: .*costs.json is not valid JSON .*restore it"):
        costs.read(path)
    assert path.read_text() == "{not json"


def test_the_chapters_times_that_make_book_wrote_are_recorded_with_their_dates(tmp_path):
    times = tmp_path / "chapter_times.json"
    times.write_text(json.dumps({"audit": {"seconds": 19.0, "executed": "2026-11-29T02:34:05+00:00"}}))
    assert costs.chapters(times, tmp_path / "costs.json") == {"audit": {"seconds": 19.0, "measured": "2026-11-29"}}
    page = costs.table(costs.read(tmp_path / "costs.json"))
    assert "| `audit` | 19 s |  |  |" in page and "measured 2026-11-29)" in page


def test_the_command_line_takes_the_command_after_a_double_dash(tmp_path, capsys):
    path = tmp_path / "costs.json"
    costs.main(["--record-file", str(path), "record", "a run", "--where", "here", "--", sys.executable, "-c", "pass"])
    assert json.loads(path.read_text())["commands"]["a run"]["command"] == f"{sys.executable} -c pass"
    with pytest.raises(SystemExit):
        costs.main(["--record-file", str(path), "record", "nothing", "--where", "here"])
    assert "give the command after --" in capsys.readouterr().err
