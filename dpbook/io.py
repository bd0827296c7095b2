"""Atomic writes: a checkpoint or a result file is either the old one or the complete new one, never half;
resumable records of long commands (:func:`resumable`); claims, so that two processes never make the same file at
once (:func:`claim`); and the paths a command reads and writes, checked at the
door (:func:`writable`, and the :class:`~dpbook.checks.Domain` of a folder, a file to write and a file to read)."""

from __future__ import annotations

__all__ = ["MODE", "HOST", "atomic_torch_save", "atomic_write_json", "remove_stale_temporaries", "Held", "claim",
           "claimed", "resumable", "writable", "folder", "output_file", "input_file"]

import argparse
import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from dpbook.checks import Domain, Refused

#: Files written here are readable by everyone, like any file the user writes (mkstemp's own default is 0600).
MODE = 0o644

#: This machine's name (up to its first dot), in temporary files and claims: on a file system that several machines
#: share (a cluster's), a process id means something only on the machine that runs it.
HOST = socket.gethostname().split(".")[0] or "localhost"


def _atomic(path: str | os.PathLike, write: Callable[[Any], None], mode: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the writer's machine and process id in the name: a later start on this machine removes what a killed writer
    # left (remove_stale_temporaries), and never what a writer on another machine is writing
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.pid{os.getpid()}@{HOST}.", suffix=".tmp")
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


_TEMPORARY = re.compile(r"^\..+\.pid(?P<pid>\d+)(?:@(?P<host>[^.]+))?\.[^.]+\.tmp$")


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files under ``folder`` that an atomic write of a process of this machine that no longer
    runs left behind (it was killed between writing and renaming); files of running writers, and of writers on
    other machines, stay. Returns the deleted paths.
    """
    removed = []
    for tmp in Path(folder).rglob(".*.tmp") if Path(folder).is_dir() else []:
        match = _TEMPORARY.match(tmp.name)
        if match and match["host"] in (None, HOST) and not _running(int(match["pid"])):
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


class Held(RuntimeError):
    """Another process holds the claim on a file (:func:`claim`): it is making it now."""


@contextlib.contextmanager
def claim(path: str | os.PathLike, *, wait: bool = True) -> Iterator[None]:
    """Hold the claim on making the file ``path`` for the duration of the block, so that two processes (two sweeps,
    two SLURM arrays over one results folder) never make it at once.

    The claim is a lock (``flock``) on ``.<name>.claim`` beside the file, which names its holder. The system
    releases it when the holder ends, even by ``kill -9``, so a claim whose process is gone is taken over at once;
    the holder removes the file when it is done. When another process holds it: with ``wait`` this one waits,
    saying so once on stderr; else :class:`Held` names the holder. On a network file system the lock is as good as
    its ``flock`` (NFS v4 and Lustre with ``flock`` mounted keep it across machines).

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "run.json"
    >>> with claim(target):
    ...     with claim(target, wait=False):
    ...         pass
    Traceback (most recent call last):
    ...
    dpbook.io.Held: ... is being made by process ... on ... (since ...)
    """
    lock = Path(path).with_name(f".{Path(path).name}.claim")
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            if not wait:
                os.close(fd)
                raise Held(f"{path} is being made by {holder}") from None
            print(f"dpbook: waiting for {holder}, which is making {path}", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            current = os.stat(lock).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)  # the holder we waited for removed its claim as it ended: claim the file now there
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {HOST} (since {time.strftime('%Y-%m-%d %H:%M:%S')})".encode(), 0)
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)


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


def writable(path: str | Path, fix: str = "the folder results are written to") -> Path:
    """``path`` as a folder this process can write in, or can create: the folder, else its nearest existing parent,
    is tried with a temporary file (nothing is left behind, nothing is created), so that a read-only or misspelt
    location stops a command before its first run; a ValueError says which and why.

    >>> writable("/dev/null/results")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: cannot write in '/dev/null/results' (NotADirectoryError: Not a directory): choose a folder you can ...
    """
    if not str(path).strip():
        raise ValueError(f"is empty ({fix})")
    there = Path(path).absolute()
    while not there.exists() and there != there.parent:
        there = there.parent
    try:
        if not there.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
        with tempfile.TemporaryFile(dir=there):
            pass
    except OSError as err:
        raise ValueError(f"cannot write in {str(path)!r} ({type(err).__name__}: {err.strerror or err}): choose a "
                         f"folder you can write to ({fix})") from None
    return Path(path)


def folder(fix: str = "the folder results are written to") -> Domain:
    """A folder this process can write in (:func:`writable`)."""
    def read(given: str) -> Path:
        try:
            return writable(given, fix)
        except ValueError as err:
            raise Refused(str(err)) from None

    return Domain("a folder you can write in", read, fix=fix, bad=("/dev/null/folder",))


def output_file(fix: str = "the JSON file the results are written to") -> Domain:
    """A file to write: not a folder, in a folder this process can write in."""
    def read(given: str) -> Path:
        path = Path(given)
        if path.is_dir() or not given.strip() or given.endswith("/"):
            raise Refused(f"{given!r} is a folder, not a file: give a file name such as {Path(given, 'out.json')} "
                           f"({fix})")
        folder(fix)(str(path.parent))
        return path

    return Domain("a file you can write", read, fix=fix, bad=(".", "/dev/null/out.json"))


def input_file(kind: str, load: Callable[[Path], Any] | None = None, fix: str = "", *,
               folders: bool = False) -> Domain:
    """An existing file of ``kind`` (or a folder, where ``folders`` and ``load`` reads one); ``load(path)``, when
    given, must read it (its error says why it cannot), so that a damaged or wrong file stops the command at the
    door. The value is the path."""
    def read(given: str) -> Path:
        path = Path(given)
        if not (path.is_file() or (folders and path.is_dir())):
            state = "is a folder" if path.is_dir() else "does not exist"
            raise Refused(f"{given!r} {state}: give the path of {kind}" + (f" ({fix})" if fix else ""))
        if load is not None:
            try:
                load(path)
            except (ValueError, KeyError, TypeError, OSError) as err:
                detail = str(err)
                why = detail if detail.startswith(given) else f"{given} is not {kind} ({type(err).__name__}: {detail})"
                raise Refused(why + (f": {fix}" if fix else "")) from None
        return path

    return Domain(kind, read, fix=fix, bad=("no/such/file.json",) + (() if folders else (".",)))
