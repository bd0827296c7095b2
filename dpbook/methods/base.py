r"""The interface every private-step method implements, and the machinery they share.

A private step (``book/hygiene.md``, "One private step") is, for every method:

``start(params)``
    Accumulators for one logical batch.
``accumulate(acc, micro_batch)``
    Once per physical micro-batch: per-sample norms, and the per-sample gradients or only their re-weighted sums
    (see ``per_sample_vectors``).
``release(acc, noise)``
    The noisy *sum*; the engine divides it by the expected B.
``advance()``
    :math:`t \leftarrow t + 1`: thresholds, bases and schedules move to the next step.

and every method declares:

``releases()``
    What the coming step releases: one :class:`Release` per Gaussian release on the batch, each with its name, its
    data-independent L2 sensitivity and its noise multiplier (its noise std is their product). The first is the
    statistic the optimizer receives; DC-SGD adds its noisy histogram, AdaClip its noisy count, DPDR's decomposition
    steps their coefficients. The multiplier the accountant records for the step is derived from them
    (:meth:`Method.noise_multiplier`, the composition :math:`\sigma_{\mathrm{eff}}`), never declared apart.
``state_dict()``
    Its state as tensors (thresholds, ranges, bases, momentum).
``diagnostics()``
    Numbers for plots and logs that the privacy guarantee covers: released quantities (thresholds, ranges, noisy
    counts, norms of the noisy release), anything computed only from them, and public configuration. The engine
    logs them at every step.
``nonprivate_diagnostics()``
    Statistics of the raw batch, for teaching only (batch means of per-example norms, fractions clipped, exact
    counts): no release covers them. Their keys start with ``"nonprivate/"`` (:func:`is_nonprivate`); the engine
    reports them only on an explicit opt-in (``DPOptimizer(..., nonprivate_diagnostics=True)``, ``Trainer(...)``
    alike), in a section of the log of their own, and result files refuse them (privacy hygiene rule 8).

Privacy hygiene (``book/hygiene.md``, rules 2 and 3) the interface enforces: the noise is drawn from the engine's
generator and never scaled by data; anything that changes over training is updated in ``release``/``advance``
from released noisy quantities and used from the next step on.
"""

from __future__ import annotations

__all__ = [
    "NONPRIVATE_PREFIX", "TRAINING_SET_METRICS", "is_nonprivate", "MicroBatch", "Release",
    "gradient_sensitivity", "restored", "Method", "ScaledSum"
]

import abc
import copy
import functools
import inspect
import math
from dataclasses import dataclass
from typing import ClassVar, Iterable, Sequence

import torch

from dpbook import checks
from dpbook.accounting import PrivacyLedger, sigma_eff
from dpbook.noise import GaussianNoise
from dpbook.per_sample import Grads, NonFiniteGradientError, PerSampleView
from dpbook.tuning import TuningPlan

NONPRIVATE_PREFIX = "nonprivate/"
"""The prefix of every key that names a statistic of the private data not covered by the guarantee."""

TRAINING_SET_METRICS = ("train_loss", "train_accuracy")
"""The names logs and result files used to give the training-set metrics, before they moved behind the opt-in."""


def is_nonprivate(key: str) -> bool:
    """Does ``key`` name a statistic of the private data that no DP release covers?

    ``"nonprivate/..."`` keys, and the training-set metrics under their old names, are; released quantities,
    test-set metrics and public configuration are not.

        >>> [is_nonprivate(k) for k in ("nonprivate/norm", "train_loss", "test_loss", "C_next", "train_size")]
        [True, True, False, False, False]
    """
    return key.startswith(NONPRIVATE_PREFIX) or key in TRAINING_SET_METRICS


@dataclass(frozen=True)
class MicroBatch:
    r"""What a method sees of one physical micro-batch of the logical (Poisson) batch: its examples' per-sample
    gradients as a :class:`~dpbook.per_sample.view.PerSampleView` and their indices.

    The view answers the same questions whichever engine made it (:mod:`dpbook.per_sample.engines`): the norms,
    :meth:`weighted_sum`, :meth:`layer_sq_norms`, :meth:`inner`, :meth:`at` (the same examples at other parameter
    values) and :meth:`combine` (a linear combination of such micro-batches). Only the ``vmap`` engine forms the
    vectors themselves (``grads``): a method that reads them declares ``per_sample_vectors = True``, and the engine
    then always forms them.
    """

    view: PerSampleView
    # The examples' indices in the training set, shape (n,), when the caller passes them (DPOptimizer.step(x, y,
    # index=...); Trainer does), else their positions in the logical batch. A method with per-example state across
    # steps (``per_example_state = True``: DP-PSASC's Algorithm 2, ``psasc_momentum_gd.py``) gets the former: the
    # engine refuses a step without them.
    index: torch.Tensor

    @property
    def n(self) -> int:
        return self.view.n

    @property
    def norms(self) -> torch.Tensor:
        r""":math:`\lVert g_i\rVert`, the flat L2 norm of each example's gradient, shape ``(n,)``."""
        return self.view.norms

    @property
    def grads(self) -> Grads:
        """The per-sample gradients, one tensor ``(n, *shape)`` per parameter (``per_sample_vectors = True`` only)."""
        return self.view.grads

    def weighted_sum(self, weights: torch.Tensor) -> Iterable[torch.Tensor]:
        r""":math:`\sum_i w_ig_i` for each parameter in order (add each into an accumulator before the next, as
        :meth:`ScaledSum.accumulate`)."""
        return self.view.weighted_sum(weights)

    def layer_sq_norms(self) -> torch.Tensor:
        r""":math:`\lVert g_i^{(l)}\rVert^2` for each example and parameter tensor :math:`l`, shape ``(n, m)``."""
        return self.view.layer_sq_norms()

    def inner(self, vectors: Sequence[torch.Tensor]) -> torch.Tensor:
        r""":math:`\langle g_i^{(l)}, v^{(l)}\rangle` with one fixed tensor ``vectors[l]`` per parameter, shape
        ``(n, m)``."""
        return self.view.inner(vectors)

    def at(self, params: Sequence[torch.Tensor]) -> "MicroBatch":
        """The same examples' per-sample gradients at other parameter values (``params``, one per trainable
        parameter): DIFF2's previous iterate."""
        return MicroBatch(self.view.at(params), self.index)

    @staticmethod
    def combine(terms: Sequence[tuple[float, "MicroBatch"]]) -> "MicroBatch":
        r"""The micro-batch of :math:`m_i = \sum_jc_jg_i^{(j)}`, ``terms`` the pairs :math:`(c_j, \text{micro-batch}_j)`
        of the same examples at several parameter values (the first and :meth:`at`): DIFF2's difference, DP-PSASC*'s
        inner momentum. Its ``norms`` and :meth:`weighted_sum` are :math:`m_i`'s: formed on the ``vmap`` path, from the
        passes' stored tensors on the Book-Keeping path (:class:`~dpbook.per_sample.book_keeping.Combination`)."""
        combined = MicroBatch(PerSampleView.combined([(c, mb.view) for c, mb in terms]), terms[0][1].index)
        if not bool(torch.isfinite(combined.norms).all()):  # each term's gradients are finite (the engine checks)
            raise NonFiniteGradientError("an example's combination of its gradients at several iterates (DIFF2's "
                                         "difference, DP-PSASC*'s inner momentum) overflowed; rescale the loss")
        return combined


@dataclass(frozen=True)
class Release:
    r"""One Gaussian release of a private step: a statistic of L2 sensitivity ``sensitivity`` (the most one example
    can move it, whatever its data) plus i.i.d. noise of std ``noise_std = noise_multiplier * sensitivity``.

    The multiplier is the declared number, the std follows from it, so the two cannot disagree. A multiplier of
    ``math.inf`` means nothing is released (e.g. DC-SGD without a histogram). ``in_gradient`` says whether the
    statistic is part of the noisy gradient the optimizer receives (False for DC-SGD's histogram and AdaClip's
    count, which only move the next threshold).

        >>> r = Release("gradient", sensitivity=0.5, noise_multiplier=2.0)
        >>> r.noise_std
        1.0
        >>> Release("gradient", sensitivity=-1.0, noise_multiplier=1.0)
        Traceback (most recent call last):
            ...
        ValueError: sensitivity of the release 'gradient' must be a finite number > 0, got -1.0
    """

    name: str
    sensitivity: float
    noise_multiplier: float
    in_gradient: bool = True

    def __post_init__(self):
        checks.positive(f"sensitivity of the release {self.name!r}", self.sensitivity)
        checks.non_negative(f"noise multiplier of the release {self.name!r}", self.noise_multiplier, allow_inf=True)

    @property
    def noise_std(self) -> float:
        """The std of the noise added to each coordinate of the statistic."""
        return self.noise_multiplier * self.sensitivity


def gradient_sensitivity(releases: Sequence[Release]) -> float:
    """The L2 bound of one example's effect on the noisy gradient the optimizer receives: the statistics that form it
    are orthogonal parts of it (DPDR's orthogonal parts and coefficients), so their sensitivities add in quadrature.

        >>> gradient_sensitivity([Release("orthogonal", 3.0, 1.0), Release("alpha", 4.0, 2.0)])
        5.0
        >>> gradient_sensitivity([Release("gradient", 0.5, 1.0), Release("histogram", 1.0, 5.0, in_gradient=False)])
        0.5
    """
    return math.hypot(*(r.sensitivity for r in releases if r.in_gradient))


def restored(current: list[torch.Tensor], saved: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """A method's tensor state loaded from a checkpoint: copied into the current tensors in place (they keep their
    device and any references to them), or cloned when the method holds none yet.

        >>> M = [torch.zeros(2)]
        >>> restored(M, [torch.ones(2)]) is M, M[0].tolist(), restored([], [torch.ones(1)])[0].tolist()
        (True, [1.0, 1.0], [1.0])
    """
    if not current:
        return [s.clone() for s in saved]
    for c, s in zip(current, saved):
        c.copy_(s)
    return current


@functools.lru_cache(maxsize=None)
def _signature(cls: type) -> inspect.Signature:
    """The constructor's signature of a method class, read once (every copy of a method calls ``__new__``)."""
    return inspect.signature(cls.__init__)


class Method(abc.ABC):
    """Base class of every private-step method (see the module docstring for the protocol)."""

    name: ClassVar[str]
    #: True when ``accumulate`` reads the per-sample gradient vectors (``mb.grads``, ``mb.grads_at``): projections,
    #: differences, momenta over iterates. False when it needs only their norms and re-weighted sums
    #: (``mb.weighted_sum``), which the engine then gets without forming them (Book-Keeping).
    per_sample_vectors: ClassVar[bool] = True
    #: True when the method keeps a state per example across steps: ``accumulate`` reads ``mb.index``, the examples'
    #: indices in the training set, and the engine refuses a step without them.
    per_example_state: ClassVar[bool] = False
    #: True for a full-batch method (every step sees all :math:`N` examples, :math:`q = 1`), which a minibatch grid
    #: cannot run.
    full_batch: ClassVar[bool] = False

    def __new__(cls, *args, **kwargs):
        """Record the constructor's arguments, defaults filled in (:attr:`hyperparameters`): a checkpoint's
        fingerprint holds every one, so a run resumed with another value is refused."""
        self = super().__new__(cls)
        try:
            bound = _signature(cls).bind(self, *args, **kwargs)
        except TypeError:  # __init__ raises the same error; copy and pickle call __new__ without arguments
            return self
        bound.apply_defaults()
        self.hyperparameters = dict(list(bound.arguments.items())[1:])  # all but self
        return self

    def __init__(self) -> None:
        self.t = 0  # index of the coming step, 0-based
        self.d = 0  # number of trainable parameters (set by bind)
        self.B = 0.0  # expected batch size (set by bind)
        self._nonprivate: dict[str, float] = {}  # raw-batch statistics of the last release, filled by release

    @classmethod
    def from_plan(cls, plan: TuningPlan, **hyperparameters) -> "Method":
        r"""The method with the noise that ``plan`` (a calibrated run or search) gives every run.

        ``plan.sigma`` is the noise multiplier of a DP-SGD run of ``plan.steps`` steps at ``plan.sample_rate`` that
        spends the budget under the plan's protocol. A method whose accounting is that of DP-SGD at :math:`\sigma`
        takes it as is (this default); a method with another schedule or history overrides this (Du et al. need
        :math:`T`; DPDR calibrates :math:`\sigma_g` for its heterogeneous history).

        >>> from dpbook.tuning import tuning_plan
        >>> from dpbook.methods import make_method, METHODS
        >>> plan = tuning_plan(4.0, 1e-5, sample_rate=0.01, steps=1000)
        >>> METHODS["dpsgd"].from_plan(plan, C=1.0).sigma == plan.sigma
        True
        """
        return cls(sigma=plan.sigma, **hyperparameters)

    def bind(self, params: Sequence[torch.Tensor], *, expected_batch_size: float) -> None:
        """Called once by the engine: the trainable parameters and the expected batch size :math:`B`."""
        self.d = sum(p.numel() for p in params)
        self.B = float(expected_batch_size)

    # --- what the method declares -------------------------------------------------------------------
    @abc.abstractmethod
    def releases(self) -> tuple[Release, ...]:
        """The Gaussian releases of the coming step, the statistic the optimizer receives first."""

    def noise_multiplier(self, releases: Sequence[Release] | None = None) -> float:
        r"""The multiplier the accountant records for the coming step, derived from its releases (``releases``, a
        step's as :meth:`start` declared them, or :meth:`releases`): the releases share one Poisson batch, so they
        are one subsampled Gaussian mechanism at :math:`\sigma_{\mathrm{eff}} = (\sum_j\sigma_j^{-2})^{-1/2}` of
        their multipliers :math:`\sigma_j` (privacy hygiene rule 4). No method overrides it."""
        return sigma_eff(*(r.noise_multiplier for r in (self.releases() if releases is None else releases)))

    def planned_history(self, sample_rate: float, steps: int) -> list[tuple[float, float, int]]:
        r"""The history the engine's ledger records over a run of ``steps`` steps at ``sample_rate`` from this
        method's first step: each step's :meth:`noise_multiplier`, equal neighbours merged. The noise a step
        declares depends on its index only (never on the data), so the history is known before the run, and a
        result file's :math:`\varepsilon` can be recomputed from its configuration alone
        (:mod:`dpbook.repro.contributed`).

        >>> from dpbook.methods import METHODS
        >>> dpdr = METHODS["dpdr"](C_g=1.0, C_perp=1.0, C_alpha=1.0, sigma_g=1.0, sigma_perp=3.0, sigma_alpha=4.0, s=3)
        >>> dpdr.planned_history(0.01, 5)  # DP-SGD's step 1, GDR's steps 2 and 3, then DP-SGD's again
        [(1.0, 0.01, 1), (2.4, 0.01, 2), (1.0, 0.01, 2)]
        """
        ledger, step = PrivacyLedger(), copy.copy(self)
        for t in range(checks.integer("steps", steps, minimum=0)):
            step.t = t
            ledger.record(step.noise_multiplier(), sample_rate)
        return ledger.history

    # --- the step -----------------------------------------------------------------------------------
    def start(self, params: Sequence[torch.Tensor]) -> dict:
        """Fresh accumulators for one logical batch: the running sum of contributions, their count, and the step's
        releases, declared once here (``acc["releases"]``, :meth:`releases`), before any example is seen: the
        accountant's multiplier and every noise the step draws read them. A method adds its own accumulators."""
        return {"sum": [torch.zeros_like(p) for p in params], "n": 0, "releases": self.releases()}

    @abc.abstractmethod
    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        """Add one micro-batch's contributions to ``acc``."""

    @abc.abstractmethod
    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        """The noisy sum of contributions (the engine divides it by :math:`B`), its noise that of the step's
        declared releases, ``acc["releases"]``."""

    def advance(self) -> None:
        """Move to the next step."""
        self.t += 1

    # --- state and diagnostics ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"t": self.t}

    def load_state_dict(self, state: dict) -> None:
        self.t = int(state["t"])

    def diagnostics(self) -> dict[str, float]:
        """Released quantities and public numbers only (read by the engine after each release, before ``advance``)."""
        return {}

    def nonprivate_diagnostics(self) -> dict[str, float]:
        """``"nonprivate/..."`` statistics of the last release's raw batch, for teaching only (no DP guarantee).

        A method records them in ``self._nonprivate`` when it releases; only these keys may start with
        ``"nonprivate/"``.
        """
        return dict(self._nonprivate)


class ScaledSum(Method):
    r"""The unified template of per-sample clipping and scaling (the DP-PSASC paper's Eqs. (1)-(6)).

    Every example contributes :math:`w(\lVert g_i\rVert)\,g_i` with :math:`w(G)\,G \le \Delta` for every norm
    :math:`G`, where :math:`\Delta` = ``sensitivity()``, and the release is
    :math:`\sum_i w_ig_i + \mathcal N\big(0, (\sigma\Delta)^2I\big)`, one :class:`Release` named ``"gradient"``.
    Subclasses define :meth:`weights` and :meth:`sensitivity` (and set ``self.sigma``). Norms and a re-weighted sum
    are all it needs, so the engine never forms the per-sample gradients (Book-Keeping).
    """

    per_sample_vectors: ClassVar[bool] = False
    sigma: float  # the gradient's noise multiplier

    @abc.abstractmethod
    def sensitivity(self) -> float:
        r""":math:`\Delta = \sup_G w(G)\,G`: the L2 bound of one example's weighted gradient at the coming step."""

    def releases(self) -> tuple[Release, ...]:
        return (Release("gradient", self.sensitivity(), self.sigma),)

    @abc.abstractmethod
    def weights(self, norms: torch.Tensor) -> torch.Tensor:
        r"""Per-example weights :math:`w_i` from the unclipped norms :math:`\lVert g_i\rVert` (shape ``(n,)``)."""

    def accumulate(self, acc: dict, mb: MicroBatch) -> None:
        for s, c in zip(acc["sum"], mb.weighted_sum(self.weights(mb.norms))):
            s.add_(c)
        acc["n"] += mb.n

    def release(self, acc: dict, noise: GaussianNoise) -> Grads:
        for s in acc["sum"]:  # in place: one parameter's noise at a time, no second copy of the model's size
            noise.add_(acc["releases"][0], s)
        return acc["sum"]
