r"""One reproduction run, end to end: data, model, calibrated method, training, and its result file.

An :class:`Experiment` names everything that decides a run's result: dataset, model, method and its
hyperparameters, the budget (epsilon, delta), epochs, expected batch size B, optimizer and learning rate, the tuning
protocol that charges the search the run belongs to (``"none"``, ``"rdp"``, ``"lt"`` or ``"ps"`` with a grid of G
points, :mod:`dpbook.tuning`), and the seed. :func:`run_experiment` then

1. loads the data (:func:`load_task_data`; ``smoke=True`` swaps in generated data of the real shape; the dry run's
   ``prepare(exp, data="shapes")`` swaps in :func:`shape_data`, which no result file is ever written from),
2. builds the model (GroupNorm, no BatchNorm) and moves it to the device,
3. calibrates the run's noise: :func:`dpbook.tuning.tuning_plan` gives the DP-SGD sigma of one run of
   T = epochs x round(N/B) steps at q = B/N under the protocol, and the method takes it through
   :meth:`Method.from_plan <dpbook.methods.base.Method.from_plan>` (DPDR calibrates sigma_g for its history),
   (steps 1-3 are :func:`prepare`, the one place that builds a run),
4. trains with :class:`dpbook.train.Trainer` (checkpointed, so an interrupted run resumes where it stopped),
5. checks with the accountant that the run spent no more than the plan charges it, and
6. writes one result file atomically (:mod:`dpbook.repro.results`), which later calls find and reuse. It holds only what
   the privacy guarantee covers (privacy hygiene rule 8): test-set metrics, epsilon spent, released diagnostics
   and the public configuration. The run never asks for non-private diagnostics (the Trainer's opt-in stays off).

The same function serves a CPU smoke test, a book page and a full GPU reproduction; only the parameters differ.

>>> import tempfile
>>> exp = Experiment(study="doctest", dataset="digits", model="digits_mlp", method="dpsgd",
...                  hyperparameters={"C": 1.0}, epsilon=4.0, delta=1e-5, epochs=1, batch_size=128, lr=0.01)
>>> with tempfile.TemporaryDirectory() as tmp:
...     record = run_experiment(exp, results_dir=tmp, progress=False)
...     again = run_experiment(exp, results_dir=tmp)           # found on disk: not trained twice
>>> record["steps"], round(record["epsilon_spent"], 2) <= 4.0, 0 <= record["final"]["test_accuracy"] <= 1
(11, True, True)
>>> again["final"] == record["final"]
True
"""

from __future__ import annotations

__all__ = [
    "OPTIMIZERS", "DATA_SOURCES", "Experiment", "smoke_data", "shape_data", "shapes_size", "load_task_data",
    "build_task_model", "make_optimizer", "resolve_device", "plan_of", "SPENT_TOLERANCE", "charged_epsilon",
    "check_spent", "Prepared", "prepare", "run_experiment", "train_once"
]

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from dpbook import accounting, checks, data, io, models
from dpbook.methods import METHODS
from dpbook.methods.base import Method
from dpbook.methods.registry import check_hyperparameter_names, hyperparameter_names
from dpbook.optim import PER_SAMPLE_ENGINES
from dpbook.protocols import PROTOCOLS
from dpbook.repro import params, results
from dpbook.tasks import TASKS, Task
from dpbook.train import StaleCheckpointError, Trainer
from dpbook.tuning import TuningPlan, tuning_plan

OPTIMIZERS = ("adam", "sgd", "sgd-momentum")
"""``"adam"``: PyTorch defaults except the learning rate; ``"sgd"``: plain SGD; ``"sgd-momentum"``: momentum 0.9."""

DATA_SOURCES = ("files", "shapes")
"""What :func:`prepare` trains on: ``"files"``, the dataset (or, with ``smoke=True``, the smoke stand-in), or
``"shapes"``, :func:`shape_data`: synthetic tensors of the dataset's shapes, classes and N, which only the dry run
(:mod:`dpbook.repro.dry_run`) uses to measure the cost of a step. :func:`run_experiment`, the only writer of result
files, always trains on ``"files"``."""


@dataclass(frozen=True)
class Experiment:
    """Everything that decides one run's result (see the module docstring). Fields are the notebooks' parameters.

    ``delta=None`` is 1/N (the DC-SGD paper's choice), chosen knowingly: a guarantee at delta = 1/N does not rule
    out publishing one training example in the clear, and a number of at least 1/N is refused when the run is
    planned (:func:`dpbook.accounting.check_delta_for`). ``G`` is the size of the grid the run belongs to; with
    ``protocol="none"`` it does not change the run (tuning is free) and is recorded as 1. ``train_size`` keeps a
    fixed random subset of the training set (DP-PSASC's FashionMNIST has 40,000 examples [PSASC-23]); the subset is
    part of the data, the same for every seed. ``micro_batch_size`` only bounds memory; it is not part of the key.
    """

    study: str
    dataset: str
    model: str
    method: str
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    epsilon: float = 4.0
    delta: float | None = None
    epochs: int = 10
    batch_size: int = 256
    optimizer: str = "adam"
    lr: float = 1e-3
    protocol: str = "none"
    G: int = 1
    seed: int = 0
    train_size: int | None = None
    accountant: str = "rdp"
    smoke: bool = False
    micro_batch_size: int | None = None

    def __post_init__(self):
        checks.one_of("dataset", self.dataset, TASKS)
        checks.one_of("model", self.model.lower(), models.MODELS)
        checks.one_of("method", self.method, sorted(METHODS))
        accounting.check_accountant(self.accountant)
        checks.one_of("optimizer", self.optimizer, OPTIMIZERS)
        checks.one_of("protocol", self.protocol, PROTOCOLS)
        checks.positive("epsilon", self.epsilon)
        if self.delta is not None:
            checks.open_unit("delta", self.delta, "None means 1/N")
        checks.integer("epochs", self.epochs)
        checks.positive("batch_size (expected batch size B)", self.batch_size)
        checks.positive("lr (learning rate)", self.lr)
        checks.integer("G (grid size)", self.G)
        checks.integer("seed", self.seed, minimum=0)
        if self.train_size is not None:
            checks.integer("train_size", self.train_size)
        if PROTOCOLS[self.protocol].free and self.G != 1:
            object.__setattr__(self, "G", 1)  # free tuning: every grid point is one run at the whole budget
        # One run, one key: numbers take their field's type (epsilon=4 is epsilon=4.0, a numpy float a float), and
        # every hyperparameter is checked and converted against the method's own signature (C=1 is C=1.0).
        for name, kind in (("epsilon", float), ("delta", float), ("lr", float), ("epochs", int),
                           ("batch_size", int), ("G", int), ("seed", int)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, kind(_plain(value)))
        object.__setattr__(self, "hyperparameters", _method_hyperparameters(self.method, self.hyperparameters))

    def key(self) -> str:
        """A short hash of every field that decides the result (not ``study`` or ``micro_batch_size``)."""
        fields = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("study", "micro_batch_size")}
        return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]

    def path(self, results_dir: str | Path = results.RESULTS_DIR) -> Path:
        """``<results_dir>/<study>/<method>/eps<epsilon>_<protocol><G>_seed<seed>_<key>.json``."""
        search = PROTOCOLS[self.protocol].tag(self.G)
        smoke = "smoke_" if self.smoke else ""
        name = f"{smoke}{self.dataset}_eps{self.epsilon:g}_{search}_seed{self.seed}_{self.key()}.json"
        return Path(results_dir) / self.study / self.method / name

    def replace(self, **changes) -> "Experiment":
        return dataclasses.replace(self, **changes)


def _method_hyperparameters(method: str, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
    """An experiment's hyperparameters, sorted, each name checked against the method (its constructor and its
    ``from_plan``) and each value converted to the type the method declares (a numpy scalar to a plain number), so
    that the result file holds plain JSON and one run has one key.

    >>> import numpy as np
    >>> _method_hyperparameters("dpsgd", {"C": np.float32(1)})
    {'C': 1.0}
    >>> _method_hyperparameters("psasc-momentum", {"K0": 2.0, "s": 1, "C": 0.1, "r": 1e-3, "gamma0": 0.5, "gamma1": 1})
    {'C': 0.1, 'K0': 2, 'gamma0': 0.5, 'gamma1': 1.0, 'r': 0.001, 's': 1.0}
    >>> _method_hyperparameters("dpsgd", {"c": 1.0})
    Traceback (most recent call last):
    ...
    ValueError: method 'dpsgd' has no hyperparameter 'c' (did you mean 'C'?); its hyperparameters: C, sigma
    """
    declared, accepted = _declared(METHODS[method])
    check_hyperparameter_names(method, hyperparameters, accepted)
    return {name: params.convert(f"{method}'s {name}", _plain(value), declared.get(name, Any))
            for name, value in sorted(dict(hyperparameters).items())}


@functools.lru_cache(maxsize=None)
def _declared(cls: type) -> tuple[Mapping[str, Any], tuple[str, ...]]:
    """A method class's hyperparameters as its constructor and its ``from_plan`` declare them: their types, and the
    names accepted. Read once per class: every Experiment checks against them, and so does each of its copies."""
    declared = types.MappingProxyType({**_annotations(cls.__init__), **_annotations(cls.from_plan)})
    accepted = (*hyperparameter_names(cls), *(p.name for p in inspect.signature(cls.from_plan).parameters.values()
                                               if p.kind == p.KEYWORD_ONLY))
    return declared, accepted


def _plain(value: Any) -> Any:
    """A numpy or torch scalar as the Python number it was written as (``np.float32(0.1)`` is 0.1, not
    0.10000000149011612); anything else unchanged."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.detach().cpu().numpy()[()]
    if type(value).__module__ == "numpy" and hasattr(value, "dtype"):
        return float(str(value)) if value.dtype.kind == "f" else value.item()
    return value


def _annotations(function) -> dict[str, Any]:
    """A function's parameter annotations as types (those that name a type the module only imports for type
    checking, e.g. ``plan: TuningPlan``, are left out)."""
    namespace = vars(sys.modules[function.__module__])
    out = {}
    for p in inspect.signature(function).parameters.values():
        try:
            out[p.name] = eval(p.annotation, namespace) if isinstance(p.annotation, str) else p.annotation  # noqa: S307
        except NameError:
            continue
    return {k: v for k, v in out.items() if v is not inspect.Parameter.empty}


# ----------------------------------------------------------------------------------------------------------------
# Data and model
# ----------------------------------------------------------------------------------------------------------------

def smoke_data(task: Task, seed: int = 0) -> data.DataSplits:
    """Generated data of the task's shape (Gaussian clusters; random ids for token tasks): the smoke stand-in."""
    n_train, n_test = task.smoke_sizes
    shape = task.smoke_shape or task.shape
    if task.kind in ("tokens", "pairs"):
        gen = torch.Generator().manual_seed(seed)
        n = n_train + n_test
        x = torch.randint(1, task.smoke_vocab or task.vocab, (n, *shape), generator=gen)
        if task.kind == "pairs":  # token types: first half 0, second half 1; attention mask: all ones
            x[:, 1] = (torch.arange(shape[1]) >= shape[1] // 2).long()
            x[:, 2] = 1
        y = torch.randint(task.classes, (n,), generator=gen)
        return data.DataSplits(x[:n_train], y[:n_train], x[n_train:], y[n_train:])
    return data.synthetic_classification(n_train=n_train, n_test=n_test, shape=shape,
                                         num_classes=task.classes, separation=1.0, seed=seed)


def shape_data(task: Task, N: int, *, device: str | torch.device = "cpu", test_size: int = 64,
               seed: int = 0) -> data.DataSplits:
    """Synthetic data of the task's real shapes, classes and N training examples, without holding N examples: one
    random input (token ids below the real vocabulary) viewed N times (``expand``: the engine's ``x_train[idx]``
    gathers a batch of copies), N random labels, and ``test_size`` random test examples. The cost of a step does not
    depend on the values; nothing trained on it is a result. Made on ``device``, so that a run's ``.to(device)``
    copies nothing.

    >>> from dpbook.tasks import TASKS
    >>> x, y, x_test, y_test = shape_data(TASKS["cifar10"], 50_000)
    >>> tuple(x.shape), x.stride(0), int(y.max()) < 10, tuple(x_test.shape)
    ((50000, 3, 32, 32), 0, True, (64, 3, 32, 32))
    """
    one = smoke_data(dataclasses.replace(task, smoke_sizes=(1, test_size), smoke_shape=None, smoke_vocab=None), seed)
    labels = torch.randint(task.classes, (N,), generator=torch.Generator().manual_seed(seed))
    x = one.x_train.to(device)
    return data.DataSplits(x.expand(N, *x.shape[1:]), labels.to(device), one.x_test.to(device),
                           one.y_test.to(device))


def load_task_data(exp: Experiment, *, root: str | Path = data.DEFAULT_ROOT, download: bool = False) -> data.DataSplits:
    """The experiment's train/test tensors: the real dataset (digits and MNIST-5k ship offline), or smoke data.

    Raises :class:`dpbook.data.DatasetNotFoundError` (with where to put the files) when a dataset is missing.
    """
    task = TASKS[exp.dataset]
    splits = smoke_data(task) if exp.smoke else task.load(Path(root), download)
    if exp.train_size is not None and exp.train_size < len(splits.x_train):
        keep = torch.randperm(len(splits.x_train), generator=torch.Generator().manual_seed(0))[:exp.train_size]
        keep = keep.sort().values
        splits = data.DataSplits(splits.x_train[keep], splits.y_train[keep], splits.x_test, splits.y_test)
    return splits


def build_task_model(exp: Experiment, *, pretrained: bool = True) -> torch.nn.Module:
    """The experiment's model from the registry (:func:`dpbook.models.build_model`), sized for its task; a smoke
    run's BERT is a tiny random ``BertConfig`` (no download), and ``pretrained=False`` (the dry run's) a BERT of
    BERT-base's sizes with random weights (the same step, no download)."""
    task = TASKS[exp.dataset]
    bert = exp.model.lower() == "bert_base"
    extra = {}
    if bert and exp.smoke:
        extra = {"config": models.tiny_bert_config(task.smoke_vocab)}
    elif bert and not pretrained:
        extra = {"config": models.text.transformers_module().BertConfig()}
    return models.build_model(exp.model, sized_for=task, **extra)


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """``"adam"`` (PyTorch defaults but ``lr``), ``"sgd"`` (plain), ``"sgd-momentum"`` (momentum 0.9)."""
    checks.one_of("optimizer", name, OPTIMIZERS)
    params = list(params)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=0.9 if name == "sgd-momentum" else 0.0)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"``: CUDA when available, else CPU."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------

#: :func:`dpbook.tuning.tuning_plan`, calibrated once per process for each setting (a chapter plans the same
#: cell many times).
_calibrated_plan = functools.cache(tuning_plan)


def plan_of(exp: Experiment, N: int) -> TuningPlan:
    """The calibrated plan of the experiment's run on N training examples (Trainer's T and q). A delta of at least
    1/N is refused (:func:`dpbook.accounting.check_delta_for`); ``delta=None`` chooses exactly 1/N knowingly."""
    delta = 1 / N if exp.delta is None else accounting.check_delta_for(exp.delta, N)
    q = exp.batch_size / N
    T = exp.epochs * max(1, round(N / exp.batch_size))
    return _calibrated_plan(exp.epsilon, delta, q, T, exp.G, exp.protocol, accountant=exp.accountant)


SPENT_TOLERANCE = 1e-9
"""Relative slack of every comparison of what a run spent with what its plan charges (floating-point rounding)."""


def charged_epsilon(history, plan: TuningPlan) -> tuple[float, float]:
    """What the plan's one charge rule (:meth:`~dpbook.tuning.TuningPlan.charge`) charges the search for a run's
    ledger history, and the limit it must stay under: what a DP-SGD run at the plan's sigma is charged."""
    return plan.charge(history), plan.charge_limit


def check_spent(history, plan: TuningPlan) -> float:
    """Recompute what the run's ledger history costs and refuse a run that spent more than its plan charges.

    Under ``"none"`` the run must fit (epsilon, delta); under ``"rdp"`` G copies of it must fit the total budget;
    under ``"lt"`` it must fit Theorem 1's per-run (epsilon_1, delta_1); under ``"ps"`` the search's Renyi DP bound
    must fit the total budget. Returns the run's own epsilon at the plan's per-run delta.
    """
    charged, target = charged_epsilon(history, plan)  # the one charge rule, which DPDR.from_plan calibrates to
    spent = accounting.epsilon_of_history(history, plan.per_run_delta, plan.accountant)
    if charged > target * (1 + SPENT_TOLERANCE):
        raise RuntimeError(f"the run's history is charged epsilon={charged!r} under protocol "
                           f"{plan.charged_protocol!r}, but its plan charges {target!r}: the method's from_plan does "
                           f"not match its accounting")
    return spent


@dataclass
class Prepared:
    """One run, built and ready to train: what :func:`prepare` returns."""

    exp: Experiment
    splits: data.DataSplits
    plan: TuningPlan
    model: torch.nn.Module
    method: Method
    optimizer: torch.optim.Optimizer
    device: torch.device
    data: str = "files"

    def trainer(self, **options) -> Trainer:
        """The run's :class:`dpbook.train.Trainer`; ``options`` (checkpoint, progress, ...) go to it."""
        exp = self.exp
        return Trainer(self.model, self.method, self.optimizer, self.splits, expected_batch_size=exp.batch_size,
                       epochs=exp.epochs, delta=self.plan.per_run_delta, micro_batch_size=exp.micro_batch_size,
                       seed=exp.seed, accountant=exp.accountant, device=self.device,
                       allow_weak_delta=exp.delta is None, **options)


def prepare(exp: Experiment, *, data_root: str | Path = data.DEFAULT_ROOT, download: bool = False,
            device: str = "auto", source: str = "files") -> Prepared:
    """Build the run ``exp`` describes, the one place that does: load the data, calibrate the plan on its N, seed
    and build the model on the device, take the method from the plan (:meth:`Method.from_plan
    <dpbook.methods.base.Method.from_plan>`) and the optimizer over the trainable parameters.

    ``source="shapes"`` (:data:`DATA_SOURCES`, the dry run's) trains on :func:`shape_data` of the task's N (or
    ``train_size``) and builds BERT-base with random weights; the plan, model and method are the real run's.

    >>> run = prepare(Experiment(study="doctest", dataset="digits", model="digits_mlp", method="dpsgd",
    ...                          hyperparameters={"C": 1.0}, epochs=1))
    >>> len(run.splits.x_train), run.plan.protocol, type(run.method).__name__, type(run.optimizer).__name__
    (1437, 'none', 'DPSGD', 'Adam')
    """
    checks.one_of("source", source, DATA_SOURCES)
    device = resolve_device(device)
    splits = load_task_data(exp, root=data_root, download=download) if source == "files" else _shapes_of(exp, device)
    plan = plan_of(exp, len(splits.x_train))
    torch.manual_seed(exp.seed)  # model initialisation
    model = build_task_model(exp, pretrained=source == "files").to(device)
    method = METHODS[exp.method].from_plan(plan, **exp.hyperparameters)
    optimizer = make_optimizer(exp.optimizer, (p for p in model.parameters() if p.requires_grad), exp.lr)
    return Prepared(exp, splits, plan, model, method, optimizer, device, source)


def shapes_size(exp: Experiment) -> int:
    """The N that ``source="shapes"`` trains on: the task's registered training-set size, or ``train_size`` when
    smaller."""
    task = TASKS[exp.dataset]
    if exp.smoke:
        raise ValueError("source='shapes' takes the real dataset's shapes and N; a smoke run has its own data")
    if task.train_size is None:
        raise FileNotFoundError(f"{task.title} has no fixed training-set size: its N is read from its files")
    return min(task.train_size, exp.train_size or task.train_size)


def _shapes_of(exp: Experiment, device: torch.device) -> data.DataSplits:
    """:func:`shape_data` of the experiment's task at :func:`shapes_size`."""
    return shape_data(TASKS[exp.dataset], shapes_size(exp), device=device)


def run_experiment(exp: Experiment, *, results_dir: str | Path = results.RESULTS_DIR,
                   data_root: str | Path = data.DEFAULT_ROOT, download: bool = False, device: str = "auto",
                   checkpoint_dir: str | Path | None = None, checkpoint_every: int = 200,
                   progress: bool | None = None, overwrite: bool = False, per_sample: str = "auto",
                   wait: bool = True) -> dict:
    """Run ``exp`` (or return its existing record) and write its result file; see the module docstring.

    ``checkpoint_dir`` (default: ``<results_dir>/.checkpoints``, not in git) holds the run's checkpoint while it
    trains; a rerun after an interruption resumes from it, and it is deleted once the result is written.
    ``per_sample`` is the engine's per-sample path (:data:`dpbook.optim.PER_SAMPLE_ENGINES`): like the device and
    the micro-batch size it changes how fast a run trains, not its result (beyond float rounding), so it is not
    part of the run's key. The run holds the claim on its result file while it trains (:func:`dpbook.io.claim`):
    a second process asking for the same run at the same time waits for it and returns its record (``wait``), or
    raises :class:`dpbook.io.Held`; no run is trained twice.
    """
    return train_once(exp, results_dir=results_dir, data_root=data_root, download=download, device=device,
                      checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, progress=progress,
                      overwrite=overwrite, per_sample=per_sample, wait=wait)[0]


def train_once(exp: Experiment, *, results_dir: str | Path = results.RESULTS_DIR, overwrite: bool = False,
               wait: bool = True, checkpoint_dir: str | Path | None = None, per_sample: str = "auto",
               **trainer_kwargs) -> tuple[dict, bool]:
    """:func:`run_experiment`'s work, and whether this call trained the run: ``(record, trained)``; False when the
    record was on disk already, or was written by the process this one waited for (a sweep counts it so)."""
    checks.one_of("per_sample (the engine's per-sample path)", per_sample, PER_SAMPLE_ENGINES)
    path = exp.path(results_dir)
    done = None if overwrite else results.recorded(path)
    if done is not None:
        return done, False
    with io.claim(path, wait=wait):
        done = None if overwrite else results.recorded(path)  # written meanwhile by the holder this one waited for
        if done is not None:
            return done, False
        ckpt_dir = Path(checkpoint_dir) if checkpoint_dir is not None else Path(results_dir) / ".checkpoints"
        _train(exp, path, ckpt_dir / exp.study / f"{path.stem}.pt", per_sample=per_sample, **trainer_kwargs)
    return results.read_result(path), True


def _train(exp: Experiment, path: Path, checkpoint: Path, *, data_root: str | Path = data.DEFAULT_ROOT,
           download: bool = False, device: str = "auto", checkpoint_every: int = 200, progress: bool | None = None,
           per_sample: str = "auto") -> None:
    """Steps 1 to 6 of the module docstring: train ``exp`` (from its ``checkpoint`` if there is one) and write its
    result file at ``path``."""
    io.remove_stale_temporaries(path.parent)
    started = time.perf_counter()
    run = prepare(exp, data_root=data_root, download=download, device=device)
    splits, plan, model = run.splits, run.plan, run.model
    N = len(splits.x_train)
    trainer = run.trainer(checkpoint=checkpoint, checkpoint_every=checkpoint_every, progress=progress,
                          per_sample=per_sample)
    resumed = checkpoint.exists()  # Trainer.run resumes from it
    try:
        log = trainer.run()
    except StaleCheckpointError as err:
        raise StaleCheckpointError(f"{err} (the run's result file: {path})") from None
    spent = check_spent(trainer.engine.ledger.history, plan)
    record = {
        "experiment": dataclasses.asdict(exp),
        "key": exp.key(),
        "N": N, "N_test": len(splits.x_test), "steps": trainer.T, "sample_rate": plan.sample_rate,
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "plan": plan.record(),
        "sigma": plan.sigma,
        "method_noise": {"noise_multiplier_first_step": trainer.engine.ledger.history[0][0]
                         if trainer.engine.ledger.history else None},
        "epsilon_spent": spent, "delta_spent": plan.per_run_delta,
        "epochs": _epoch_columns(log.epochs),
        "final": _epoch_row(log.epochs[-1]) if log.epochs else {},
        "wall_time_s": round(time.perf_counter() - started, 3),  # this process only, if resumed
        "resumed": resumed,
        **results.provenance(run.device),
    }
    results.write_result(record, path)
    checkpoint.unlink(missing_ok=True)


def _epoch_columns(rows: list[Mapping[str, Any]]) -> dict[str, list]:
    """Per-epoch metrics as columns, ``{"epoch": [1, 2, ...], "test_accuracy": [...], ...}`` (compact on disk)."""
    rows = [_epoch_row(row) for row in rows]
    names = sorted({k for row in rows for k in row})
    return {k: [row.get(k) for row in rows] for k in names}


def _epoch_row(row: Mapping[str, Any]) -> dict:
    """The per-epoch metrics kept in a result file (floats rounded to 6 significant digits).

    ``row`` is a private row of the log (:class:`dpbook.train.TrainLog`): test-set metrics, epsilon spent and
    released diagnostics; :func:`dpbook.repro.results.write_result` refuses anything else.
    """
    keep = ("epoch", "step", "test_loss", "test_accuracy", "epsilon")
    return {k: _round(row[k]) for k in keep if k in row} | {
        k: _round(v) for k, v in row.items() if k not in keep and isinstance(v, (int, float))}


def _round(v):
    if isinstance(v, float) and math.isfinite(v):
        return float(f"{v:.6g}")
    return v
