r"""The GPU check, one command: ``python -m dpbook.repro.gpu_check --output
data/results/gpu_check/analysis/<name>.json``.

On a machine with CUDA (``make gpu-check``) it records, in one file:

1. the private-step benchmark (:mod:`dpbook.repro.bench`) on CUDA: one DP-SGD step by every contender (the
   non-private step, dpbook's Book-Keeping and vmap paths, Opacus's hooks and ghost modes), time and peak memory,
   for the MNIST CNN and ResNet18-GN at B = 256;
2. one cell of each reproduction chapter at full shape (:data:`CELLS`), ``--steps`` steps (200) on synthetic data
   of the real shapes, classes and N, through the dry run (:func:`dpbook.repro.dry_run.dry_run`: the real model,
   the method from its plan at the real T and delta, the projected cost of the cell). Synthetic data is never a
   reported accuracy: only times and memory are recorded.

Without CUDA it stops with a message. ``--device cpu`` (with small ``--steps``, ``--bench-batch`` and
``--batch-size``) runs the same path on the CPU: the suite's test of everything but the device.
"""

from __future__ import annotations

__all__ = ["CELLS", "cells_of", "parser", "main"]

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from dpbook import checks, io
from dpbook.repro import bench, dry_run, results
from dpbook.repro.papers.chapter import Chapter

CELLS = {
    "dcsgd": ("IV", "resnet18_gn", "cifar10", 4.0, "dcsgd-e"),
    "dpdr": ("svhn", 3.0, "dpdr"),
    "psasc": ("imagenette", "psasc-momentum"),
}
"""The cell of each chapter the check trains: a ResNet of each paper on its real shapes, on a scaled-sum method
(DC-SGD-E, Book-Keeping) and on two that read per-sample gradients (DPDR and DP-PSASC*, vmap)."""


def cells_of(study: str, **parameters) -> tuple[Chapter, list]:
    """The chapter of ``study`` with every table (``parameters`` override its own) and the check's cell of it."""
    chapter = dry_run.reproduction(study, **parameters)
    wanted = CELLS[study]
    cell = next(c for c in chapter.selected if tuple(c) == wanted)
    return chapter, [cell]


def _bench(args, device: torch.device) -> dict:
    """The private-step benchmark's record, from its command line (:mod:`dpbook.repro.bench`), kept in memory."""
    return bench.main(["--models", *args.bench_models, "--batch-sizes", str(args.bench_batch), "--method-models",
                       "--profile-models", "--device", str(device), *(["--skip-memory"] if args.skip_memory else [])])


def parser() -> argparse.ArgumentParser:
    """The command line, every option's domain declared (:mod:`dpbook.checks`)."""
    parser = argparse.ArgumentParser(prog="python -m dpbook.repro.gpu_check", description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=io.output_file("the record"), required=True, help="the record (JSON), "
                        "e.g. data/results/gpu_check/analysis/h200.json")
    parser.add_argument("--device", type=bench.torch_device(), default="cuda",
                        help='"cuda" (default); "cpu" only for tests')
    parser.add_argument("--steps", type=checks.integers(1, "measured steps of each cell"), default=200,
                        help="measured steps of each cell (after a warm-up)")
    parser.add_argument("--bench-models", nargs="+", default=["mnist_cnn", "resnet18_gn"],
                        type=checks.choice(bench.SETTINGS, "benchmark model"))
    parser.add_argument("--bench-batch", type=checks.integers(1, "the benchmark's B"), default=256,
                        help="the benchmark's B")
    parser.add_argument("--batch-size", type=checks.integers(1, "the cells' B"),
                        help="the cells' B instead of the papers' (tests only)")
    parser.add_argument("--skip-memory", action="store_true", help="the benchmark without its peak memory (tests "
                        "only: it measures each contender in a child process)")
    return parser


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    device = torch.device(args.device)
    started = time.perf_counter()
    override = {} if args.batch_size is None else {"batch_size": args.batch_size}
    record = {"study": "gpu_check", "parameters": {k: (str(v) if isinstance(v, Path) else v)
                                                   for k, v in vars(args).items() if k != "output"},
              "provenance": results.provenance(device), "bench": _bench(args, device), "cells": {}}
    print(bench.tables(record["bench"]))
    for study in CELLS:
        chapter, cells = cells_of(study, device=str(device), **override)
        record["cells"][study] = dry_run.dry_run(chapter, steps=args.steps, cells=cells)
        print(f"\n{study}: {json.dumps(record['cells'][study]['cells'], indent=1)}\n"
              f"{json.dumps(record['cells'][study]['combinations'], indent=1)}", file=sys.stderr)
    record["seconds"] = round(time.perf_counter() - started, 1)
    io.atomic_write_json(record, args.output)
    print(f"gpu check: {record['seconds']:.0f} s; record: {args.output}")


if __name__ == "__main__":
    main()
