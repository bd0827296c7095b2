"""``make PYTHON=...`` with a .venv made by another Python stops, naming both and the fix, instead of using the old
environment silently; the same interpreter, no PYTHON at all, and ``make clean`` go on."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

pytestmark = pytest.mark.skipif(not VENV_PYTHON.exists(), reason="the check compares with .venv, which make creates")


def make_n(*args: str) -> subprocess.CompletedProcess:
    """``make -n ARGS``: what make would do, without doing it."""
    return subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_another_python_than_the_venvs_stops_naming_both_and_the_fix(tmp_path):
    other = tmp_path / "python3.99"
    other.write_text("#!/bin/sh\necho 3.99\n")  # answers the version question as a Python 3.99 would
    other.chmod(0o755)
    done = make_n(f"PYTHON={other}", "test")
    venv = "%d.%d" % sys.version_info[:2] if Path(sys.executable).resolve() == VENV_PYTHON.resolve() else None
    assert done.returncode == 2
    assert f"dpbook: PYTHON={other} is Python 3.99, but .venv was made with Python " in done.stderr
    assert venv is None or f"made with Python {venv} and would be used instead" in done.stderr
    assert "Run 'make clean' (it removes .venv)" in done.stderr
    assert "is not found on PATH" in make_n("PYTHON=no-such-python", "book").stderr


def test_the_venvs_own_python_no_python_and_clean_go_on(tmp_path):
    assert make_n(f"PYTHON={VENV_PYTHON}", "test").returncode == 0
    assert make_n("test").returncode == 0
    assert make_n(f"PYTHON={tmp_path / 'python3.99'}", "clean").returncode == 0
