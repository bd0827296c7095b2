"""DC-SGD-P and DC-SGD-E: the histogram (Alg. 2), the rules (Algs. 3, 4), the method against a per-example loop.

How the noise is switched off for the oracle and the fixed-point tests: sigma_T needs sigma > 0 and sigma_H > sigma
(Eq. 5), so the mechanism's parameters cannot express "no noise". We keep them (sigma = 1, sigma_H = 5, so
sigma_T = 1.0206 still enters E's variance term) and replace the engine's noise source by :class:`NoNoise`, a
``GaussianNoise`` whose draws are all zero. Every other line of the method runs unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dpbook.accounting import sigma_T as sigma_T_of
from dpbook.data import load_digits
from dpbook.histogram import bin_index, build_histogram, midpoints, noisy_histogram, noisy_total
from dpbook.methods import GaussianNoise, make_method
from dpbook.methods.dcsgd import (
    DCSGDE,
    DCSGDP,
    candidate_thresholds,
    expected_error_range,
    expected_error_threshold,
    expected_errors,
    expected_errors_from_norms,
    percentile_threshold,
)
from dpbook.models import digits_cnn
from dpbook.optim import DPOptimizer
from dpbook.synthetic import run_on_norms
from dpbook.train import Trainer
from tests import reference
from tests.reference import ADVERSARIAL_NORMS, OPTIMIZERS, NoNoise, batch, clipped_step, tiny_cnn

B = 8.0
def drive(method, norm_batches, *, noise=None, d: int = 1000, expected_batch_size: float | None = None):
    """Run a norms-only method through the protocol with the noise off (default) and B = the mean batch size."""
    B = expected_batch_size or max(1.0, float(np.mean([len(n) for n in norm_batches])))
    return run_on_norms(method, norm_batches, d=d, expected_batch_size=B, noise=NoNoise() if noise is None else noise)


# --- Algorithm 2: the histogram -------------------------------------------------------------------------------

def test_bin_index_edges_and_overflow():
    R, b = 4.0, 4  # bins [0,1) [1,2) [2,3) [3,inf)
    norms = torch.tensor([0.0, 0.999, 1.0, 2.5, 3.0, 3.999, 4.0, 1e12])
    assert bin_index(norms, R, b).tolist() == [0, 0, 1, 2, 3, 3, 3, 3]
    assert build_histogram(norms, R, b).tolist() == [2.0, 1.0, 1.0, 4.0]
    assert midpoints(R, b).tolist() == [0.5, 1.5, 2.5, 3.5]


@settings(max_examples=200, deadline=None)
@given(norms=st.lists(st.sampled_from(ADVERSARIAL_NORMS) | st.floats(0, 1e15), max_size=30),
       extra=st.sampled_from(ADVERSARIAL_NORMS) | st.floats(0, 1e15),
       R=st.floats(1e-6, 1e6), b=st.integers(2, 50))
def test_histogram_index_range_and_sensitivity_one(norms, extra, R, b):
    idx = bin_index(torch.tensor(norms + [extra], dtype=torch.float64), R, b)
    assert bool(((idx >= 0) & (idx <= b - 1)).all())
    for G, k in zip(norms + [extra], idx.tolist()):  # min(b-1, floor(b G / R)) [DCSGD-7]
        assert k == (b - 1 if G * (b / R) >= b - 1 else math.floor(G * (b / R)))
    H = build_histogram(torch.tensor(norms, dtype=torch.float64), R, b)
    H_plus = build_histogram(torch.tensor(norms + [extra], dtype=torch.float64), R, b)
    diff = H_plus - H  # adding (or, read backwards, removing) one example
    assert sorted(diff.tolist()) == [0.0] * (b - 1) + [1.0]
    assert float(diff.norm()) == 1.0


def test_histogram_noise_has_std_sigma_H_and_is_not_scaled():
    H = torch.zeros(20000, dtype=torch.float64)
    noisy = noisy_histogram(H, 5.0, GaussianNoise(0))
    assert float(noisy.std()) == pytest.approx(5.0, rel=0.03)
    assert noisy_total([-3.0, 1.0]) == 1.0 and noisy_total([2.0, 3.5]) == 5.5  # S' = max(S', 1) [DCSGD-18]


# --- Algorithm 3: the percentile rule --------------------------------------------------------------------------

def test_percentile_midpoint_rule():
    H = [1, 1, 1, 1]
    assert percentile_threshold(H, 4.0, 0.25) == 0.5  # S reaches 0.25 * 4 = 1 in bin 0 (the test is >=)
    assert percentile_threshold(H, 4.0, 0.26) == 1.5
    assert percentile_threshold(H, 4.0, 0.99) == 3.5
    assert percentile_threshold([0, 0, 0, 0], 4.0, 0.5) == 3.5  # S' <= 0: guarded to 1, never reached: last bin
    assert percentile_threshold([-3, 1, 1, 0], 4.0, 0.5) == 3.5  # raw total -1, same
    assert percentile_threshold([5, -2, 1, 0], 4.0, 0.9) == 0.5  # negative counts are used raw


def test_percentile_is_within_half_a_bin_of_the_true_quantile():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, b, R = int(rng.integers(1, 300)), int(rng.integers(2, 60)), float(rng.uniform(0.5, 5))
        norms = rng.uniform(0, R, n) * rng.uniform(0.2, 1)
        p = float(rng.uniform(0.01, 0.99))
        true = np.sort(norms)[math.ceil(p * n) - 1]  # the order statistic the running count first reaches
        C = percentile_threshold(build_histogram(torch.tensor(norms), R, b), R, p)
        assert abs(C - true) <= R / (2 * b) + 1e-12


def test_p_range_rule_and_per_step_factors():
    m = DCSGDP(sigma=1.0, p=0.5, C_0=2.0, R_0=4.0)
    for k in range(20):  # all examples in bin k: C_{t+1} = (2k+1)/b * C_t once R_t = 2 C_t
        H = np.zeros(20)
        H[k] = 100
        C_next, R_next, _ = m.adapt(H)
        assert C_next == pytest.approx((2 * k + 1) / 20 * 2.0) and R_next == 2 * C_next  # Alg. 3 l.7
    assert DCSGDP(sigma=1.0, p=0.5).R == 1.0 and DCSGDE(sigma=1.0).R == 20.0 and DCSGDE(sigma=1.0, b=8).R == 8.0


# --- Algorithm 4: the expected-error rule ----------------------------------------------------------------------

def test_candidate_grid():
    S = candidate_thresholds(3.0)
    assert len(S) == 20 and S[0] == pytest.approx(0.3) and S[-1] == pytest.approx(6.0)
    np.testing.assert_allclose(np.diff(S), 0.3)


def test_histogram_error_equals_eq4_when_norms_sit_on_midpoints():
    R, b, rng = 10.0, 20, np.random.default_rng(1)
    norms = midpoints(R, b)[rng.integers(0, b, 300)]
    H = build_histogram(torch.tensor(norms), R, b).numpy()
    C = np.linspace(0.1, 12, 50)
    kw = dict(sigma_T=1.3, B=256, d=5000)
    np.testing.assert_allclose(expected_errors(H, R, C, **kw), expected_errors_from_norms(norms, C, **kw), rtol=1e-12)


def test_expected_error_is_convex_with_non_negative_counts():
    rng = np.random.default_rng(2)
    C = np.linspace(0.01, 30, 400)
    for _ in range(100):
        H = rng.poisson(rng.uniform(0, 20), int(rng.integers(2, 40))).astype(float)
        E = expected_errors(H, 20.0, C, sigma_T=float(rng.uniform(0.5, 3)), B=256, d=int(rng.integers(1, 10**6)))
        assert (np.diff(E, 2) >= -1e-9 * np.abs(E).max()).all()


def test_e_search_finds_the_minimum_with_non_negative_counts():
    rng = np.random.default_rng(3)
    fine = np.linspace(1e-3, 40, 4001)
    for _ in range(60):
        H = rng.poisson(rng.uniform(0, 20), 20).astype(float)
        if H.sum() == 0:
            continue
        kw = dict(sigma_T=float(rng.uniform(0.5, 3)), B=256.0, d=int(rng.integers(10, 10**6)))
        C0 = float(10 ** rng.uniform(-3, 3))
        found = expected_error_threshold(H, C0, 20.0, **kw)
        assert not found.capped and found.repeats < 20
        best = fine[np.argmin(expected_errors(H, 20.0, fine, **kw))]
        spacing = found.centre / 10  # convex: the minimiser lies between the grid argmin's two neighbours
        assert abs(found.C - best) <= spacing + 1e-2


def test_e_search_terminates_with_negative_counts():
    rng = np.random.default_rng(4)
    for _ in range(300):
        H = rng.normal(0, 5, 20) + rng.poisson(2, 20) * (rng.random() < 0.5)
        found = expected_error_threshold(H, float(10 ** rng.uniform(-2, 2)), 20.0, sigma_T=1.0, B=16, d=100,
                                         max_repeats=20, min_threshold=1e-8)
        assert found.repeats <= 20 and 1e-8 <= found.C < math.inf
    only_negative = -np.ones(20)  # E decreases as C shrinks: the paper's loop would never end [DCSGD-17]
    found = expected_error_threshold(only_negative, 1.0, 20.0, sigma_T=1.0, B=16, d=100, max_repeats=5)
    assert found.capped and found.repeats == 5 and found.C == pytest.approx(1e-6)
    floored = expected_error_threshold(only_negative, 1.0, 20.0, sigma_T=1.0, B=16, d=100, min_threshold=1e-3)
    assert floored.capped and floored.C == 1e-3


@pytest.mark.parametrize("method, hyperparameters", [("dcsgd-p", {"p": 0.5}), ("dcsgd-e", {})])
def test_both_rules_floor_the_next_threshold_and_range_once(method, hyperparameters):
    """At a range near the floor, with every noisy count in the first bin, P's quantile midpoint (R/2b) and E's
    halved range fall below min_threshold: each rule's adapt floors C_{t+1} and R_{t+1} itself [DCSGD-17]."""
    m = make_method(method, sigma=1.0, min_threshold=1e-3, **hyperparameters)
    m.bind([torch.zeros(100)], expected_batch_size=16)
    m.C, m.R = 1e-3, 1.5e-3
    H = np.zeros(m.b)
    H[0] = 16.0
    C_next, R_next, _ = m.adapt(H)
    assert C_next >= 1e-3 and R_next >= 1e-3
    assert (C_next, R_next) == ((1e-3, 2e-3) if method == "dcsgd-p" else (1e-3, 1e-3))


def test_e_keeps_its_threshold_when_the_noisy_histogram_is_degenerate():
    """Counts dominated by noise make Algorithm 4 shrink C towards the floor (1e-8 observed), which would zero every
    gradient for the rest of training: DC-SGD-E keeps C_t instead, and reports the capped search."""
    m = DCSGDE(sigma=1.0)
    m.bind([torch.zeros(1000)], expected_batch_size=4)
    m.C = 0.7
    C_next, _, info = m.adapt(-np.ones(20))
    assert C_next == 0.7 and info["E_capped"] == 1.0
    H = np.zeros(20)
    H[8] = 256
    C_next, _, info = m.adapt(H)                         # a clear histogram still moves C
    assert C_next != 0.7 and info["E_capped"] == 0.0


def test_e_never_collapses_in_training_with_small_batches_and_loud_histograms():
    """B = 4 and sigma_H = 50: the noisy histograms are mostly noise; C_t stays at sane values over 60 steps."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 3)
    method = DCSGDE(sigma=2.0, sigma_H=50.0)
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), method, sample_rate=0.1,
                         expected_batch_size=4, noise_seed=3)
    used = [engine.step(torch.randn(4, 8), torch.randint(0, 3, (4,)))["C"] for _ in range(60)]
    assert min(used) >= 1e-3, min(used)


def test_e_range_rules():
    assert expected_error_range([0, 0, 1, 5], 4.0) == 8.0  # overflow bin holds >= S'/2: double
    assert expected_error_range([5, 1, 0, 0], 4.0) == 2.0  # right half <= S'/b: halve
    assert expected_error_range([2, 2, 2, 1], 4.0) == 4.0  # else keep
    assert expected_error_range([3, 2, 0.1, 0.1, 0.1], 5.0) == 2.5  # odd b: right half from floor(b/2) = 2
    assert expected_error_range([0, 0, 0, 0], 4.0) == 2.0  # S' guarded to 1: 0 >= 1/2 is false, 0 <= 1/4: halve
    assert expected_error_range(-np.ones(4), 4.0) == 2.0  # negative counts are used raw: halve


# --- the methods through the engine ----------------------------------------------------------------------------

def ref_histogram(norms, R, b):
    H = [0.0] * b
    for G in norms:
        H[min(b - 1, math.floor(b * G / R))] += 1
    return H


def ref_rule_p(H, C, R, p, d):
    S_prime, S = max(sum(H), 1.0), 0.0
    for i in range(len(H)):
        S += H[i]
        C_next = (i + 0.5) * R / len(H)
        if S >= p * S_prime:
            break
    return C_next, 2 * C_next


def ref_rule_e(H, C, R, sigma_T, d, max_repeats=20, floor=1e-8):
    b, C_t, interior = len(H), C, False
    S_prime = max(sum(H), 1.0)
    m = [(k + 0.5) * R / b for k in range(b)]

    def E(c):
        return sigma_T ** 2 * c ** 2 * d / B ** 2 + sum(h * max(mk - c, 0) ** 2 for h, mk in zip(H, m)) / S_prime

    for repeat in range(max_repeats + 1):
        cands = [i * C / 10 for i in range(1, 21)]
        errors = [E(c) for c in cands]
        k = errors.index(min(errors))
        C_new = max(cands[k], floor)
        interior = 0 < k < 19
        if interior or C_new == C:
            break
        C = C_new
    if not interior:  # a degenerate histogram: keep the previous threshold
        C_new = C_t
    if H[-1] >= 0.5 * S_prime:
        R = 2 * R
    elif sum(H[b // 2:]) <= S_prime / b:
        R = R / 2
    return C_new, R


def reference_dcsgd(model, optimizer, batches, rule, C, R, b):
    """One example at a time: clip at C_t, sum, / B, step; histogram of the unclipped norms; C_{t+1} from it."""
    params = [p for p in model.parameters() if p.requires_grad]
    used = []
    for x, y in batches:
        norms = clipped_step(model, optimizer, x, y, C, B)
        used.append(C)
        C, R = rule(ref_histogram(norms, R, b), C, R)  # used from the next step on
    return [p.detach() for p in params], used


def dcsgd_steps(model, optimizer, method, batches, **kwargs):
    return reference.engine_steps(model, optimizer, method, batches, expected_batch_size=B, **kwargs)


def make(kind: str):
    if kind == "dcsgd-p":  # R_0 = 16 spreads the tiny problem's norms (about 6-10) over the bins
        return DCSGDP(sigma=1.0, p=0.6, C_0=7.5, R_0=16.0, b=10)
    return DCSGDE(sigma=1.0, b=10)


@pytest.mark.parametrize("kind, opt, sizes", [
    ("dcsgd-p", "sgd", (7, 5, 6)), ("dcsgd-p", "momentum", (7, 5, 6)), ("dcsgd-p", "adam", (6, 0, 7)),
    ("dcsgd-e", "sgd", (6, 0, 7)), ("dcsgd-e", "momentum", (7, 5, 6)), ("dcsgd-e", "adam", (7, 5, 6)),
])
def test_noise_off_oracle_equals_per_example_loop(kind, opt, sizes):
    batches = [batch(n, seed=k) for k, n in enumerate(sizes)]
    method = make(kind)
    d = sum(p.numel() for p in tiny_cnn().parameters())
    if kind == "dcsgd-p":
        def rule(H, C, R):
            return ref_rule_p(H, C, R, 0.6, d)
    else:
        def rule(H, C, R):
            return ref_rule_e(H, C, R, sigma_T_of(1.0, 5.0), d)
    ref_model, dp_model = tiny_cnn(), tiny_cnn()
    expected, used = reference_dcsgd(ref_model, OPTIMIZERS[opt](ref_model.parameters()), batches, rule,
                                     method.C, method.R, method.b)
    got, infos, _ = dcsgd_steps(dp_model, OPTIMIZERS[opt](dp_model.parameters()), method, batches)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=0)
    assert [info["C"] for info in infos] == pytest.approx(used, rel=1e-9)
    for now, after in zip(infos, infos[1:]):  # the threshold computed at step t is the one used at step t + 1
        assert after["C"] == now["C_next"] and after["R"] == now["R_next"]
    assert len(set(used)) >= 2, "the oracle should see the threshold move"


@pytest.mark.parametrize("kind", ["dcsgd-p", "dcsgd-e"])
def test_micro_batching_does_not_change_the_noisy_steps(kind):
    batches = [batch(9, seed=1), batch(7, seed=2)]
    runs = []
    for mbs in (None, 1, 3):
        model = tiny_cnn()
        got, infos, _ = dcsgd_steps(model, torch.optim.Adam(model.parameters(), lr=0.01), make(kind), batches,
                                    micro_batch_size=mbs, noise_off=False, seed=7)
        runs.append((got, [(i["C"], i["R"], i["histogram_total"]) for i in infos]))
    for got, trajectory in runs[1:]:
        assert trajectory == runs[0][1]  # integer counts and the same noise draws: identical thresholds
        for a, b in zip(runs[0][0], got):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("cls", [DCSGDP, DCSGDE])
def test_gradient_noise_is_sigma_T_C_over_B_and_accountant_sees_sigma(cls):
    """With an empty batch and lr = 1 the update is exactly the noise / B: its std is sigma_T * C_t / B."""
    model = nn.Linear(200, 50)
    kwargs = dict(p=0.5) if cls is DCSGDP else {}
    method = cls(sigma=3.0, sigma_H=5.0, C_0=0.7, b=4000, **kwargs)  # sigma_T = (1/9 - 1/25)^(-1/2) = 3.75
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=1.0), method, sample_rate=0.5,
                         expected_batch_size=B)
    before = model.weight.detach().clone()
    info = engine.step(torch.zeros(0, 200), torch.zeros(0, dtype=torch.long))
    std = (before - model.weight.detach()).std().item()
    assert std == pytest.approx(3.75 * 0.7 / B, rel=0.05)  # sigma * C / B would be 20 % smaller
    assert engine.ledger.history == [(3.0, 0.5, 1)] and info["noise_multiplier"] == 3.0
    H = method.last_release["H"]  # the empty batch's histogram is pure noise of std sigma_H, not scaled by C
    assert float(H.std()) == pytest.approx(5.0, rel=0.05)
    assert info["C"] == 0.7 and method.C == info["C_next"]
    # P always moves; E keeps C_t exactly when the pure-noise histogram sends its search to the floor
    assert (method.C != 0.7) == (cls is DCSGDP or not info["E_capped"])


def test_threshold_is_applied_from_the_next_step_only():
    method = DCSGDP(sigma=1.0, p=0.5, C_0=1.0, R_0=1.0)
    infos = drive(method, [np.full(50, 10.0)] * 3)  # everything overflows: C grows x1.95 per step
    assert [i["C"] for i in infos] == pytest.approx([1.0, 0.975, 0.975 * 1.95])
    assert [i["C_next"] for i in infos] == pytest.approx([0.975, 0.975 * 1.95, 0.975 * 1.95 ** 2])


# --- fixed points (noise off, many steps) -----------------------------------------------------------------------

@pytest.mark.parametrize("p, norms, target, tol", [
    (1e-6, np.linspace(1, 3, 201), 1.0, 0.06),  # target quantile ~0: C goes down to the smallest norm
    (1 - 1e-6, np.linspace(1, 3, 201), 3.0, 0.16),  # target ~1: C grows to the largest norm
    (0.5, np.linspace(1, 3, 201), 2.0, 0.11),  # evenly spread: the median
    (0.25, np.linspace(1, 3, 201), 1.5, 0.09),
    (0.5, np.full(64, 5.0), 5.0, 0.3),  # all equal: that value
    (0.9, np.full(64, 5.0), 5.0, 0.3),
], ids=["p0", "p1", "median", "quartile", "equal-median", "equal-p0.9"])
@pytest.mark.parametrize("C_0", [0.01, 1000.0])
def test_p_fixed_points(p, norms, target, tol, C_0):
    """C_{t+1} is the midpoint of the bin holding the p-quantile of [0, 2 C_t): error <= C_t / b = 5 %."""
    infos = drive(DCSGDP(sigma=1.0, p=p, C_0=C_0, R_0=2 * C_0), [norms] * 60)
    last = np.array([i["C"] for i in infos[-10:]])
    assert np.abs(last - target).max() <= tol


def test_e_fixed_point_all_equal_norms():
    """One norm value G: E(C) = a C^2 + (G - C)^2 for C < G is least at G / (1 + a), a = sigma_T^2 d / B^2."""
    G, d, Bn = 4.0, 30000, 256
    a = sigma_T_of(1.0, 5.0) ** 2 * d / Bn ** 2
    infos = drive(DCSGDE(sigma=1.0), [np.full(Bn, G)] * 40, d=d, expected_batch_size=Bn)
    last = np.array([i["C"] for i in infos[-10:]])
    assert np.abs(last / (G / (1 + a)) - 1).max() < 0.12  # midpoints and a grid of 0.1 C: about 10 %
    assert all(i["E_capped"] == 0 for i in infos)


# --- checkpoint / resume, bad input, the sensitivity property ---------------------------------------------------

def make_trainer(kind, opt, checkpoint=None):
    torch.manual_seed(123)
    model = digits_cnn()
    method = make_method(kind, sigma=1.2, **({"p": 0.7} if kind == "dcsgd-p" else {}))
    x_train, y_train, x_test, y_test = load_digits()
    data = (x_train[:256], y_train[:256], x_test[:64], y_test[:64])  # 8 steps per epoch at B = 32
    return Trainer(model, method, OPTIMIZERS[opt](model.parameters()), data, expected_batch_size=32,
                   epochs=2, delta=1e-5, seed=0, checkpoint=checkpoint, checkpoint_every=3)


@pytest.mark.parametrize("kind, opt", [("dcsgd-e", "adam")])
def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path, kind, opt):
    full = make_trainer(kind, opt)
    full_log = full.run()
    ckpt = tmp_path / "run.pt"
    make_trainer(kind, opt, checkpoint=ckpt).run(max_steps=5)
    resumed = make_trainer(kind, opt, checkpoint=ckpt)
    resumed_log = resumed.run()
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    assert resumed_log.epochs == full_log.epochs and resumed_log.steps == full_log.steps
    assert resumed.engine.method.state_dict()["C"] == full.engine.method.state_dict()["C"]
    assert len({row["C"] for row in full_log.steps}) > 3  # the threshold did move


@pytest.mark.parametrize("cls", [DCSGDP, DCSGDE])
@pytest.mark.parametrize("kwargs, match", [
    (dict(sigma=5.0, sigma_H=5.0), r"sigma_H.*sigma"), (dict(sigma=6.0), r"sigma_H.*sigma"),
    (dict(sigma=1.0, sigma_H=-1.0), "sigma_H"), (dict(sigma=0.0), "sigma"), (dict(sigma=-1.0), "sigma"),
    (dict(sigma=1.0, b=1), "b "), (dict(sigma=1.0, b=0), "b "), (dict(sigma=1.0, b=2.5), "b "),
    (dict(sigma=1.0, C_0=0.0), "C_0"), (dict(sigma=1.0, C_0=-1.0), "C_0"), (dict(sigma=1.0, C_0=math.nan), "C_0"),
    (dict(sigma=1.0, R_0=0.0), "R_0"), (dict(sigma=1.0, R_0=-2.0), "R_0"), (dict(sigma=1.0, R_0=math.inf), "R_0"),
])
def test_bad_hyperparameters_are_named(cls, kwargs, match):
    extra = {"p": 0.5} if cls is DCSGDP else {}
    with pytest.raises(ValueError, match=match):
        cls(**kwargs, **extra)


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5, math.nan])
def test_p_outside_the_open_unit_interval_is_rejected(p):
    with pytest.raises(ValueError, match=r"^p \(fraction of examples left unclipped\) must be"):
        DCSGDP(sigma=1.0, p=p)


def test_sigma_H_message_names_both_values():
    with pytest.raises(ValueError, match=r"sigma_H must exceed sigma.*sigma_H=2\.0, sigma=3\.0"):
        DCSGDE(sigma=3.0, sigma_H=2.0)


@settings(max_examples=150, deadline=None)
@given(C=st.floats(1e-6, 1e6), kind=st.sampled_from(["dcsgd-p", "dcsgd-e"]),
       norms=st.lists(st.sampled_from(ADVERSARIAL_NORMS) | st.floats(0, 1e15), min_size=1))
def test_contribution_never_exceeds_C_t(C, kind, norms):
    m = make(kind)
    m.C = C  # any threshold the rules may produce
    n = torch.tensor(norms, dtype=torch.float64)
    w = m.weights(n)
    assert bool((w * n <= m.sensitivity() * (1 + 1e-12)).all()) and m.sensitivity() == C
    assert bool(((w >= 0) & (w <= 1)).all())
