"""The training loop: Poisson batches, private steps, per-epoch evaluation, a log, checkpoint and resume.

    >>> import torch
    >>> from dpbook.data import load_digits
    >>> from dpbook.models import digits_cnn
    >>> from dpbook.methods import DPSGD
    >>> torch.manual_seed(0) and None
    >>> data = load_digits()
    >>> model = digits_cnn()
    >>> trainer = Trainer(model, DPSGD(C=1.0, sigma=1.0), torch.optim.SGD(model.parameters(), lr=0.5), data,
    ...                   expected_batch_size=64, epochs=1, delta=1e-5, seed=0)
    >>> log = trainer.run()
    >>> last = log.epochs[-1]
    >>> last["epoch"], last["step"], 0 < last["epsilon"] < 10, 0 <= last["test_accuracy"] <= 1
    (1, 22, True, True)

The log's rows hold only what the privacy guarantee covers (test-set metrics, epsilon spent, released diagnostics).
Statistics of the private training data, the training-set loss and accuracy included, are an explicit opt-in, kept
apart in ``log.nonprivate``, for teaching:

    >>> trainer = Trainer(model, DPSGD(C=1.0, sigma=1.0), torch.optim.SGD(model.parameters(), lr=0.5), data,
    ...                   expected_batch_size=64, epochs=1, delta=1e-5, seed=0, nonprivate_diagnostics=True)
    >>> log = trainer.run()
    >>> sorted(log.nonprivate.epochs[-1]), sorted(log.nonprivate.steps[-1])
    (['epoch', 'nonprivate/train_accuracy', 'nonprivate/train_loss', 'step'], ['nonprivate/batch_size', 'step'])
"""

from __future__ import annotations

__all__ = [
    "LogRows", "TrainLog", "evaluate", "Interrupted", "request_stop", "clear_stop_request", "StaleCheckpointError",
    "Trainer", "EPOCH_SAVE_SECONDS", "DIGEST_EXAMPLES", "data_digest"
]

import hashlib
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from tqdm.std import tqdm

from dpbook import accounting, checks
from dpbook.io import atomic_torch_save
from dpbook.methods.base import Method
from dpbook.optim import DPOptimizer, released_diagnostics
from dpbook.sampling import PoissonSampler


@dataclass
class LogRows:
    """One section of a training log: a row per epoch and a row per step."""

    epochs: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)

    def column(self, key: str, per: str = "epochs") -> list:
        return [row[key] for row in getattr(self, per)]


@dataclass
class TrainLog(LogRows):
    """A run's log. Its rows hold only what the privacy guarantee covers: per epoch the test loss and accuracy, the
    epsilon spent and the method's (released) diagnostics; per step the noise multiplier and those diagnostics.

    ``nonprivate`` (only with ``Trainer(..., nonprivate_diagnostics=True)``; else None) holds, apart, statistics of
    the private training data, for teaching: per epoch the training-set loss and accuracy, per step the realised
    batch size and the method's non-private diagnostics, all under ``"nonprivate/..."`` keys.
    """

    nonprivate: LogRows | None = None

    @classmethod
    def from_dict(cls, state: dict) -> "TrainLog":
        """The log that :func:`dataclasses.asdict` turned into ``state`` (as checkpoints hold it)."""
        nonprivate = state.get("nonprivate")
        return cls(state["epochs"], state["steps"], None if nonprivate is None else LogRows(**nonprivate))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 1024) -> dict:
    """Mean cross-entropy and accuracy of ``model`` on ``(x, y)``."""
    was_training = model.training
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():  # no graph: an evaluation's forward keeps nothing for a backward
        for start in range(0, len(x), batch_size):
            out = model(x[start:start + batch_size])
            target = y[start:start + batch_size]
            loss += nn.functional.cross_entropy(out, target, reduction="sum").item()
            correct += (out.argmax(1) == target).sum().item()
    model.train(was_training)
    return {"loss": loss / max(len(x), 1), "accuracy": correct / max(len(x), 1)}


class Interrupted(RuntimeError):
    """A run stopped at a step boundary because :func:`request_stop` asked it to; its checkpoint (if it has one)
    holds that step, and running it again resumes there."""


_STOP = threading.Event()

#: An epoch's end saves the checkpoint when at least this many seconds passed since the last save: a long run loses
#: at most about a minute of training, a run of a few seconds does not write its state at every epoch.
EPOCH_SAVE_SECONDS = 60.0


def request_stop() -> None:
    """Ask the running :meth:`Trainer.run` to save its checkpoint after the current step and raise
    :class:`Interrupted` (e.g. from a signal handler when a cluster preempts the job: at most one step is lost).
    The request holds until :func:`clear_stop_request`."""
    _STOP.set()


def clear_stop_request() -> None:
    _STOP.clear()


class StaleCheckpointError(ValueError):
    """A checkpoint that cannot be resumed: damaged, or written by a run with another configuration."""


def _stored(x: torch.Tensor) -> torch.Tensor:
    """The elements ``x`` holds in memory: a dimension of stride 0 (a view that repeats one slice, as ``expand``
    makes) is read once, so a check of N repeated examples costs one example.

    >>> _stored(torch.arange(3.0).expand(1000, 3)).shape
    torch.Size([1, 3])
    """
    return x[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in x.stride())]


def _check_data(model: nn.Module, data) -> None:
    """Refuse, before any training, data that the run could not use or would silently misreport: labels that are
    not class indices of the model's outputs, inputs the model cannot take, training and test sets of different
    kinds, an empty test set, and NaN or infinite inputs. Each error names the tensor and the fix.

    >>> import torch
    >>> from dpbook.data import DataSplits
    >>> x = torch.randn(8, 3)
    >>> _check_data(torch.nn.Linear(3, 2), DataSplits(x, torch.tensor([0, 1] * 4).float(), x, torch.zeros(8).long()))
    Traceback (most recent call last):
    ...
    ValueError: y_train must hold integer class indices (torch.long), got dtype torch.float32: use y.long()
    """
    if len(data) != 4:
        raise ValueError(f"data must be (x_train, y_train, x_test, y_test) (e.g. dpbook.data.DataSplits), "
                         f"got {len(data)} item(s)")
    x_train, y_train, x_test, y_test = data
    if len(x_test) == 0:
        raise ValueError("the test set is empty: the run would report no accuracy (give x_test, y_test examples)")
    for x, y, split in ((x_train, y_train, "train"), (x_test, y_test, "test")):
        if y.dim() != 1 or len(y) != len(x):
            raise ValueError(f"y_{split} must be one class index per example (1-D, length {len(x)} like x_{split}), "
                             f"got shape {tuple(y.shape)}")
        if y.dtype.is_floating_point or y.dtype == torch.bool:
            raise ValueError(f"y_{split} must hold integer class indices (torch.long), got dtype {y.dtype}: "
                             f"use y.long()")
        if x.dtype.is_floating_point and not torch.isfinite(_stored(x)).all():
            bad = (~torch.isfinite(x.flatten(1))).any(1).nonzero().flatten()[:5].tolist()
            raise ValueError(f"x_{split} holds NaN or infinite values (examples {bad}...): fix or drop them")
    if x_train.shape[1:] != x_test.shape[1:] or x_train.dtype != x_test.dtype:
        raise ValueError(f"x_train and x_test differ: {tuple(x_train.shape[1:])} {x_train.dtype} against "
                         f"{tuple(x_test.shape[1:])} {x_test.dtype} per example")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            outputs = model(x_train[:2])
    except (RuntimeError, TypeError, ValueError, IndexError) as err:
        raise ValueError(f"the model cannot take the training inputs (shape {tuple(x_train.shape[1:])} per example, "
                         f"dtype {x_train.dtype}): {str(err).splitlines()[0]}") from err
    finally:
        model.train(was_training)
    classes = outputs.shape[-1]
    for y, split in ((y_train, "train"), (y_test, "test")):
        if len(y) and (y.min() < 0 or y.max() >= classes):
            raise ValueError(f"y_{split} holds labels from {int(y.min())} to {int(y.max())}, but the model has "
                             f"{classes} outputs (labels 0..{classes - 1}): relabel the data or size the model")


#: Examples of each tensor that :func:`data_digest` reads: enough that a permutation, a relabelling or a change of
#: the values is seen, few enough that a large dataset costs milliseconds.
DIGEST_EXAMPLES = 4096


def data_digest(*tensors: torch.Tensor) -> str:
    """A digest of the tensors' shapes, dtypes and values at :data:`DIGEST_EXAMPLES` evenly spaced examples (all of
    them in a smaller set): the same data gives the same digest on any device; permuted labels, negated features
    or another subset do not.

    >>> x = torch.arange(12.0).reshape(6, 2)
    >>> data_digest(x) == data_digest(x.clone()), data_digest(x) == data_digest(-x), len(data_digest(x))
    (True, False, 16)
    """
    digest = hashlib.sha256()
    for t in tensors:
        index = torch.linspace(0, max(len(t) - 1, 0), min(len(t), DIGEST_EXAMPLES), device=t.device).long()
        digest.update(f"{tuple(t.shape)} {t.dtype};".encode())
        digest.update(t[index].detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def _difference(theirs, ours) -> str:
    """``checkpoint X, this run Y``; for long texts, where they first differ.

    >>> _difference("Sequential( (0): Linear() (1): Tanh() (2): Linear() )",
    ...             "Sequential( (0): Linear() (1): ReLU() (2): Linear() )")
    "checkpoint '...(1): Tanh() (2): Linear() )', this run '...(1): ReLU() (2): Linear() )'"
    >>> _difference(2, 3)
    'checkpoint 2, this run 3'
    """
    if not (isinstance(theirs, str) and isinstance(ours, str) and max(len(theirs), len(ours)) > 40):
        return f"checkpoint {theirs!r}, this run {ours!r}"
    first = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
    start = max(0, first - 5)
    return (f"checkpoint {'...' + theirs[start:start + 60]!r}, this run {'...' + ours[start:start + 60]!r}")


class Trainer:
    """Private training of ``model`` with ``method`` and ``optimizer`` on in-memory ``data``.

    Args:
        data: ``(x_train, y_train, x_test, y_test)`` tensors (e.g. :func:`dpbook.data.load_digits`).
        expected_batch_size: B; Poisson sampling at q = B/N, T = epochs * round(N/B) steps.
        delta: the delta of the (epsilon, delta) reported in the log, below 1/N
            (:func:`dpbook.accounting.check_delta_for`) unless ``allow_weak_delta``.
        allow_weak_delta: accept delta >= 1/N, a guarantee that does not rule out publishing one training example
            in the clear (the DC-SGD paper's delta = 1/N).
        checkpoint: a file path; when given, the run saves (atomically) every ``checkpoint_every`` steps, at an
            epoch's end once :data:`EPOCH_SAVE_SECONDS` have passed since the last save, at its last step and
            when stopped, and ``run`` resumes from it when it exists.
        progress: show a progress bar (None: only when the output is a terminal).
        nonprivate_diagnostics: also log, in ``log.nonprivate`` and apart from the private rows, statistics of the
            private training data (training-set loss and accuracy, realised batch sizes, the method's non-private
            diagnostics). No DP guarantee covers them: for teaching only, never for result files.
        per_sample: the engine's per-sample path, ``"auto"`` (Book-Keeping whenever the method allows),
            ``"book-keeping"`` or ``"vmap"`` (:class:`~dpbook.optim.DPOptimizer`).
    """

    def __init__(self, model: nn.Module, method: Method, optimizer: torch.optim.Optimizer, data, *,
                 expected_batch_size: float, epochs: int, delta: float, micro_batch_size: int | None = None,
                 seed: int = 0, accountant: str = "rdp", checkpoint: str | Path | None = None,
                 checkpoint_every: int = 50, progress: bool | None = None, device: str | torch.device = "cpu",
                 nonprivate_diagnostics: bool = False, per_sample: str = "auto", allow_weak_delta: bool = False):
        self.x_train, self.y_train, self.x_test, self.y_test = (t.to(device) for t in data)
        self.model = model
        _check_data(model, (self.x_train, self.y_train, self.x_test, self.y_test))
        self.epochs = checks.integer("epochs", epochs)
        self.delta = accounting.check_delta_for(delta, len(self.x_train), weak=allow_weak_delta)
        self.accountant = accountant
        self.seed = seed
        self.sampler = PoissonSampler(N=len(self.x_train), expected_batch_size=expected_batch_size, seed=seed)
        self.steps_per_epoch = self.sampler.steps_per_epoch()
        self.T = self.epochs * self.steps_per_epoch
        self.engine = DPOptimizer(model, optimizer, method, sample_rate=self.sampler.q,
                                  expected_batch_size=expected_batch_size, micro_batch_size=micro_batch_size,
                                  noise_seed=seed + 1_000_003, nonprivate_diagnostics=nonprivate_diagnostics,
                                  per_sample=per_sample)
        self._releases = [f"{r.name}: sensitivity {r.sensitivity!r}, noise multiplier {r.noise_multiplier!r}"
                          for r in method.releases()]  # before any step: the run's first releases
        self.checkpoint = None if checkpoint is None else Path(checkpoint)
        self.checkpoint_every = checks.integer("checkpoint_every", checkpoint_every)
        self.progress = progress
        self.step = 0
        self._saved_at = time.monotonic()  # when the checkpoint was last written (the run's start until then)
        self.log = TrainLog(nonprivate=LogRows() if nonprivate_diagnostics else None)
        torch.manual_seed(seed)  # dropout masks and any other global randomness

    def run(self, *, max_steps: int | None = None,
            on_step: Callable[["Trainer", dict], None] | None = None) -> TrainLog:
        """Train to T steps (resuming from the checkpoint if there is one); stop early after ``max_steps`` total.

        ``on_step(trainer, info)`` is called after every step with that step's log row, e.g. to record
        analysis quantities (its own state is not checkpointed).
        """
        if self.checkpoint is not None and self.checkpoint.exists():
            self.load(self.checkpoint)
        stop = self.T if max_steps is None else min(self.T, max_steps)
        bar = tqdm(total=self.T, initial=self.step, disable=None if self.progress is None else not self.progress,
                   desc=self.engine.method.name, unit="step")
        while self.step < stop:
            idx = self.sampler.sample().to(self.x_train.device)
            info = self.engine.step(self.x_train[idx], self.y_train[idx], index=idx)
            self.step += 1
            self.log.steps.append({"step": self.step, **info})
            if self.log.nonprivate is not None:
                self.log.nonprivate.steps.append({"step": self.step, **self.engine.nonprivate_info})
            if on_step is not None:
                on_step(self, self.log.steps[-1])
            bar.update(1)
            if self.step % self.steps_per_epoch == 0:
                self._end_epoch()
                bar.set_postfix(acc=f"{self.log.epochs[-1]['test_accuracy']:.3f}",
                                eps=f"{self.log.epochs[-1]['epsilon']:.2f}")
            if self.checkpoint is not None and (self.step % self.checkpoint_every == 0 or self.step == stop):
                self.save(self.checkpoint)
            if _STOP.is_set() and self.step < stop:
                bar.close()
                if self.checkpoint is not None:
                    self.save(self.checkpoint)
                raise Interrupted(f"stopped at step {self.step} of {self.T} on request"
                                  + (f"; {self.checkpoint} resumes it" if self.checkpoint is not None else ""))
        bar.close()
        return self.log

    def _end_epoch(self) -> None:
        at = {"epoch": self.step // self.steps_per_epoch, "step": self.step}
        test = evaluate(self.model, self.x_test, self.y_test)
        self.log.epochs.append({
            **at, "test_loss": test["loss"], "test_accuracy": test["accuracy"],
            "epsilon": self.engine.epsilon(self.delta, self.accountant),
            **released_diagnostics(self.engine.method),
        })
        if self.log.nonprivate is not None:
            train = evaluate(self.model, self.x_train, self.y_train)
            self.log.nonprivate.epochs.append(
                {**at, "nonprivate/train_loss": train["loss"], "nonprivate/train_accuracy": train["accuracy"]})
        if self.checkpoint is not None and time.monotonic() - self._saved_at >= EPOCH_SAVE_SECONDS:
            self.save(self.checkpoint)

    def fingerprint(self) -> dict:
        """The configuration a checkpoint belongs to: what decides the run (not the micro-batch size or the device):
        every constructor argument of the method (:attr:`dpbook.methods.base.Method.hyperparameters`) and its
        declared releases at the first step, the model (its parameters and its architecture: each module with its
        settings, as ``repr`` writes it), the optimizer, the data (its sizes and a digest of its values,
        :func:`data_digest`), the schedule. A checkpoint of another configuration is refused on resume
        (:meth:`load`), naming what differs."""
        method = self.engine.method
        return {
            "method": method.name,
            **{f"hyperparameter {name}": repr(value) for name, value in getattr(method, "hyperparameters", {}).items()},
            "releases": self._releases,
            "model": [f"{name}{tuple(p.shape)}" for name, p in self.model.named_parameters()],
            "architecture": " ".join(repr(self.model).split()),
            "optimizer": f"{type(self.engine.optimizer).__name__}"
                         f"({', '.join(f'{k}={v!r}' for k, v in sorted(self.engine.optimizer.defaults.items()))})",
            "data": f"{len(self.x_train)} training examples {tuple(self.x_train.shape[1:])}, "
                    f"{len(self.x_test)} test examples",
            "data digest": data_digest(self.x_train, self.y_train, self.x_test, self.y_test),
            "expected_batch_size": self.engine.B, "epochs": self.epochs, "T": self.T, "delta": self.delta,
            "seed": self.seed, "accountant": self.accountant,
        }

    def state_dict(self) -> dict:
        return {
            "config": self.fingerprint(),
            "step": self.step, "model": self.model.state_dict(), "engine": self.engine.state_dict(),
            "sampler": self.sampler.state_dict(), "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "log": asdict(self.log),
        }

    def load_state_dict(self, state: dict) -> None:
        theirs, ours = state.get("config"), self.fingerprint()
        if theirs != ours:
            fields = sorted(k for k in {**ours, **(theirs or {})} if (theirs or {}).get(k) != ours.get(k))
            differ = "; ".join(f"{k}: {_difference((theirs or {}).get(k), ours.get(k))}" for k in fields[:6])
            raise StaleCheckpointError(f"the checkpoint belongs to a run with another configuration ({differ})")
        self.step = state["step"]
        self.model.load_state_dict(state["model"])
        self.engine.load_state_dict(state["engine"])
        self.sampler.load_state_dict(state["sampler"])
        torch.set_rng_state(state["torch_rng"].cpu())
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        log = TrainLog.from_dict(state["log"])
        if (log.nonprivate is None) != (self.log.nonprivate is None):
            raise ValueError(f"the checkpoint's log {'lacks' if log.nonprivate is None else 'holds'} non-private "
                             "diagnostics: resume with the nonprivate_diagnostics setting it was written with")
        self.log = log

    def save(self, path: str | Path) -> None:
        atomic_torch_save(self.state_dict(), path)
        self._saved_at = time.monotonic()

    def load(self, path: str | Path) -> None:
        """Resume from the checkpoint ``path``, written on any device (its tensors are mapped to this run's). A
        damaged checkpoint, or one of another configuration, is an error that names the file."""
        try:
            state = torch.load(path, map_location=self.x_train.device, weights_only=False)
        except Exception as err:  # truncated zip, unpickling errors: torch raises several kinds
            raise StaleCheckpointError(f"{path}: cannot read the checkpoint ({type(err).__name__}: {err}); it is "
                                       f"damaged: move it away and the run starts over") from err
        try:
            self.load_state_dict(state)
        except StaleCheckpointError as err:
            raise StaleCheckpointError(f"{path}: {err}. Resume with the configuration it was written with, or move "
                                       f"it away to start the run over") from None
