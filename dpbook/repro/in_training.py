r"""The settings of the chapters that train the methods on the digits ("DPDR in training", "DC-SGD in training"),
each split over several pages: one frozen dataclass per chapter, built on each of its pages from the page's
parameters (:func:`dpbook.repro.params.from_notebook`), so that every page trains on the same data, at the same
noise, with the same methods, from one definition.

- :class:`DigitsBudget`: the data (scikit-learn's digits, :func:`dpbook.data.load_digits`), the budget
  :math:`(\varepsilon, \delta)`, the expected batch size :math:`B` and the number of epochs; from them
  :math:`N`, :math:`q = B/N`, :math:`T` and the one noise multiplier :math:`\sigma` that :math:`T` Poisson-sampled
  Gaussian releases at rate :math:`q` may have within the budget (RDP accountant);
- :class:`DPDRDigits`: DPDR's chapter, which compares DPDR (Liu et al.) with DP-SGD, DIFF and DIFF2; DPDR's
  :math:`\sigma_g` is recalibrated for every GDR length :math:`s` so that every run spends exactly the budget;
- :class:`DCSGDDigits`: DC-SGD's chapter, which compares DP-SGD, DC-SGD-P, DC-SGD-E (Wei et al.) and the thresholds
  of Andrew et al. and of Du et al., every one accounted at :math:`\sigma`, and trains them with Adam.

On a page::

    setting = from_notebook(DPDRDigits, globals())
    dpdr = setting.method("dpdr")
"""

from __future__ import annotations

__all__ = ["DigitsBudget", "DPDRDigits", "DCSGDDigits"]

import functools
from dataclasses import dataclass
from typing import ClassVar

import torch

from dpbook.accounting import noise_multiplier
from dpbook.data import DataSplits, load_digits
from dpbook.methods import make_method
from dpbook.methods.dpdr import calibrate_sigma_g
from dpbook.models import digits_cnn
from dpbook.sampling import PoissonSampler
from dpbook.train import Trainer


@dataclass(frozen=True)
class DigitsBudget:
    r"""Training on the digits at one budget: ``epochs`` epochs of Poisson batches of expected size
    ``expected_batch_size`` (:math:`B`), every run within :math:`(\varepsilon, \delta)` = (``target_epsilon``,
    ``delta``).

    :attr:`T` is the number of steps the :class:`~dpbook.train.Trainer` takes (``epochs`` times
    :math:`\mathrm{round}(1/q)`), and :attr:`sigma` the smallest noise multiplier whose :math:`T` releases at rate
    :math:`q` stay within the budget:

    >>> from dpbook.accounting import epsilon_of_history
    >>> budget = DigitsBudget(target_epsilon=4.0, delta=1e-5, expected_batch_size=64, epochs=10)
    >>> budget.N, round(budget.q, 4), budget.T
    (1437, 0.0445, 220)
    >>> spent = epsilon_of_history([(budget.sigma, budget.q, budget.T)], budget.delta)
    >>> 3.9 < spent <= budget.target_epsilon
    True
    """

    target_epsilon: float
    delta: float
    expected_batch_size: int
    epochs: int

    @functools.cached_property
    def data(self) -> DataSplits:
        """The digits' fixed split (:func:`dpbook.data.load_digits`): 1,437 training and 360 test images."""
        return load_digits()

    @property
    def N(self) -> int:
        """The number of training examples."""
        return len(self.data.x_train)

    @property
    def q(self) -> float:
        """The sampling rate :math:`B/N`."""
        return self.expected_batch_size / self.N

    @property
    def T(self) -> int:
        """The number of steps of a run: ``epochs`` times the sampler's steps per epoch."""
        return self.epochs * PoissonSampler(N=self.N, expected_batch_size=self.expected_batch_size).steps_per_epoch()

    @functools.cached_property
    def sigma(self) -> float:
        r"""The noise multiplier of every release (:func:`dpbook.accounting.noise_multiplier`, RDP)."""
        return noise_multiplier(self.target_epsilon, self.delta, self.q, self.T, accountant="rdp")


@functools.lru_cache(maxsize=None)
def _sigma_g(target_epsilon: float, sigma_perp: float, sigma_alpha: float, s: int, q: float, T: int,
             delta: float) -> float:
    return calibrate_sigma_g(target_epsilon, sigma_perp=sigma_perp, sigma_alpha=sigma_alpha, s=s, sample_rate=q,
                             steps=T, delta=delta)


@dataclass(frozen=True)
class DPDRDigits(DigitsBudget):
    r"""DPDR's chapter on the digits: DP-SGD, DIFF and DIFF2 release one Gaussian sum per step at the budget's
    :math:`\sigma`; DPDR takes :math:`\sigma_\perp = \sigma` and :math:`\sigma_\alpha` = ``sigma_alpha_ratio``
    :math:`\sigma_\perp` on its GDR steps, which then cost :math:`\sigma_{\text{eff}}(\sigma_\perp, \sigma_\alpha)
    < \sigma` each, and its other steps a :math:`\sigma_g` slightly above :math:`\sigma`, calibrated for the exact
    schedule (:func:`~dpbook.methods.dpdr.calibrate_sigma_g`).

    The bounds: ``C_g`` (DP-SGD's, also DPDR's DP-SGD steps and the restarts of DIFF and DIFF2), ``C_perp`` and
    ``C_alpha`` (DPDR's orthogonal parts and vector of per-layer coefficients), ``C_d`` (``{"diff": ..., "diff2":
    ...}``, the differences); ``restart_every``: DIFF2's :math:`T_{\text{restart}}`; ``s_fraction``: DPDR's GDR on
    steps 2 to :math:`s` = :meth:`s_of` (``s_fraction``).

    >>> from dpbook.accounting import epsilon_of_history
    >>> from dpbook.methods.dpdr import dpdr_history
    >>> setting = DPDRDigits(target_epsilon=4.0, delta=1e-5, expected_batch_size=64, epochs=5, C_g=1.0,
    ...                      C_perp=2.0, C_alpha=0.3, sigma_alpha_ratio=3.0, s_fraction=0.2,
    ...                      C_d={"diff": 0.5, "diff2": 0.3}, restart_every=3)
    >>> setting.T, setting.s, setting.s_of(0.0), setting.s_of(1.0)
    (110, 23, 1, 110)
    >>> dpdr = setting.method("dpdr")
    >>> setting.sigma < dpdr.sigma_g < 1.1 * setting.sigma   # the GDR steps, paid for by the DP-SGD steps
    True
    >>> history = dpdr_history(sigma_g=dpdr.sigma_g, sigma_perp=setting.sigma_perp, sigma_alpha=setting.sigma_alpha,
    ...                        s=setting.s, sample_rate=setting.q, steps=setting.T)
    >>> round(epsilon_of_history(history, setting.delta), 3)   # exactly the budget, as DP-SGD's run
    4.0
    >>> setting.method("dpdr", s=2).sigma_g < dpdr.sigma_g     # one GDR step costs less than 22
    True
    >>> setting.method("diff2").restart_every, setting.method("diff").sigma == setting.sigma
    (3, True)
    """

    #: The methods the chapter compares, as :func:`dpbook.methods.make_method` names them.
    METHODS: ClassVar[tuple[str, ...]] = ("dpsgd", "dpdr", "diff", "diff2")

    C_g: float
    C_perp: float
    C_alpha: float
    sigma_alpha_ratio: float
    s_fraction: float
    C_d: dict[str, float]
    restart_every: int

    @property
    def sigma_perp(self) -> float:
        r""":math:`\sigma_\perp`, the noise multiplier of a GDR step's orthogonal part: :math:`\sigma`."""
        return self.sigma

    @property
    def sigma_alpha(self) -> float:
        r""":math:`\sigma_\alpha`, that of its per-layer coefficients: ``sigma_alpha_ratio`` :math:`\sigma_\perp`."""
        return self.sigma_alpha_ratio * self.sigma_perp

    def s_of(self, fraction: float) -> int:
        r"""The GDR length :math:`s` at ``fraction`` of the run: :math:`1 + \mathrm{round}(\text{fraction}\,(T-1))`
        (0: no GDR step, 1: every step after the first)."""
        return 1 + round(fraction * (self.T - 1))

    @property
    def s(self) -> int:
        """The GDR length of the chapter's runs, :meth:`s_of` (``s_fraction``)."""
        return self.s_of(self.s_fraction)

    def sigma_g_for(self, s: int) -> float:
        r"""The :math:`\sigma_g` that makes a DPDR run with GDR on steps 2 to ``s`` cost exactly the budget (computed
        once for each ``s``); a ValueError if the GDR steps alone cost more."""
        return _sigma_g(self.target_epsilon, self.sigma_perp, self.sigma_alpha, s, self.q, self.T, self.delta)

    def method(self, name: str, s: int | None = None, C_alpha: float | None = None):
        """The method ``name`` (one of :attr:`METHODS`) at the chapter's bounds and noise; DPDR's GDR length ``s``
        (default :attr:`s`, its :math:`\\sigma_g` recalibrated) and coefficient bound ``C_alpha`` (default the
        chapter's) may be changed, as the chapter's sweeps do."""
        if name == "dpsgd":
            return make_method("dpsgd", C=self.C_g, sigma=self.sigma)
        if name == "dpdr":
            s = self.s if s is None else s
            C_alpha = self.C_alpha if C_alpha is None else C_alpha
            return make_method("dpdr", C_perp=self.C_perp, C_alpha=C_alpha, sigma_perp=self.sigma_perp,
                               sigma_alpha=self.sigma_alpha, C_g=self.C_g, sigma_g=self.sigma_g_for(s), s=s)
        if name == "diff":
            return make_method("diff", C_d=self.C_d["diff"], C_g=self.C_g, sigma=self.sigma)
        if name == "diff2":
            return make_method("diff2", C_d=self.C_d["diff2"], C_g=self.C_g, sigma=self.sigma,
                               restart_every=self.restart_every)
        raise ValueError(f"unknown method {name!r}; the chapter compares {list(self.METHODS)}")


@dataclass(frozen=True)
class DCSGDDigits(DigitsBudget):
    r"""DC-SGD's chapter on the digits: the five methods, each accounted at the budget's :math:`\sigma` (DC-SGD and
    Andrew et al. spend a sliver of it on choosing their threshold), each trained with Adam at learning rate ``lr``.

    Their hyperparameters: ``C_dpsgd``, DP-SGD's fixed threshold :math:`C`; ``p_dcsgd``, DC-SGD-P's fraction
    :math:`p` of examples left unclipped (DC-SGD-E has none); ``p_adaclip`` and ``eta_C``, Andrew et al.'s target
    quantile :math:`p` and rate :math:`\eta_C`; ``C0_dynamic`` and ``rho_C``, Du et al.'s schedule
    :math:`C_0\rho_C^{t/T}`.

    A run (:meth:`trainer`) is one (method, seed): the seed fixes the model's initial weights and the Poisson
    batches, the same for every method.

    >>> setting = DCSGDDigits(target_epsilon=4.0, delta=1e-5, expected_batch_size=64, epochs=10, lr=0.01,
    ...                       C_dpsgd=1.0, p_dcsgd=0.5, p_adaclip=0.5, eta_C=0.2, C0_dynamic=1.0, rho_C=0.5)
    >>> setting.hyperparameters("adaclip"), setting.hyperparameters("dynamic")["T"] == setting.T
    ({'p': 0.5, 'eta_C': 0.2}, True)
    >>> dpsgd, dcsgd = setting.trainer("dpsgd", seed=0), setting.trainer("dcsgd-e", seed=0)
    >>> all(torch.equal(a, b) for a, b in zip(dpsgd.model.parameters(), dcsgd.model.parameters()))
    True
    >>> log = dcsgd.run(max_steps=3)   # DC-SGD-E's threshold of step t + 1 is the one computed at step t
    >>> len(log.steps), all(a["C_next"] == b["C"] for a, b in zip(log.steps, log.steps[1:]))
    (3, True)
    """

    #: The methods the chapter compares, as :func:`dpbook.methods.make_method` names them, in its tables' order.
    METHODS: ClassVar[tuple[str, ...]] = ("dpsgd", "dcsgd-p", "dcsgd-e", "adaclip", "dynamic")

    lr: float
    C_dpsgd: float
    p_dcsgd: float
    p_adaclip: float
    eta_C: float
    C0_dynamic: float
    rho_C: float

    def hyperparameters(self, name: str) -> dict:
        """The keywords of the method ``name`` (one of :attr:`METHODS`) besides ``sigma``."""
        if name not in self.METHODS:
            raise ValueError(f"unknown method {name!r}; the chapter compares {list(self.METHODS)}")
        return {"dpsgd": dict(C=self.C_dpsgd), "dcsgd-p": dict(p=self.p_dcsgd), "dcsgd-e": {},
                "adaclip": dict(p=self.p_adaclip, eta_C=self.eta_C),
                "dynamic": dict(C_0=self.C0_dynamic, rho_C=self.rho_C, T=self.T)}[name]

    def method(self, name: str):
        """The method ``name`` at the budget's :math:`\\sigma` with its :meth:`hyperparameters`."""
        return make_method(name, sigma=self.sigma, **self.hyperparameters(name))

    def trainer(self, name: str, seed: int) -> Trainer:
        """One run of the method ``name``: a :func:`~dpbook.models.digits_cnn` initialised from ``seed``, Adam at
        ``lr``, Poisson batches from ``seed``, with the raw batches' statistics in ``log.nonprivate`` (non-private
        diagnostics, for teaching only)."""
        torch.manual_seed(seed)
        model = digits_cnn()
        return Trainer(model, self.method(name), torch.optim.Adam(model.parameters(), lr=self.lr), self.data,
                       expected_batch_size=self.expected_batch_size, epochs=self.epochs, delta=self.delta,
                       seed=seed, nonprivate_diagnostics=True)
