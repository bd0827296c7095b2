"""Atomic writes: a checkpoint or a result file is either the old one or the complete new one, never half; and
resumable records of long commands (:func:`resumable`)."""

from __future__ import annotations

__all__ = ["MODE", "atomic_torch_save", "atomic_write_json", "remove_stale_temporaries", "claimed", "resumable"]

import argparse
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

#: Files written here are readable by everyone, like any file the user writes (mkstemp's own default is 0600).
MODE = 0o644


def _atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the writer's process id in the name: a later start removes what a killed writer left (remove_stale_temporaries)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.pid{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), MODE)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)``, atomically."""
    return _atomic(path, lambda f: torch.save(obj, f), "wb")


def atomic_write_json(obj: Any, path: str | os.PathLike, *, indent: int | None = 2) -> Path:
    """Write ``obj`` as JSON (indented unless ``indent=None``, which writes one compact line), atomically."""
    separators = (",", ":") if indent is None else None
    text = json.dumps(obj, indent=indent, sort_keys=True, separators=separators)
    return _atomic(path, lambda f: f.write(text + "\n"), "w")


_TEMPORARY = re.compile(r"^\..+\.pid(\d+)\.[^.]+\.tmp$")


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files under ``folder`` that an atomic write of a process that no longer runs left behind
    (it was killed between writing and renaming); files of running writers stay. Returns the deleted paths.
    """
    removed = []
    for tmp in Path(folder).rglob(".*.tmp") if Path(folder).is_dir() else []:
        match = _TEMPORARY.match(tmp.name)
        if match and not _running(int(match.group(1))):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def claimed(path: Path, parameters: dict) -> dict:
    """The JSON record in ``path``, which an earlier run with the same ``parameters`` wrote. A file that is not JSON,
    or was written with other parameters, is a ValueError that names it and what differs: a rerun must not replace
    recorded results with another experiment's.

        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "record.json"
        >>> _ = atomic_write_json({"parameters": {"steps": 5}, "cells": [1]}, path)
        >>> claimed(path, {"steps": 5})["cells"]
        [1]
        >>> claimed(path, {"steps": 6})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: ... holds results recorded with other steps
    """
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON ({error})") from error
    recorded = record.get("parameters") or {}
    differ = sorted(k for k in set(recorded) | set(parameters) if recorded.get(k) != parameters.get(k))
    if differ:
        raise ValueError(f"{path} holds results recorded with other {', '.join(differ)}")
    return record


def resumable(path: Path, parameters: dict, key: str, *, force: bool, parser: argparse.ArgumentParser) -> list:
    """The records under ``key`` of an earlier run with the same ``parameters`` in ``path`` (none if it is absent).

    A file that is not JSON, or was written with other parameters (:func:`claimed`), stops the command (exit 2)
    unless ``force``."""
    if not path.exists() or force:
        return []
    try:
        return claimed(path, parameters)[key]
    except ValueError as error:
        parser.error(f"{error}; choose another --output or move it away, or pass --force to start afresh")
