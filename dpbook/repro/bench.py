"""The cost of one private step, measured side by side in one run: ``python -m dpbook.repro.bench``.

1. **Engines.** For each model and logical batch B, one DP-SGD step (forward, backward, clip, noise, optimizer
   step) by five contenders: the non-private step, dpbook's Book-Keeping path, dpbook's vmap path, Opacus's hooks
   (``grad_sample_mode="hooks"``) and Opacus's ghost clipping (``"ghost"``). Times are medians of interleaved
   rounds (A B C ... A B C ...), so that a change in the machine's load hits every contender alike; a ratio of two
   steps is taken round by round and given as its median and quartiles over the rounds (:func:`paired`); peak memory
   is measured in a fresh child process per contender (resident memory above the process before its first step;
   on a GPU, peak allocated). Every contender processes the logical batch in the same physical batches.
2. **Methods.** Every minibatch method's step on the engine's default path (Book-Keeping) and on the ``vmap``
   path, against DP-SGD's fast step, and DC-SGD-E's threshold search alone.
3. **Profile.** Where DP-SGD's Book-Keeping step spends its time, stage by stage and layer by layer, against the
   non-private step: the forward and backward both steps run, each layer's per-sample norms and re-weighted sum,
   the noise.

The models are those the reproductions train: the standard DP MNIST CNN (in place of the papers' own
[DCSGD-35]), the CIFAR-10 CNN, ResNet18-GN on 32x32 inputs and the trainable head of BERT-base (its last encoder
layer, pooler and classifier on 128 tokens, :class:`dpbook.models.BertHead`). Inputs are random: the cost of a
step does not depend on the values.

``--output FILE`` records everything as JSON (a rerun resumes: finished cells are kept), ``--table FILE`` prints
the markdown tables of a record: the book's tables (its chapter and the page What it costs) are rendered from the
recorded file.
"""

from __future__ import annotations

__all__ = [
    "loss_fn", "now", "reset_peak_memory", "peak_memory_mib", "memory_mib", "interleaved_rounds_ms", "medians",
    "Spread", "paired", "Setting", "SETTINGS", "CONTENDERS", "physical_batch", "batch", "make_step", "engine_rounds",
    "memory_child", "BENCH_METHODS", "method_times", "PROFILE_B", "SHARED", "step_profile", "profile_share",
    "profile_floor", "profile_table", "SCHEMA", "MICRO_WHY", "SPREAD_NOTE", "tables", "recorded", "torch_device",
    "parser", "main", "run"
]

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from dpbook import checks, models
from dpbook.io import atomic_write_json, input_file, output_file, resumable
from dpbook.methods import METHODS, make_method
from dpbook.noise import GaussianNoise
from dpbook.optim import DPOptimizer
from dpbook.per_sample import BookKeeping, clip_factors
from dpbook.repro.cast import in_book_order
from dpbook.tasks import TASKS

loss_fn = nn.functional.cross_entropy


def now(device: torch.device) -> float:
    """``time.perf_counter()`` once the work queued on ``device`` is done (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak: CUDA's peak allocated memory, or this process's peak resident memory (Linux)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


def peak_memory_mib(device: torch.device) -> float:
    """The peak since :func:`reset_peak_memory`, in MiB: CUDA's allocated tensors, or the resident memory."""
    return torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else _status_mib("VmHWM")


def memory_mib(device: torch.device) -> float:
    """The memory now, in MiB, as :func:`peak_memory_mib` counts it."""
    return torch.cuda.memory_allocated() / 2**20 if device.type == "cuda" else _status_mib("VmRSS")


def interleaved_rounds_ms(steps: dict, repeats: int, device: torch.device) -> dict[str, list[float]]:
    """Wall time (ms) of each step function in each of ``repeats`` interleaved rounds (A B C A B C ...), so that a
    change in the machine's load hits every contender alike; one warm-up call each first."""
    def once(fn) -> float:
        start = now(device)
        fn()
        return 1000 * (now(device) - start)

    for fn in steps.values():
        fn()
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, fn in steps.items():
            times[name].append(once(fn))
    return times


def medians(rounds: dict[str, list[float]]) -> dict[str, float]:
    """Each step's median over its rounds."""
    return {name: statistics.median(t) for name, t in rounds.items()}


@dataclass(frozen=True)
class Spread:
    """A ratio's median over the rounds, and its quartiles."""

    low: float
    median: float
    high: float

    def __str__(self) -> str:
        return f"{self.median:.2f}x ({self.low:.2f} to {self.high:.2f})"


def paired(rounds: dict[str, list[float]], parts: Sequence[str], base: str) -> Spread:
    """The time of ``parts`` together over ``base``'s, taken round by round (each round times them all within
    moments of one another, so a slower minute of a shared machine slows both sides of a ratio) and summarised by
    its median and quartiles over the rounds.

    >>> paired({"a": [2.0, 3.0, 20.0], "b": [1.0, 1.0, 1.0], "base": [1.0, 2.0, 10.0]}, ["a", "b"], "base")
    Spread(low=2.05, median=2.1, high=2.55)
    """
    ratios = [sum(rounds[p][i] for p in parts) / rounds[base][i] for i in range(len(rounds[base]))]
    low, median, high = np.quantile(ratios, [0.25, 0.5, 0.75])
    return Spread(float(low), float(median), float(high))


# --- what is benchmarked ----------------------------------------------------------------------------------------


def _bert_head() -> nn.Module:
    from transformers import BertConfig

    from dpbook.models import BertHead
    return BertHead(BertConfig())  # BERT-base sizes, random weights


@dataclass(frozen=True)
class Setting:
    label: str
    build: Callable[[], nn.Module]
    task: str  # the task registry's dataset: classes, and the training-set size N (the sample rate is B / N)
    batch_sizes: tuple[int, ...]
    micro_batch: int | None  # the physical batch on a CPU, or where the GPU runs out of memory (:func:`physical_batch`)
    input_shape: tuple[int, ...] | None = None  # one example's input (None: the task's)
    repeats: int = 7  # interleaved rounds (fewer for the models whose steps take seconds)

    def micro(self, B: int) -> int | None:
        return None if self.micro_batch is None or self.micro_batch >= B else self.micro_batch

    @property
    def shape(self) -> tuple[int, ...]:
        return self.input_shape or TASKS[self.task].shape

    @property
    def classes(self) -> int:
        return TASKS[self.task].classes

    @property
    def N(self) -> int:
        return TASKS[self.task].train_size


SETTINGS = {
    "mnist_cnn": Setting("MNIST CNN (26,010 parameters)", models.mnist_cnn, "mnist", (64, 256, 1024), None),
    "cifar10_cnn": Setting("CIFAR-10 CNN (550,570)", models.cifar10_cnn, "cifar10", (64, 256, 1024), None),
    "resnet18_gn": Setting("ResNet18-GN, 32x32 (11.2M)", models.resnet18_gn, "cifar10", (64, 256), 64, repeats=3),
    "bert_head": Setting("BERT-base head, 128 tokens (7.7M)", _bert_head, "qnli", (64, 256), 64,
                         input_shape=(128, 768), repeats=3),  # the head's input: the frozen layers' hidden states
}

CONTENDERS = ("non-private", "dpbook book-keeping", "dpbook vmap", "Opacus hooks", "Opacus ghost")


def physical_batch(setting: Setting, B: int, device, asked: int | None = None) -> tuple[int | None, str]:
    """The micro-batch every contender processes a logical batch of B in (None: B at once), and why.

    Asked (``--micro-batch``), it is that. On a GPU, B at once: the step is then the engine's, compared like with
    like; :func:`engine_rounds` falls back to the setting's micro-batch when B at once runs out of the GPU's
    memory. On a CPU, the setting's micro-batch (ResNet18-GN's and the BERT head's 64): the vmap and Opacus
    contenders hold every example's gradient at once, about 4 bytes x parameters x B (11.5 GB for ResNet18-GN at
    B = 256), which the CPU machine's memory does not hold beside the other contenders."""
    if asked is not None:
        return (asked, "asked (--micro-batch)") if asked < B else (None, "")
    if torch.device(device).type == "cuda":
        return None, ""
    micro = setting.micro(B)
    return micro, ("on a CPU, the setting's micro-batch (every example's gradient at once by the vmap and Opacus "
                   "contenders: 4 bytes x parameters x B)" if micro else "")


def batch(setting: Setting, B: int, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, *setting.shape, generator=g)
    return x.to(device), torch.randint(0, setting.classes, (B,), generator=g).to(device)


def _slices(B: int, micro: int | None):
    step = B if micro is None else micro
    return [slice(s, min(s + step, B)) for s in range(0, B, step)]


def make_step(contender: str, setting: Setting, x, y, device, *, method: str = "dpsgd",
              micro: int | None = None) -> Callable[[], None]:
    """One logical step of ``contender`` on the batch (x, y), in physical batches of ``micro`` (None: at once)."""
    B = len(x)
    torch.manual_seed(0)
    model = setting.build().to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    if contender == "non-private":
        optimizer = torch.optim.SGD(params, lr=0.01)

        def step():
            for sl in _slices(B, micro):
                (loss_fn(model(x[sl]), y[sl], reduction="sum") / B).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return step
    if contender.startswith("dpbook"):
        dp_method = make_method(method, **METHODS[method].declaration.example)
        engine = DPOptimizer(model, torch.optim.SGD(params, lr=0.01), dp_method,
                             sample_rate=B / setting.N, expected_batch_size=B, micro_batch_size=micro,
                             per_sample=contender.split()[1])
        return lambda: engine.step(x, y)
    return _opacus_step(contender.split()[1], model, x, y, micro)


def _opacus_step(mode: str, model, x, y, micro: int | None) -> Callable[[], None]:
    from opacus import PrivacyEngine

    B = len(x)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x.cpu(), y.cpu()), batch_size=B)
    with warnings.catch_warnings():  # Opacus's notices about secure RNG and its accountant's defaults
        warnings.simplefilter("ignore")
        private = PrivacyEngine(accountant="rdp").make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01), data_loader=loader,
            noise_multiplier=1.0, max_grad_norm=1.0, grad_sample_mode=mode, criterion=nn.CrossEntropyLoss())
    model, optimizer, criterion = private[0], private[1], private[2] if mode == "ghost" else nn.CrossEntropyLoss()
    slices = _slices(B, micro)

    def step():
        with warnings.catch_warnings():  # torch's notice that Opacus's full backward hooks see no input gradient
            warnings.filterwarnings("ignore", "Full backward hook is firing", UserWarning)
            for k, sl in enumerate(slices):  # Opacus's virtual steps (its BatchMemoryManager): clip, sum, skip
                criterion(model(x[sl]), y[sl]).backward()
                optimizer.signal_skip_step(do_skip=k < len(slices) - 1)
                optimizer.step()
                optimizer.zero_grad()
    return step


# --- 1. engines ------------------------------------------------------------------------------------------------


def engine_rounds(name: str, B: int, contenders, repeats: int | None, device,
                  asked: int | None = None) -> tuple[dict[str, list[float]], int | None, str]:
    """The interleaved rounds of the contenders' steps (ms), the micro-batch they ran in and why
    (:func:`physical_batch`; on a GPU that B at once runs out of memory, the setting's micro-batch)."""
    setting = SETTINGS[name]
    x, y = batch(setting, B, device)
    micro, why = physical_batch(setting, B, device, asked)
    repeats = setting.repeats if repeats is None else repeats
    fallback = torch.device(device).type == "cuda" and micro is None and setting.micro(B) is not None
    try:
        steps = {c: make_step(c, setting, x, y, device, micro=micro) for c in contenders}
        return interleaved_rounds_ms(steps, repeats, device), micro, why
    except torch.cuda.OutOfMemoryError:
        if not fallback:
            raise
    steps = None  # the failed contenders' models and tensors are freed before the smaller batches start
    torch.cuda.empty_cache()
    why = f"B = {B} at once ran out of the GPU's memory (torch.cuda.OutOfMemoryError)"
    return engine_rounds(name, B, contenders, repeats, device, setting.micro(B))[0], setting.micro(B), why


def _status_mib(field: str) -> float:
    """``VmRSS`` (resident memory now) or ``VmHWM`` (its peak) of this process, in MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def memory_child(name: str, B: int, contender: str, device, micro: int | None = None) -> dict:
    """In a fresh process: peak memory (MiB) of one step, after a first one, above the process before it (the
    steady state: the first step holds one-time costs, e.g. Book-Keeping's self-check; on Linux, the peak resident
    memory is reset through ``/proc/self/clear_refs``)."""
    setting = SETTINGS[name]
    x, y = batch(setting, B, device)
    step = make_step(contender, setting, x, y, device, micro=micro)
    step()
    now(device)
    before = memory_mib(device)
    reset_peak_memory(device)
    step()
    return {"peak_mib": peak_memory_mib(device) - before}


def _peak_memory(name: str, B: int, contender: str, threads: int, device, micro: int | None) -> float:
    # glibc returns every block of 64 KiB or more to the system when it is freed: resident memory then follows the
    # tensors alive (its default moves the threshold up after frees, and a later step reuses memory unseen)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}
    out = subprocess.run([sys.executable, "-m", "dpbook.repro.bench", "--memory-child", name, str(B), contender,
                          "--threads", str(threads), "--device", str(device),
                          *(["--micro-batch", str(micro)] if micro else [])], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"the memory child of {name} B={B} {contender} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"]


# --- 2. methods ------------------------------------------------------------------------------------------------

BENCH_METHODS = tuple(name for name in in_book_order() if not METHODS[name].full_batch)
"""Every minibatch method, built with its declared example (all of them take the Book-Keeping path)."""


def method_times(name: str, B: int, repeats: int | None, device) -> dict:
    """Every method's step on the engine's default path and on the ``vmap`` path (``"rounds"``: ms in each
    interleaved round), and DC-SGD-E's threshold search alone (``"search"``, median ms). A method's first step
    (DPDR's and DIFF's DP-SGD step) is the warm-up: the timed steps are its steady state (DPDR's GDR steps up to
    ``s``, DIFF2's differences up to its first restart, DP-PSASC*'s :math:`K_0` stored iterates from the third
    step)."""
    setting = SETTINGS[name]
    x, y = batch(setting, B, device)
    steps = {}
    for m in BENCH_METHODS:
        steps[m] = make_step("dpbook auto", setting, x, y, device, method=m)
        steps[f"{m} (vmap)"] = make_step("dpbook vmap", setting, x, y, device, method=m)
    for fn in steps.values():  # a second warm-up: DP-PSASC*'s window fills (K0 = 2)
        fn()
    rounds = interleaved_rounds_ms(steps, setting.repeats if repeats is None else repeats, device)
    search = make_method("dcsgd-e", **METHODS["dcsgd-e"].declaration.example)  # its search on a histogram of real norms
    dcsgd = DPOptimizer(model := setting.build().to(device), torch.optim.SGD(model.parameters(), lr=0.01), search,
                        sample_rate=B / setting.N, expected_batch_size=B)
    dcsgd.step(x, y)
    H = search.last_release["H"].numpy()
    search_ms = medians(interleaved_rounds_ms({"search": lambda: search.adapt(H)}, 50, device))["search"]
    return {"rounds": rounds, "search": search_ms}


# --- 3. profile -------------------------------------------------------------------------------------------------

PROFILE_B = 256
"""The logical batch of the profile, as of the methods comparison."""

SHARED = "forward and backward"
"""The profile's stage that a non-private step runs too: the forward, and the backward to the layers' outputs (the
non-private step's backward goes on to the weight gradients)."""


def step_profile(name: str, B: int, repeats: int | None, device) -> dict:
    """DP-SGD's Book-Keeping step taken apart (ms in each of the same interleaved rounds, by default three times
    the setting's: each stage is short): the non-private and the private step whole; :data:`SHARED`; each layer's
    per-sample norms from the stored tensors (:meth:`~dpbook.per_sample.BookKeeping.recorded`) and its re-weighted
    sum with DP-SGD's weights at C = 1; one Gaussian draw per parameter (the release's noise). What the stages leave
    of the step is the engine's glue: weights, accumulators, the optimizer's update."""
    setting = SETTINGS[name]
    x, y = batch(setting, B, device)
    steps = {c: make_step(c, setting, x, y, device) for c in ("non-private", "dpbook book-keeping")}
    torch.manual_seed(0)
    model = setting.build().to(device)
    shared, layered = BookKeeping(model, loss_fn), BookKeeping(model, loss_fn)  # two engines: their stored tensors
    w = clip_factors(layered(x, y).norms, 1.0)
    noise = GaussianNoise(0, device=device)

    def forward_backward():
        with shared.recorded(x, y):
            pass

    stages = {SHARED: forward_backward}
    with layered.recorded(x, y) as rules:  # one pass's stored tensors, kept while its layers are timed
        for layer, rule in rules.items():
            stages[f"{layer} norms"] = rule
            stages[f"{layer} sum"] = functools.partial(rule().weighted, w)
        stages["noise"] = lambda: [noise.like(p, 1.0) for p in layered.params]
        rounds = interleaved_rounds_ms({**steps, **stages}, 3 * setting.repeats if repeats is None else repeats,
                                       device)
    return {"model": name, "B": B, "ms": medians(rounds), "rounds": rounds,
            "strategies": {r["layer"]: r["strategy"] for r in layered.plan(x)}}


def _stages(profile: dict, stage: str) -> list[str]:
    return [f"{layer} {stage}" for layer in profile["strategies"]] if stage in ("norms", "sum") else [stage]


def profile_share(profile: dict, stage: str) -> float:
    """A stage's time over the non-private step's in the same round, its median over the rounds: a stage of the
    profile (:data:`SHARED`, ``"noise"``, ``"conv1 norms"``, a whole step), or ``"norms"`` and ``"sum"``, every
    layer's together."""
    return paired(profile["rounds"], _stages(profile, stage), "non-private").median


def profile_floor(profile: dict) -> Spread:
    """The stages together over the non-private step, round by round: what the private step would cost, relative to
    the non-private one, if the engine's glue were free (every stage is work a private step of this engine cannot
    skip: the pass, each layer's norms and sum, the noise)."""
    stages = [s for stage in (SHARED, "norms", "sum", "noise") for s in _stages(profile, stage)]
    return paired(profile["rounds"], stages, "non-private")


def profile_table(profile: dict) -> str:
    """The markdown table of one profile: each stage's median time and its share of the non-private step."""
    rows = [("non-private step (forward, backward, update)", "non-private"),
            ("DP-SGD step (Book-Keeping)", "dpbook book-keeping"), (f"{SHARED} to the layers' outputs", SHARED)]
    for layer, strategy in profile["strategies"].items():
        rows += [(f"{layer}: norms ({strategy})", f"{layer} norms"),
                 (f"{layer}: re-weighted sum", f"{layer} sum")]
    rows.append(("noise (one draw per parameter)", "noise"))
    lines = ["| stage | time | / non-private step |", "|---|---|---|"]
    lines += [f"| {label} | {profile['ms'][key]:,.2f} ms | {profile_share(profile, key):.2f} |" for label, key in rows]
    return "\n".join(lines)


# --- records and tables ----------------------------------------------------------------------------------------

SCHEMA = 2
"""The record's layout: 2 keeps every round's times (``"rounds"``) beside their medians (``"ms"``); a record of
another layout is not resumed."""
MICRO_WHY = physical_batch(SETTINGS["resnet18_gn"], 256, "cpu")[1]
"""Why a cell micro-batches, in a record (on a CPU) made before each cell recorded its reason."""

SPREAD_NOTE = ("Ratios: the median over the interleaved rounds of a step's time over {base}'s in the same round, "
               "and in brackets its quartiles.")


def tables(record: dict) -> str:
    """The markdown tables of a recorded benchmark: each step's median time, its ratio to the non-private step
    (:func:`paired`: median and quartiles over the rounds) and its peak memory."""
    lines = ["| model | B | " + " | ".join(CONTENDERS) + " |", "|---|---|" + "---|" * len(CONTENDERS)]
    for cell in sorted(record["cells"], key=lambda c: (list(SETTINGS).index(c["model"]), c["B"])):
        entries = []
        for c in CONTENDERS:
            ms = cell["ms"].get(c)
            ratio = f", {paired(cell['rounds'], [c], 'non-private')}" \
                if ms is not None and c != "non-private" and "non-private" in cell["ms"] else ""
            entries.append("not run" if ms is None else f"{ms:,.0f} ms{ratio}"
                           + (f", {cell['peak_mib'][c]:,.0f} MiB" if c in cell.get("peak_mib", {}) else ""))
        micro = f" (micro-batches of {cell['micro_batch']})" if cell["micro_batch"] else ""
        lines.append(f"| {SETTINGS[cell['model']].label} | {cell['B']}{micro} | " + " | ".join(entries) + " |")
    out = "\n".join(lines)
    on_cpu = str(record.get("provenance", {}).get("device", "cpu")).startswith("cpu")
    earlier = MICRO_WHY if on_cpu else "the setting's micro-batch (recorded before the benchmark kept its reason)"
    micro = [f"{SETTINGS[c['model']].label} at B = {c['B']}: {c.get('micro_batch_why') or earlier}"
             for c in record["cells"] if c["micro_batch"]]
    if micro:
        out += "\n\nMicro-batches (every contender the same): " + "; ".join(micro) + "."
    else:
        out += "\n\nEvery cell's logical batch ran at once (no micro-batches)."
    if any("non-private" in cell["ms"] for cell in record["cells"]):
        out += "\n\n" + SPREAD_NOTE.format(base="the non-private step")
    for m in record.get("methods", []):
        out += (f"\n\nEvery method's step, {SETTINGS[m['model']].label}, B = {m['B']}: the engine's default path "
                "(Book-Keeping) and the vmap path"
                "\n\n| method | step | / DP-SGD | vmap | / DP-SGD |\n|---|---|---|---|---|\n")
        out += "\n".join(f"| {k} | {_method_cell(m, k)} | {_method_cell(m, f'{k} (vmap)')} |" for k in BENCH_METHODS
                          if k in m["ms"])
        out += (f"\n\n{SPREAD_NOTE.format(base='DP-SGD')} DC-SGD-E's threshold search: {m['search']:.3f} ms, "
                f"{100 * m['search'] / m['ms']['dcsgd-e']:.2f} % of its step.")
    for profile in record.get("profile", []):
        out += (f"\n\nWhere DP-SGD's step goes, {SETTINGS[profile['model']].label}, B = {profile['B']} (stages timed "
                f"apart; median times, and shares as the ratios above)\n\n{profile_table(profile)}\n\n"
                f"The stages together: {profile_floor(profile)} the non-private step.")
    return out


def _method_cell(m: dict, step: str) -> str:
    if step not in m["ms"]:
        return "not run | "
    return f"{m['ms'][step]:,.1f} ms | {paired(m['rounds'], [step], 'dpsgd')}"


def recorded(path: str | Path | None = None) -> dict:
    """The committed record of this benchmark on the CPU (``data/results/bench/analysis/cpu.json``), or the record
    at ``path``: what a chapter's claim about time is checked against. A time measured while a chapter executes
    says how busy the machine is; the record's ratios were taken side by side over many interleaved rounds.

    >>> record = recorded()
    >>> record["study"], "rounds" in record["methods"][0]
    ('bench', True)
    """
    from dpbook.repro.results import ANALYSIS_DIR, RESULTS_DIR

    return _bench_record(Path(path) if path is not None else RESULTS_DIR / "bench" / ANALYSIS_DIR / "cpu.json")


def _bench_record(path: Path) -> dict:
    """A record this benchmark wrote (``--output``): a ValueError says what else the file is."""
    record = json.loads(path.read_text())
    if not isinstance(record, dict) or record.get("study") != "bench":
        raise ValueError("its 'study' is not 'bench'")
    schema = (record.get("parameters") or {}).get("schema", 1)
    if schema != SCHEMA:
        raise ValueError(f"it has the layout of schema {schema}, not {SCHEMA} (every round's times); record it again "
                         "with --output and --force")
    return record


def torch_device(fix: str = "cuda, cuda:0 or cpu") -> checks.Domain:
    """A torch device this machine has: ``cpu``, or ``cuda``/``cuda:N`` where CUDA is available."""
    def read(given: str):
        try:
            found = torch.device(given)
        except RuntimeError as err:
            raise checks.Refused(f"{given!r} is not a torch device ({str(err).splitlines()[0]}): use {fix}") from None
        if found.type == "cuda" and not torch.cuda.is_available():
            raise checks.Refused(f"{given}: CUDA is asked for, and torch.cuda.is_available() is False here (torch "
                          f"{torch.__version__}, CUDA build {torch.version.cuda}): run it on a machine with an "
                          "NVIDIA GPU and a CUDA build of torch (cpu runs the same path on the CPU, for tests)")
        return given

    return checks.Domain("a torch device", read, fix=fix, bad=("gpu0",))


def parser() -> argparse.ArgumentParser:
    """The command line, every option's domain declared (:mod:`dpbook.checks`)."""
    parser = argparse.ArgumentParser(prog="python -m dpbook.repro.bench", description=__doc__.split("\n")[0])
    model = checks.choice(SETTINGS, "model")
    parser.add_argument("--models", nargs="+", default=list(SETTINGS), type=model,
                        help=f"models of the engine comparison (default: all of {', '.join(SETTINGS)})")
    parser.add_argument("--batch-sizes", type=checks.integers(1, "expected batch sizes B"), nargs="+",
                        help="instead of each model's (64, 256[, 1024])")
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS),
                        type=checks.choice(CONTENDERS, "contender"),
                        help=f"the steps compared (default: all of {', '.join(CONTENDERS)})")
    parser.add_argument("--repeats", type=checks.integers(1, "interleaved rounds per cell"),
                        help="interleaved rounds per cell (median; default 7, 3 for the ResNet and BERT; the profile "
                        "three times as many)")
    parser.add_argument("--method-models", nargs="*", default=["mnist_cnn", "cifar10_cnn"], type=model,
                        help="models of the methods comparison (B = 256)")
    parser.add_argument("--profile-models", nargs="*", default=["mnist_cnn", "cifar10_cnn"], type=model,
                        help=f"models of the profile of DP-SGD's step (B = {PROFILE_B})")
    parser.add_argument("--threads", type=checks.integers(1, "torch threads"), default=torch.get_num_threads())
    parser.add_argument("--device", type=torch_device(), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--micro-batch", type=checks.integers(1, "the physical batch"),
                        help="process every logical batch in physical batches of this size (default: on a GPU, B at "
                        "once unless it runs out of memory; on a CPU, the setting's: 64 for ResNet18-GN and BERT)")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--output", type=output_file(), help="record as JSON (a rerun with the same options "
                        "resumes)")
    parser.add_argument("--force", action="store_true", help="replace an --output recorded with other options")
    parser.add_argument("--table", type=input_file("a record of this benchmark", _bench_record,
                                                      "give a file its --output wrote"),
                        help="print the tables of a recorded benchmark and exit")
    parser.add_argument("--memory-child", nargs=3, metavar=("MODEL", "B", "CONTENDER"), type=checks.text(),
                        help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> dict | None:
    """The command line; returns the benchmark's record (None for ``--table`` and a memory child)."""
    parser_ = parser()
    args = parser_.parse_args(argv)
    if args.table:
        print(tables(_bench_record(args.table)))
        return
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.memory_child:
        name, B, contender = args.memory_child
        print(json.dumps(memory_child(name, int(B), contender, device, args.micro_batch)))
        return None
    return run(args, parser_, device)


def run(args, parser, device) -> dict:
    from dpbook.repro.results import provenance

    parameters = {k: getattr(args, k) for k in ("models", "batch_sizes", "contenders", "repeats", "method_models",
                                                "profile_models", "threads", "skip_memory", "micro_batch")}
    parameters["schema"] = SCHEMA
    cells = [] if args.output is None else resumable(args.output, parameters, "cells", force=args.force,
                                                     parser=parser)
    record = {"study": "bench", "parameters": parameters, "provenance": provenance(device), "cells": cells,
              "methods": [], "profile": []}
    print(f"dpbook.repro.bench: torch {torch.__version__}, {device}, {args.threads} thread(s)")
    done = {(c["model"], c["B"]) for c in cells}
    for name in args.models:
        for B in SETTINGS[name].batch_sizes if args.batch_sizes is None else args.batch_sizes:
            if (name, B) in done:
                continue
            start = time.perf_counter()
            rounds, micro, why = engine_rounds(name, B, args.contenders, args.repeats, device, args.micro_batch)
            cell = {"model": name, "B": B, "micro_batch": micro, "micro_batch_why": why, "ms": medians(rounds),
                    "rounds": rounds}
            if not args.skip_memory:
                cell["peak_mib"] = {c: _peak_memory(name, B, c, args.threads, device, micro) for c in args.contenders}
            cell["seconds"] = time.perf_counter() - start
            cells.append(cell)
            print(f"  {name} B={B}: {cell['seconds']:.0f} s", file=sys.stderr)
            if args.output:
                atomic_write_json(record, args.output)
    for name in args.method_models:
        start = time.perf_counter()
        times = method_times(name, 256, args.repeats, device)
        record["methods"].append({"model": name, "B": 256, "ms": medians(times["rounds"]), **times,
                                  "seconds": time.perf_counter() - start})
    for name in args.profile_models:
        start = time.perf_counter()
        record["profile"].append({**step_profile(name, PROFILE_B, args.repeats, device),
                                  "seconds": time.perf_counter() - start})
    parts = [*cells, *record["methods"], *record["profile"]]
    record["seconds"] = sum(c["seconds"] for c in parts)  # run time, resumed parts included
    if args.output:
        atomic_write_json(record, args.output)
    print(tables(record))
    return record


if __name__ == "__main__":
    main()
