"""The oldest supported environment (``make oldest``) tests exactly the lower bounds pyproject.toml claims.

constraints-oldest.txt pins each of dpbook's requirements (and the ``text`` extra, which Colab's set-up cell installs)
at its lower bound; the Makefile's ``oldest`` target runs the suite at the Python that ``requires-python`` names.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10, the oldest supported (pytest brings tomli there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _claimed() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bounds = {}
    for text in project["dependencies"] + project["optional-dependencies"]["text"]:
        requirement = Requirement(text)
        (lower,) = [s.version for s in requirement.specifier if s.operator == ">="]
        bounds[requirement.name.lower()] = Version(lower)
    return bounds


def _pinned() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints-oldest.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            (pin,) = requirement.specifier
            assert pin.operator == "==", f"constraints-oldest.txt pins with ==, not {line!r}"
            pins[requirement.name.lower()] = Version(pin.version)
    return pins


def test_the_oldest_constraints_are_the_claimed_lower_bounds():
    claimed, pinned = _claimed(), _pinned()
    assert set(pinned) == set(claimed), (
        f"pinned but not required: {sorted(set(pinned) - set(claimed))}; "
        f"required but not pinned: {sorted(set(claimed) - set(pinned))}")
    differ = {name: (str(claimed[name]), str(pinned[name])) for name in claimed if claimed[name] != pinned[name]}
    assert not differ, f"pyproject.toml's lower bound and constraints-oldest.txt's pin differ: {differ}"


def test_the_oldest_python_is_the_one_required():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    (oldest,) = re.findall(r"^OLDEST_PYTHON \?= python(\d+\.\d+)$", (ROOT / "Makefile").read_text(), re.M)
    assert requires == f">={oldest}"
