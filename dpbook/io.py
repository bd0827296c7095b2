"""Atomic writes: a checkpoint or a result file is either the old one or the complete new one, never half."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch


def _atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
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
