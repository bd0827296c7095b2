"""Drop the book's cached executions that are older than the library or the recorded results a page shows.

jupyter-cache (``_config.yml``: ``execute_notebooks: cache``) keys a notebook by its code cells alone. A chapter
that reads a recorded file (the bench's record, a benchmark's result files) or prints what library code computes
would be shown with its old outputs after that file or that code changed. ``make book`` runs this first: every
cached execution older than the newest file under ``dpbook/`` or ``data/`` is removed, and its notebook's
modification time is set to now, so that Sphinx reads the page again and jupyter-cache executes it again. A
checkout that changed neither keeps its whole cache (``make book`` again: nothing executed).

    .venv/bin/python tools/book_cache.py [CACHE_DIR]      # default: _build/.jupyter_cache
"""

from __future__ import annotations

import argparse
import os
from datetime import timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ("dpbook", "data")
"""What a page's outputs depend on besides its own code: the library and the recorded results."""


def newest_input(root: Path = ROOT, inputs=INPUTS) -> float:
    """The latest modification time (seconds since the epoch) of the files under ``inputs`` (Python's bytecode
    caches left out), 0 if there are none."""
    files = (p for d in inputs for p in (root / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return max((p.stat().st_mtime for p in files), default=0.0)


def refresh(cache_dir: Path, since: float) -> list[Path]:
    """Remove the cached executions created before ``since`` (seconds since the epoch) and touch their notebooks;
    the notebooks touched, each once (a notebook may have several cached executions, one per version of its code),
    in the cache's order. A missing cache is an empty one."""
    if not (cache_dir / "global.db").exists():
        return []
    from jupyter_cache import get_cache

    cache = get_cache(cache_dir)
    stale = []
    for record in cache.list_cache_records():
        created = record.created.replace(tzinfo=timezone.utc).timestamp()  # jupyter-cache stores naive UTC
        if created < since:
            cache.remove_cache(record.pk)
            notebook = Path(record.uri)
            if notebook.exists() and notebook not in stale:
                os.utime(notebook)
                stale.append(notebook)
    return stale


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="tools/book_cache.py", description=__doc__.split("\n")[0])
    parser.add_argument("cache_dir", nargs="?", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    args = parser.parse_args(argv)
    for notebook in refresh(args.cache_dir, newest_input()):
        print(f"book_cache: {notebook.name} is older than the library or the results it reads: executed again")


if __name__ == "__main__":
    main()
