r"""The setting of the chapter *DP-PSASC in training* (a CPU analogue of Table III of Huang et al.'s DP-PSASC paper),
split over several pages: one frozen dataclass, built on each page from the page's parameters
(:func:`dpbook.repro.params.from_notebook`), so that every page trains the same two tasks at the same noise, with the
same five methods, the same learning rates and the same training loop, from one definition.

- :class:`TableIIIAnalogue`: the two tasks (scikit-learn's digits with :func:`dpbook.models.digits_cnn`, and Gaussian
  clusters with a fraction of flipped training labels and a small MLP), each with its :math:`(C, r, s)`, its batch
  size, its epochs and the one noise multiplier :math:`\sigma` that all five methods share at
  :math:`(\varepsilon, \delta)`; each method at the paper's hyperparameters (:meth:`TableIIIAnalogue.method_for`),
  its learning rate :math:`\eta=\eta_{\text{eff}}\gamma_1/\Delta` (:meth:`TableIIIAnalogue.lr_for`), one training
  run that can record the last epochs (:meth:`TableIIIAnalogue.train`) and the search of :math:`\eta_{\text{eff}}`
  on a grid (:meth:`TableIIIAnalogue.tune`);
- :func:`flipped_labels`: the synthetic task's training labels, a fraction of them changed to another class;
- :func:`flat`: tensors (a model's parameters, per-layer gradients) as one vector.

On a page::

    setting = from_notebook(TableIIIAnalogue, globals())
    TASKS, train = setting.tasks, setting.train
"""

from __future__ import annotations

__all__ = ["TableIIIAnalogue", "flipped_labels", "flat"]

import functools
from dataclasses import dataclass
from typing import ClassVar, Iterable, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from dpbook.accounting import noise_multiplier
from dpbook.data import DataSplits, load_digits, synthetic_classification
from dpbook.methods import make_method
from dpbook.models import digits_cnn
from dpbook.optim import DPOptimizer
from dpbook.per_sample import PerSampleGradients, flat_norms
from dpbook.repro.papers.chapter import method_labels
from dpbook.repro.papers.psasc import paper_point
from dpbook.sampling import PoissonSampler
from dpbook.train import evaluate


def flipped_labels(data: DataSplits, fraction: float, seed: int) -> tuple[DataSplits, torch.Tensor]:
    """A copy of ``data`` whose training labels are changed to another class for ``fraction`` of the examples (drawn
    with ``seed``), and the mask of those examples. The test labels stay true.

    >>> data = synthetic_classification(n_train=400, n_test=40, shape=5, num_classes=3, seed=0)
    >>> flipped, hard = flipped_labels(data, 0.25, seed=1)
    >>> bool(torch.equal(flipped.y_train != data.y_train, hard)), 0.15 < float(hard.double().mean()) < 0.35
    (True, True)
    """
    g = torch.Generator().manual_seed(seed)
    n, k = len(data.y_train), int(data.y_train.max()) + 1
    hard = torch.rand(n, generator=g) < fraction
    other = (data.y_train + torch.randint(1, k, (n,), generator=g)) % k
    return DataSplits(data.x_train, torch.where(hard, other, data.y_train), data.x_test, data.y_test), hard


def flat(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """The tensors, detached and flattened, one after the other in one vector (torch's
    :func:`~torch.nn.utils.parameters_to_vector`, detached: the records are analysis, not part of the graph).

    >>> flat([torch.ones(2, 2), torch.zeros(3)]).tolist()
    [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    """
    return parameters_to_vector(tensors).detach()


@dataclass(frozen=True)
class TableIIIAnalogue:
    r"""The chapter's two tasks and five methods, every run of a task within :math:`(\varepsilon, \delta)` =
    (``target_epsilon``, ``delta``) at one noise multiplier :math:`\sigma`.

    - **digits**: :func:`dpbook.data.load_digits` and :func:`dpbook.models.digits_cnn`, ``digits_epochs`` epochs of
      Poisson batches of expected size ``digits_batch``, and the :math:`(C, r, s)` = (``digits_C``, ``digits_r``,
      ``digits_s``) of the paper's MNIST row;
    - **synthetic**: ``synthetic_n`` training and ``synthetic_n // 3`` test examples of
      :func:`dpbook.data.synthetic_classification` (``synthetic_dim`` features, ``synthetic_classes`` classes,
      ``synthetic_separation``), a fraction ``synthetic_hard_fraction`` of the training labels flipped
      (:func:`flipped_labels`), the MLP :meth:`mlp`, ``synthetic_epochs`` epochs at ``synthetic_batch`` and the
      :math:`(C, r, s)` of the FashionMNIST row.

    DP-PSASC* (Algorithm 3) takes ``K0``, ``gamma0`` and ``gamma1``. :attr:`tasks` holds each task's data, model,
    :math:`B`, epochs, :math:`(C, r, s)`, :math:`N`, :math:`q`, :math:`T`, :math:`\sigma` and each method's
    hyperparameters (``hp``), as the chapter's cells read them.

    >>> setting = TableIIIAnalogue(target_epsilon=4.0, delta=1e-5, digits_epochs=1, digits_batch=128, digits_C=0.3,
    ...     digits_r=1e-4, digits_s=0.9, synthetic_n=300, synthetic_dim=20, synthetic_classes=4,
    ...     synthetic_separation=0.6, synthetic_hard_fraction=0.2, synthetic_epochs=1, synthetic_batch=100,
    ...     synthetic_C=0.25, synthetic_r=1e-3, synthetic_s=0.55, K0=1, gamma0=0.5, gamma1=0.5)
    >>> t = setting.tasks["synthetic"]
    >>> t["N"], t["q"], t["T"], t["hp"]["psasc"]
    (300, 0.3333333333333333, 3, {'C': 0.25, 'r': 0.001, 's': 0.55})
    >>> from dpbook.accounting import epsilon
    >>> all(epsilon(t["sigma"], t["q"], t["T"], 1e-5) <= 4.0 for t in setting.tasks.values())
    True
    >>> setting.lr_for("synthetic", "psasc", 2.0) == 2.0 / setting.method_for("synthetic", "psasc").sensitivity()
    True
    >>> accuracy, info = setting.train("synthetic", "psasc", 1.0, seed=0, record_last=1)
    >>> len(info["records"]) > 0, len(info["epoch_params"]), 0.0 <= accuracy <= 1.0
    (True, 2, True)
    >>> again, _ = setting.train("synthetic", "psasc", 1.0, seed=0)   # recording does not change the run
    >>> again == accuracy
    True
    """

    #: The methods the chapter compares, as :func:`dpbook.methods.make_method` names them, in its tables' order.
    METHODS: ClassVar[tuple[str, ...]] = ("dpsgd", "autos", "psac", "psasc", "psasc-momentum")
    #: Their labels in the chapter's tables and figures (Bu et al.'s Auto-S under its own name).
    LABELS: ClassVar[dict[str, str]] = method_labels(METHODS, {"autos": "Auto-S"})

    target_epsilon: float
    delta: float
    digits_epochs: int
    digits_batch: int
    digits_C: float
    digits_r: float
    digits_s: float
    synthetic_n: int
    synthetic_dim: int
    synthetic_classes: int
    synthetic_separation: float
    synthetic_hard_fraction: float
    synthetic_epochs: int
    synthetic_batch: int
    synthetic_C: float
    synthetic_r: float
    synthetic_s: float
    K0: int
    gamma0: float
    gamma1: float

    def mlp(self) -> nn.Module:
        """The synthetic task's model: ``synthetic_dim`` features, 32 tanh units, ``synthetic_classes`` outputs."""
        return nn.Sequential(nn.Linear(self.synthetic_dim, 32), nn.Tanh(), nn.Linear(32, self.synthetic_classes))

    @functools.cached_property
    def synthetic(self) -> tuple[DataSplits, torch.Tensor]:
        """The synthetic task's data (the clusters drawn with seed 0, the labels flipped with seed 1) and the mask of
        its flipped training examples."""
        clean = synthetic_classification(n_train=self.synthetic_n, n_test=self.synthetic_n // 3,
                                         shape=self.synthetic_dim, num_classes=self.synthetic_classes,
                                         separation=self.synthetic_separation, seed=0)
        return flipped_labels(clean, self.synthetic_hard_fraction, seed=1)

    @functools.cached_property
    def tasks(self) -> dict[str, dict]:
        r"""Each task by name: ``data``, ``model`` (a factory), ``B``, ``epochs``, ``C``, ``r``, ``s``, ``N``,
        ``q`` = :math:`B/N`, ``T`` (the sampler's steps per epoch times the epochs), ``sigma`` (calibrated with
        :func:`dpbook.accounting.noise_multiplier`) and ``hp`` (each method's keywords,
        :func:`dpbook.repro.papers.psasc.paper_point`)."""
        tasks = {
            "digits": dict(data=load_digits(), model=digits_cnn, B=self.digits_batch, epochs=self.digits_epochs,
                           C=self.digits_C, r=self.digits_r, s=self.digits_s),
            "synthetic": dict(data=self.synthetic[0], model=self.mlp, B=self.synthetic_batch,
                              epochs=self.synthetic_epochs, C=self.synthetic_C, r=self.synthetic_r,
                              s=self.synthetic_s),
        }
        for t in tasks.values():
            t["N"] = len(t["data"].x_train)
            t["q"] = t["B"] / t["N"]
            t["T"] = t["epochs"] * PoissonSampler(N=t["N"], expected_batch_size=t["B"]).steps_per_epoch()
            t["sigma"] = noise_multiplier(self.target_epsilon, self.delta, t["q"], t["T"])
            t["hp"] = {m: paper_point(m, C=t["C"], r=t["r"], s=t["s"], K0=self.K0, gamma0=self.gamma0,
                                      gamma1=self.gamma1) for m in self.METHODS}
        return tasks

    def method_for(self, task: str, name: str, **overrides):
        """The method ``name`` with the task's sigma and the paper's hyperparameters (``overrides`` replace them)."""
        t = self.tasks[task]
        return make_method(name, sigma=t["sigma"], **{**t["hp"][name], **overrides})

    def lr_for(self, task: str, name: str, lr_eff: float) -> float:
        r"""The learning rate :math:`\eta` of effective rate ``lr_eff`` = :math:`\eta\Delta/\gamma_1` (:math:`\gamma_1`
        = 1 but for DP-PSASC*'s outer momentum)."""
        m = self.method_for(task, name)
        return lr_eff * getattr(m, "gamma1", 1.0) / m.sensitivity()

    def train(self, task: str, name: str, lr: float, seed: int, *, record_last: int = 0, full_norms: bool = False,
              **overrides) -> tuple[float, dict]:
        """One run of the method ``name`` on ``task`` with plain SGD at learning rate ``lr``: the model initialised
        from ``seed``, Poisson batches from ``seed``, the noise from ``seed + 1_000_003``, :math:`T` private steps of
        :class:`~dpbook.optim.DPOptimizer`.

        Returns the final test accuracy and a dict: ``records``, one per step of the last ``record_last`` epochs
        (its epoch, the cosine between the parameters' change and the non-private sum of the batch's gradients, the
        per-sample norms, the method's weights at them and its sensitivity); ``epoch_norms``, with ``full_norms``
        every training example's gradient norm after each epoch; ``params``, the final parameters; and
        ``epoch_params``, with ``record_last > 0`` the parameters at the start and after every epoch. Recording is
        non-private analysis and does not change the run."""
        t = self.tasks[task]
        torch.manual_seed(seed)
        model = t["model"]()
        method = self.method_for(task, name, **overrides)
        sampler = PoissonSampler(N=t["N"], expected_batch_size=t["B"], seed=seed)
        engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=lr), method, sample_rate=sampler.q,
                             expected_batch_size=t["B"], noise_seed=seed + 1_000_003)
        x_train, y_train = t["data"].x_train, t["data"].y_train
        steps_per_epoch = sampler.steps_per_epoch()
        psg = PerSampleGradients(model, nn.functional.cross_entropy)
        records, epoch_norms = [], []
        epoch_params = [flat(engine.params)] if record_last else []  # w_0, then w after each epoch (Fig. 7)
        for step in range(t["T"]):
            idx = sampler.sample()
            x, y = x_train[idx], y_train[idx]
            epoch = step // steps_per_epoch + 1
            if epoch > t["epochs"] - record_last and len(idx) > 0:
                grads = psg(x, y)
                norms = flat_norms(grads)
                nonprivate = flat([g.sum(0) for g in grads])
                before = flat(engine.params)
                engine.step(x, y)
                update = before - flat(engine.params)  # = lr * (released noisy sum) / B
                records.append({"epoch": epoch,
                                "cos": float(torch.nn.functional.cosine_similarity(update, nonprivate, dim=0)),
                                "norms": norms, "weights": method.weights(norms),
                                "sensitivity": method.sensitivity()})
            else:
                engine.step(x, y)
            if full_norms and (step + 1) % steps_per_epoch == 0:  # every training example's norm after each epoch
                epoch_norms.append(flat_norms(psg(x_train, y_train)))
            if record_last and (step + 1) % steps_per_epoch == 0:
                epoch_params.append(flat(engine.params))
        assert engine.ledger.history == [(t["sigma"], t["q"], t["T"])]
        accuracy = evaluate(model, t["data"].x_test, t["data"].y_test)["accuracy"]
        return accuracy, {"records": records, "epoch_norms": epoch_norms, "params": flat(engine.params),
                          "epoch_params": epoch_params}

    def tune(self, task: str, names: Sequence[str], lr_eff_grid: Sequence[float],
             seed: int) -> tuple[dict[str, float], dict[str, list[float]]]:
        r"""The search of :math:`\eta_{\text{eff}}` (not private): one run of each method in ``names`` at each point
        of ``lr_eff_grid``, on ``seed``. Returns each method's best point (the first of the highest test accuracy)
        and its accuracies on the grid; a grid of one point is returned as it is, with no run."""
        if len(lr_eff_grid) == 1:  # nothing to choose from
            return {n: lr_eff_grid[0] for n in names}, {n: [] for n in names}
        grid_acc = {n: [self.train(task, n, self.lr_for(task, n, lr_eff), seed)[0] for lr_eff in lr_eff_grid]
                    for n in names}
        return {n: lr_eff_grid[int(np.argmax(grid_acc[n]))] for n in names}, grid_acc
