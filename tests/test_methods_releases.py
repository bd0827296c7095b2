"""Every registered method declares its releases once a step, adds exactly the noise it declares, and is charged the
multiplier derived from them (``Method.releases``, ``Method.noise_multiplier``). One test over the registry
replaces the per-method checks that std = multiplier x sensitivity."""

import math

import pytest
import torch
from torch import nn

from dpbook.accounting import sigma_eff
from dpbook.audit.broken import DataDependentNoise, HalfNoise
from dpbook.methods import METHODS, Method
from dpbook.methods.base import Release, gradient_sensitivity
from dpbook.noise import GaussianNoise
from dpbook.optim import DPOptimizer

N = 6  # examples per step
STEPS = 5
#: Hyperparameters that make every kind of step occur within STEPS steps (DPDR's GDR steps 2..3, DIFF2's
#: restarts at their own multiplier, DC-SGD and AdaClip at a sigma whose split does not round trip exactly).
VARIED = {
    "dpdr": dict(C_perp=0.7, C_alpha=0.3, sigma_perp=1.5, sigma_alpha=4.0, C_g=1.0, sigma_g=1.2, s=3),
    "diff2": dict(C_d=0.1, sigma=1.0, C_g=1.0, restart_every=2, sigma_restart=0.8),
    "dcsgd-p": dict(sigma=1.1, p=0.5, sigma_H=8.0),
    "dcsgd-e": dict(sigma=0.8, sigma_H=10.0),
    "adaclip": dict(sigma=1.1, sigma_b=2.0),
}


def hyperparameters(name: str) -> dict:
    return VARIED.get(name, METHODS[name].declaration.example)


class RecordingNoise(GaussianNoise):
    """The engine's noise, recording the std of every draw and the release of every statistic released."""

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        self.stds: list[float] = []
        self.released: list[Release] = []

    def like(self, t: torch.Tensor, std: float) -> torch.Tensor:
        self.stds.append(std)
        return super().like(t, std)

    def add_(self, release: Release, statistic: torch.Tensor) -> torch.Tensor:
        self.released.append(release)
        return super().add_(release, statistic)


def drawn(values: list) -> list:
    """The distinct stds (or releases) in the order they were first drawn (a release draws once per parameter
    tensor)."""
    return list(dict.fromkeys(values))


def run_steps(method: Method) -> list[tuple[tuple[Release, ...], float, list[float], list[Release]]]:
    """(releases declared before the step, multiplier the ledger recorded, stds drawn, releases drawn through
    ``noise.add_``: empty when some noise was drawn outside it) for STEPS engine steps."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    q = 1.0 if method.full_batch else 0.5
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), method, sample_rate=q,
                         expected_batch_size=q * N)
    engine.noise = RecordingNoise()
    x, y = torch.randn(N, 3), torch.randint(0, 2, (N,))
    out = []
    for _ in range(STEPS):
        declared = method.releases()
        engine.noise.stds.clear()
        engine.noise.released.clear()
        engine.step(x, y, index=torch.arange(N))
        out.append((declared, engine.ledger.history[-1][0], drawn(engine.noise.stds),
                    [] if len(engine.noise.stds) != len(engine.noise.released) else drawn(engine.noise.released)))
    return out


@pytest.mark.parametrize("name", sorted(METHODS))
def test_no_method_declares_a_multiplier_apart_from_its_releases(name):
    for cls in METHODS[name].__mro__:
        if cls is not Method and issubclass(cls, Method):
            assert "noise_multiplier" not in vars(cls), f"{cls.__name__} overrides the derived multiplier"
            assert "noise_std" not in vars(cls), f"{cls.__name__} declares a noise std outside its releases"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_step_adds_the_declared_noise_and_is_charged_their_composition(name):
    method = METHODS[name](**hyperparameters(name))
    for declared, charged, stds, released in run_steps(method):
        assert stds == [r.noise_std for r in declared]  # each release's noise, in the declared order
        assert released == list(declared)  # every draw through the one call that names its release (the audit's)
        assert charged == sigma_eff(*(r.noise_multiplier for r in declared))
        assert declared[0].in_gradient and gradient_sensitivity(declared) > 0
        if len(declared) == 1:
            assert charged == declared[0].noise_multiplier  # to the bit


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_step_declares_its_releases_once(name):
    """The engine's step asks the method for its releases once, when its accumulators start: the multiplier the
    accountant records and every noise drawn read that one declaration."""
    method = METHODS[name](**hyperparameters(name))
    calls, declare = [], method.releases
    method.releases = lambda: calls.append(method.t) or declare()  # the instance's, for this test
    steps = run_steps(method)  # which asks for them once itself before each step
    assert calls == [t for t in range(STEPS) for _ in range(2)]
    assert all(stds == [r.noise_std for r in declared] for declared, _, stds, _ in steps)


@pytest.mark.parametrize("name", ["dcsgd-p", "dcsgd-e", "adaclip"])
def test_a_split_release_costs_the_total_sigma(name):
    """DC-SGD's Theorem 2 and Andrew et al.'s split: gradient + histogram (count) cost DP-SGD at sigma."""
    method = METHODS[name](**hyperparameters(name))
    for declared, charged, _, _ in run_steps(method):
        assert len(declared) == 2 and not declared[1].in_gradient
        assert charged == pytest.approx(method.sigma, rel=1e-14)


def test_dpdr_and_diff2_steps_declare_what_they_release():
    dpdr = run_steps(METHODS["dpdr"](**VARIED["dpdr"]))
    assert [[r.name for r in d] for d, *_ in dpdr] == [["gradient"], ["orthogonal", "alpha"],
                                                         ["orthogonal", "alpha"], ["gradient"], ["gradient"]]
    assert dpdr[1][0][0].noise_std == 1.5 * 0.7 and gradient_sensitivity(dpdr[1][0]) == math.hypot(0.7, 0.3)
    diff2 = run_steps(METHODS["diff2"](**VARIED["diff2"]))
    assert [c for _, c, *_ in diff2] == [0.8, 1.0, 0.8, 1.0, 0.8]
    assert [d[0].name for d, *_ in diff2] == ["gradient", "difference"] * 2 + ["gradient"]


@pytest.mark.parametrize("broken", [HalfNoise, DataDependentNoise])
def test_the_check_catches_noise_that_differs_from_the_declaration(broken):
    declared, _, stds, released = run_steps(broken(C=100.0, sigma=1.0))[0]  # no gradient here has norm 100
    assert stds != [r.noise_std for r in declared] and released != list(declared)


@pytest.mark.parametrize("bad", [dict(sensitivity=0.0, noise_multiplier=1.0),
                                 dict(sensitivity=1.0, noise_multiplier=-1.0),
                                 dict(sensitivity=math.nan, noise_multiplier=1.0)])
def test_a_release_refuses_a_bad_declaration(bad):
    with pytest.raises(ValueError, match="release 'gradient'"):
        Release("gradient", **bad)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_planned_history_is_what_the_ledger_records(name):
    """What a result file's epsilon is recomputed from (``Method.planned_history``, from the configuration alone)
    is the history the engine's ledger records over the same steps, segment for segment, whatever step the method
    is at when asked."""
    method = METHODS[name](**hyperparameters(name))
    q = 1.0 if method.full_batch else 0.5
    planned = method.planned_history(q, STEPS)
    model = nn.Linear(3, 2)
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), method, sample_rate=q,
                         expected_batch_size=q * N)
    x, y = torch.randn(N, 3), torch.randint(0, 2, (N,))
    for _ in range(STEPS):
        engine.step(x, y, index=torch.arange(N))
    assert planned == engine.ledger.history
    assert method.t == STEPS and method.planned_history(q, STEPS) == planned
