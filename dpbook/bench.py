"""Benchmark of one private step, measured side by side in one run: ``python -m dpbook.bench``.

1. Step time on the MNIST CNN (26,010 parameters) at B = 256 (28x28 inputs, fixed batch, median of repeats):
   the non-private step, dpbook's DP-SGD step (``DPOptimizer`` + ``DPSGD``), Opacus's ``make_private`` DP-SGD
   step (RDP accountant, same model, same data), and the per-sample-gradient engines alone (torch.func vs Opacus
   hooks), which is how ``dpbook.per_sample`` chose ``torch.func``. Ratios are printed.
2. Peak memory of a ResNet18-GN private step at logical B = 256 with two micro-batch sizes, each measured in a
   fresh child process (peak resident memory above the same process without the step; on a GPU, peak allocated).

Options: ``--repeats``, ``--threads``, ``--micro-batch-sizes``, ``--resnet-batch``, ``--skip-memory``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
import warnings

import torch
from torch import nn

from dpbook.methods import DPSGD
from dpbook.models import mnist_cnn, resnet18_gn
from dpbook.optim import DPOptimizer
from dpbook.per_sample import PerSampleGradients, flat_norms, weighted_sum


def interleaved_median_ms(steps: dict, repeats: int, device: torch.device) -> dict[str, float]:
    """Median wall time (ms) of each step function, timed in interleaved rounds (A B C A B C ...) so that a
    change in the machine's load hits every contender alike; one warm-up call each first."""
    def once(fn) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    for fn in steps.values():
        fn()
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, fn in steps.items():
            times[name].append(once(fn))
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def _batch(B: int, shape, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, *shape, generator=g).to(device), torch.randint(0, 10, (B,), generator=g).to(device)


def step_times(*, B: int = 256, repeats: int = 7, device: torch.device) -> dict[str, float]:
    x, y = _batch(B, (1, 28, 28), device)
    loss_fn = nn.functional.cross_entropy

    model = mnist_cnn().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def nonprivate():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    dp_model = mnist_cnn().to(device)
    engine = DPOptimizer(dp_model, torch.optim.SGD(dp_model.parameters(), lr=0.1), DPSGD(C=1.0, sigma=1.0),
                         sample_rate=B / 60000, expected_batch_size=B)
    psg = PerSampleGradients(mnist_cnn().to(device), loss_fn)
    clip = DPSGD(C=1.0, sigma=1.0)

    def torch_func_clip():
        grads = psg(x, y)
        weighted_sum(grads, clip.weights(flat_norms(grads)))

    steps = {
        "non-private step": nonprivate,
        "dpbook DP-SGD step": lambda: engine.step(x, y),
        "Opacus DP-SGD step": _opacus_step(B, x, y, device),
        "per-sample grads + clip: torch.func": torch_func_clip,
        "per-sample grads + clip: Opacus hooks": _opacus_hooks_clip(x, y, device),
    }
    return interleaved_median_ms(steps, repeats, device)


def _opacus_step(B, x, y, device):
    from opacus import PrivacyEngine

    model = mnist_cnn().to(device)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x.cpu(), y.cpu()), batch_size=B)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, _ = PrivacyEngine(accountant="rdp").make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=loader,
            noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=True)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def _opacus_hooks_clip(x, y, device):
    from opacus import GradSampleModule

    model = GradSampleModule(mnist_cnn().to(device))
    params = [p for p in model.parameters() if p.requires_grad]

    def run():
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y, reduction="sum").backward()
        grads = [p.grad_sample for p in params]
        weighted_sum(grads, DPSGD(C=1.0, sigma=1.0).weights(flat_norms(grads)))
        for p in params:
            p.grad_sample = None

    return run


def _memory_child(B: int, micro_batch_size: int, do_step: bool, device: torch.device) -> float:
    """In a fresh process: peak memory (MiB) of building ResNet18-GN and data, plus one private step if asked."""
    torch.manual_seed(0)
    model = resnet18_gn().to(device)
    x, y = _batch(B, (3, 32, 32), device)
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), DPSGD(C=1.0, sigma=1.0),
                         sample_rate=B / 50000, expected_batch_size=B, micro_batch_size=micro_batch_size)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    if do_step:
        engine.step(x, y)
    seconds = time.perf_counter() - start
    if device.type == "cuda":
        return {"peak_mib": torch.cuda.max_memory_allocated() / 2**20, "seconds": seconds}
    return {"peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "seconds": seconds}


def memory(B: int, micro_batch_sizes, threads: int, device: torch.device) -> dict:
    def child(mbs, do_step):
        out = subprocess.run(
            [sys.executable, "-m", "dpbook.bench", "--memory-child", str(mbs), "--resnet-batch", str(B),
             "--threads", str(threads), "--device", str(device)] + (["--with-step"] if do_step else []),
            capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    baseline = child(micro_batch_sizes[0], False)["peak_mib"] if device.type != "cuda" else 0.0
    return {mbs: {**(r := child(mbs, True)), "step_peak_mib": r["peak_mib"] - baseline} for mbs in micro_batch_sizes}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--micro-batch-sizes", type=int, nargs=2, default=[32, 128])
    parser.add_argument("--resnet-batch", type=int, default=256)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--with-step", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.memory_child is not None:
        print(json.dumps(_memory_child(args.resnet_batch, args.memory_child, args.with_step, device)))
        return

    print(f"dpbook.bench: torch {torch.__version__}, device {device}, {args.threads} thread(s), "
          f"median of {args.repeats}")
    print("\n1. One step of the MNIST CNN (26,010 parameters), B = 256")
    times = step_times(repeats=args.repeats, device=device)
    base = times["non-private step"]
    for name, ms in times.items():
        print(f"   {name:<40} {ms:9.1f} ms   {ms / base:5.2f} x non-private")
    ratio = times["dpbook DP-SGD step"] / times["Opacus DP-SGD step"]
    print(f"   dpbook DP-SGD / Opacus DP-SGD: {ratio:.2f}")
    if args.skip_memory:
        return
    print(f"\n2. Peak memory of one ResNet18-GN private step at logical B = {args.resnet_batch}")
    for mbs, r in memory(args.resnet_batch, args.micro_batch_sizes, args.threads, device).items():
        print(f"   micro-batch {mbs:4d}: step peak {r['step_peak_mib']:8.0f} MiB above the model and data "
              f"(process peak {r['peak_mib']:.0f} MiB), {r['seconds']:.1f} s")


if __name__ == "__main__":
    main()
