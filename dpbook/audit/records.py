"""The audits' result files: a rerun resumes an audit, and never replaces another audit's recorded results."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def resumable(path: Path, parameters: dict, key: str, *, force: bool, parser: argparse.ArgumentParser) -> list:
    """The records under ``key`` of an earlier run with the same ``parameters`` in ``path`` (none if it is absent).

    A file that is not JSON, or was written with other parameters, stops the command (exit 2) unless ``force``: a
    rerun must not replace recorded results with another experiment's."""
    if not path.exists() or force:
        return []
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        parser.error(f"{path} is not valid JSON ({error}); move it away, or pass --force to start afresh")
    recorded = record.get("parameters") or {}
    differ = sorted(k for k in set(recorded) | set(parameters) if recorded.get(k) != parameters.get(k))
    if differ:
        parser.error(f"{path} holds the results of an audit with other {', '.join(differ)}; choose another "
                     "--output, or pass --force to replace them")
    return record[key]
