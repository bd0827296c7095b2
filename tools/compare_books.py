"""Compare what two builds of the book show: every page's rendered cell outputs (text and tables) and figures.

    python tools/compare_books.py OLD/_build/html NEW/_build/html [--show 5]

For a refactoring that must change no output: build the book at both commits (``make book`` in two clones), then
run this. For each page of the table of contents it prints whether its outputs' text and its figures are identical;
for a page that differs, the first differing lines (``--show``) and which figures differ and by how many pixels.
Numbers that measure the machine rather than the method (wall-clock times, a build's absolute paths) differ between
any two builds: the report names them, and a person reads them.
"""

from __future__ import annotations

import argparse
import difflib
import io
import re
import sys
from pathlib import Path

import numpy as np
from bs4 import BeautifulSoup
from matplotlib import image as mpimg


def outputs(page: Path) -> tuple[list[str], list[np.ndarray]]:
    """The text of every cell output of a rendered page, one line per element, and its figures as pixel arrays."""
    soup = BeautifulSoup(page.read_text(), "html.parser")
    texts, figures = [], []
    for cell in soup.select("div.cell_output"):
        texts += [line for line in cell.get_text("\n").splitlines() if line.strip()]
        for img in cell.select("img"):
            source = page.parent / img["src"]
            figures.append(mpimg.imread(io.BytesIO(source.read_bytes()), format="png"))
    return texts, figures


def pixel_difference(a: np.ndarray, b: np.ndarray) -> str | None:
    """None when two figures are the same image; else how they differ."""
    if a.shape != b.shape:
        return f"size {a.shape[1]}x{a.shape[0]} -> {b.shape[1]}x{b.shape[0]}"
    changed = int(np.any(np.abs(a.astype(float) - b.astype(float)) > 1e-6, axis=-1).sum()) if a.ndim == 3 else int(
        (a != b).sum())
    return None if changed == 0 else f"{changed} of {a.shape[0] * a.shape[1]} pixels"


def compare(old: Path, new: Path, show: int) -> int:
    """Print the comparison of every page the two builds share; return the number of pages that differ."""
    pages = sorted(p.relative_to(old) for p in old.rglob("*.html")
                   if "_static" not in p.parts and "genindex" not in p.name and "search" not in p.name)
    differing = 0
    for rel in pages:
        if not (new / rel).exists():
            print(f"{rel}: missing from the new build")
            differing += 1
            continue
        (t0, f0), (t1, f1) = outputs(old / rel), outputs(new / rel)
        diff = [line for line in difflib.unified_diff(t0, t1, lineterm="", n=0)
                if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        figures = [f"figure {k + 1}: {d}" for k, (a, b) in enumerate(zip(f0, f1)) if (d := pixel_difference(a, b))]
        if len(f0) != len(f1):
            figures.append(f"{len(f0)} figures -> {len(f1)}")
        if not diff and not figures:
            print(f"{rel}: same ({len(t0)} output lines, {len(f0)} figures)")
            continue
        differing += 1
        print(f"{rel}: {len(diff)} output lines differ; {len(figures)} figure differences")
        for line in diff[:show] + figures:
            print("    " + re.sub(r"\s+", " ", line)[:160])
    return differing


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--show", type=int, default=5, help="differing output lines shown per page")
    args = parser.parse_args(argv)
    differing = compare(args.old, args.new, args.show)
    print(f"{differing} page(s) differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
