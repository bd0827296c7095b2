"""Andrew et al.'s adaptive clipping (adaclip) and Du et al.'s dynamic schedule (dynamic).

Noise is switched off as in tests/test_dcsgd.py: the mechanism keeps its parameters (sigma_Delta needs sigma > 0
and 2 sigma_b > sigma) and the engine's noise source is replaced by one whose draws are all zero.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dpbook.accounting import sigma_delta
from dpbook.data import load_digits
from dpbook.methods import GaussianNoise, make_method
from dpbook.methods.adaclip import AdaClip, geometric_update, unclipped_fraction
from dpbook.methods.dynamic import DynamicClipping, dynamic_threshold
from dpbook.models import digits_cnn
from dpbook.optim import DPOptimizer
from dpbook.train import Trainer
from tests import reference
from tests.reference import ADVERSARIAL_NORMS, OPTIMIZERS, batch, clipped_step, tiny_cnn
from tests.test_dcsgd import drive

B = 8.0


# --- Andrew et al.: the estimator's fixed points (noise off, many steps) ---------------------------------------

def final_thresholds(p, norms, C_0=1.0, eta_C=0.2, steps=300, last=20):
    method = AdaClip(sigma=1.0, p=p, eta_C=eta_C, C_0=C_0, sigma_b=10.0)
    infos = drive(method, [norms] * steps, expected_batch_size=len(norms))  # B = |B_t|: b~ is the exact fraction
    return np.array([i["C"] for i in infos[-last:]])


@pytest.mark.parametrize("C_0", [1.5, 100.0])
def test_target_zero_shrinks_below_the_smallest_norm(C_0):
    norms = np.linspace(1, 3, 100)
    C = final_thresholds(0.0, norms, C_0)
    assert (C < 1.0).all() and (C >= math.exp(-0.2)).all()  # the last move shrank it by at most e^-eta_C
    assert np.ptp(C) == 0  # all clipped: b~ = 0 = p, no further move


@pytest.mark.parametrize("C_0", [0.01, 1.5])
def test_target_one_grows_above_the_largest_norm(C_0):
    norms = np.linspace(1, 3, 100)
    C = final_thresholds(1.0, norms, C_0)
    assert (C >= 3.0).all() and (C < 3.0 * math.exp(0.2)).all() and np.ptp(C) == 0


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_evenly_spread_norms_converge_to_the_quantile(p):
    norms = np.linspace(0.001, 1, 1000)
    C = final_thresholds(p, norms, C_0=5.0, steps=400)
    assert np.abs(C - p).max() < 0.01


def test_all_equal_norms_oscillate_around_that_value():
    C = final_thresholds(0.5, np.full(50, 2.0))
    assert (C >= 2 * math.exp(-0.1) * (1 - 1e-12)).all() and (C < 2 * math.exp(0.1)).all()
    assert (C >= 2).any() and (C < 2).any()  # above: all unclipped, x e^-0.1; below: all clipped, x e^0.1


def test_fraction_is_normalised_by_the_expected_batch_size():
    """4 examples, all unclipped, expected B = 8: b~ = (4 - 4/2)/8 + 1/2 = 0.75, not the realised 4/4 = 1."""
    method = AdaClip(sigma=1.0, p=0.5, C_0=10.0, sigma_b=1.0)
    info = drive(method, [np.ones(4)], expected_batch_size=B)[0]
    assert info["unclipped_fraction"] == 0.75 and method.nonprivate_diagnostics() == {"nonprivate/unclipped_count": 4.0}
    assert info["C_next"] == pytest.approx(10.0 * math.exp(-0.2 * (0.75 - 0.5)))
    assert unclipped_fraction(100.0, 8.0) == 1.0 and unclipped_fraction(-100.0, 8.0) == 0.0  # clamped to [0, 1]
    assert geometric_update(2.0, 0.5, 0.5, 0.3) == 2.0


def test_noisy_estimate_tracks_the_quantile():
    """With the default sigma_b = B/20 the noisy estimator still settles near the target quantile."""
    rng = np.random.default_rng(0)
    method = AdaClip(sigma=1.0, p=0.5)
    infos = drive(method, [rng.uniform(0, 1, 256) for _ in range(300)], noise=GaussianNoise(3),
                  expected_batch_size=256)
    assert abs(np.mean([i["C"] for i in infos[-100:]]) - 0.5) < 0.05


# --- adaclip through the engine ---------------------------------------------------------------------------------

def reference_adaclip(model, optimizer, batches, C, p, eta_C):
    params = [p_ for p_ in model.parameters() if p_.requires_grad]
    used = []
    for x, y in batches:
        norms = clipped_step(model, optimizer, x, y, C, B)
        used.append(C)
        b = sum(G <= C for G in norms) / B + 0.5 - len(norms) / (2 * B)
        C = C * math.exp(-eta_C * (min(1.0, max(0.0, b)) - p))
    return [q.detach() for q in params], used


def engine_steps(model, optimizer, method, batches, **kwargs):
    return reference.engine_steps(model, optimizer, method, batches, expected_batch_size=B, **kwargs)


@pytest.mark.parametrize("opt, sizes", [("sgd", (7, 5, 6)), ("momentum", (6, 0, 7)), ("adam", (7, 5, 6))])
def test_adaclip_noise_off_oracle(opt, sizes):
    batches = [batch(n, seed=k) for k, n in enumerate(sizes)]
    ref_model, dp_model = tiny_cnn(), tiny_cnn()
    expected, used = reference_adaclip(ref_model, OPTIMIZERS[opt](ref_model.parameters()), batches, 7.5, 0.3, 0.5)
    method = AdaClip(sigma=1.0, p=0.3, eta_C=0.5, C_0=7.5, sigma_b=1.0)
    got, infos, _ = engine_steps(dp_model, OPTIMIZERS[opt](dp_model.parameters()), method, batches)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=0)
    assert [i["C"] for i in infos] == pytest.approx(used, rel=1e-12)
    assert all(after["C"] == now["C_next"] for now, after in zip(infos, infos[1:]))
    assert len(set(used)) == 3


def test_adaclip_micro_batching_with_noise():
    batches = [batch(9, seed=1), batch(7, seed=2)]
    runs = []
    for mbs in (None, 1, 3):
        model = tiny_cnn()
        method = AdaClip(sigma=1.0, p=0.5, C_0=7.5, sigma_b=2.0)
        got, infos, _ = engine_steps(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), method,
                                     batches, micro_batch_size=mbs, noise_off=False, seed=5)
        runs.append((got, [i["C"] for i in infos]))
    for got, Cs in runs[1:]:
        assert Cs == runs[0][1]
        for a, b in zip(runs[0][0], got):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_adaclip_noise_is_sigma_delta_C_over_B():
    model = nn.Linear(200, 50)
    method = AdaClip(sigma=3.0, C_0=0.7, sigma_b=2.5)  # sigma_Delta = (1/9 - 1/25)^(-1/2) = 3.75
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=1.0), method, sample_rate=0.5,
                         expected_batch_size=B)
    before = model.weight.detach().clone()
    info = engine.step(torch.zeros(0, 200), torch.zeros(0, dtype=torch.long))
    std = (before - model.weight.detach()).std().item()
    assert std == pytest.approx(3.75 * 0.7 / B, rel=0.05)
    assert engine.ledger.history == [(3.0, 0.5, 1)] and info["noise_multiplier"] == 3.0


def test_adaclip_default_sigma_b_is_B_over_20():
    method = AdaClip(sigma=1.0)
    method.bind([torch.zeros(3)], expected_batch_size=256)
    assert method.sigma_b == 12.8 and method.sigma_delta == pytest.approx(sigma_delta(1.0, 12.8))


def make_trainer(checkpoint=None):
    torch.manual_seed(123)
    model = digits_cnn()
    x_train, y_train, x_test, y_test = load_digits()
    data = (x_train[:256], y_train[:256], x_test[:64], y_test[:64])  # 8 steps per epoch at B = 32
    return Trainer(model, make_method("adaclip", sigma=1.2, p=0.5, sigma_b=2.0),
                   torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9), data, expected_batch_size=32,
                   epochs=2, delta=1e-5, seed=0, checkpoint=checkpoint, checkpoint_every=3)


def test_adaclip_interrupted_and_resumed_run_equals_uninterrupted(tmp_path):
    full = make_trainer()
    full_log = full.run()
    ckpt = tmp_path / "run.pt"
    make_trainer(ckpt).run(max_steps=5)
    resumed = make_trainer(ckpt)
    resumed_log = resumed.run()
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    assert resumed_log.epochs == full_log.epochs and resumed_log.steps == full_log.steps
    assert len({row["C"] for row in full_log.steps}) > 3


@pytest.mark.parametrize("kwargs, match", [
    (dict(sigma=0.0), "sigma"), (dict(sigma=-1.0), "sigma"),
    (dict(sigma=1.0, p=-0.1), r"^p "), (dict(sigma=1.0, p=1.5), r"^p "), (dict(sigma=1.0, p=math.nan), r"^p "),
    (dict(sigma=1.0, eta_C=-0.1), "eta_C"), (dict(sigma=1.0, C_0=0.0), "C_0"), (dict(sigma=1.0, C_0=-1.0), "C_0"),
    (dict(sigma=1.0, sigma_b=0.0), "sigma_b"), (dict(sigma=3.0, sigma_b=1.5), "sigma_b"),
])
def test_adaclip_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdaClip(**kwargs)


def test_adaclip_default_sigma_b_too_small_fails_at_bind():
    method = AdaClip(sigma=2.0)  # sigma_b = B/20 = 0.8 at B = 16: 2 sigma_b = 1.6 < sigma
    with pytest.raises(ValueError, match="sigma_b"):
        method.bind([torch.zeros(3)], expected_batch_size=16)
    with pytest.raises(RuntimeError, match="bind"):
        AdaClip(sigma=1.0).releases()


# --- Du et al.'s schedule -----------------------------------------------------------------------------------------

def test_dynamic_schedule_decays_from_C_0_to_rho_C_C_0():
    m = DynamicClipping(sigma=1.0, C_0=2.0, rho_C=0.3, T=10)
    Cs = []
    for _ in range(11):
        Cs.append(m.C)
        m.advance()
    assert Cs[0] == 2.0 and Cs[10] == pytest.approx(0.6) and all(a > b for a, b in zip(Cs, Cs[1:]))
    assert Cs == pytest.approx([2.0 * 0.3 ** (t / 10) for t in range(11)])
    assert dynamic_threshold(5, C_0=1.0, rho_C=0.25, T=10) == 0.5


@pytest.mark.parametrize("opt", ["momentum", "adam"])
def test_dynamic_noise_off_oracle(opt):
    batches = [batch(n, seed=k) for k, n in enumerate((7, 0, 6))]
    ref_model, dp_model = tiny_cnn(), tiny_cnn()
    params = list(ref_model.parameters())
    ref_opt = OPTIMIZERS[opt](params)
    for t, (x, y) in enumerate(batches):
        clipped_step(ref_model, ref_opt, x, y, 9.0 * 0.5 ** (t / 3), B)
    got, infos, _ = engine_steps(dp_model, OPTIMIZERS[opt](dp_model.parameters()),
                                 DynamicClipping(sigma=1.0, C_0=9.0, rho_C=0.5, T=3), batches)
    for e, g in zip(params, got):
        torch.testing.assert_close(g, e.detach(), atol=1e-5, rtol=0)
    assert [i["C"] for i in infos] == pytest.approx([9.0 * 0.5 ** (t / 3) for t in range(3)])


def test_dynamic_noise_std_and_state():
    model = nn.Linear(200, 50)
    method = DynamicClipping(sigma=2.0, C_0=1.0, rho_C=0.25, T=2)
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=1.0), method, sample_rate=0.5,
                         expected_batch_size=B)
    engine.step(torch.zeros(0, 200), torch.zeros(0, dtype=torch.long))  # t = 0, C = 1
    before = model.weight.detach().clone()
    engine.step(torch.zeros(0, 200), torch.zeros(0, dtype=torch.long))  # t = 1, C = 0.5
    assert (before - model.weight.detach()).std().item() == pytest.approx(2.0 * 0.5 / B, rel=0.05)
    assert engine.ledger.history == [(2.0, 0.5, 2)]
    other = DynamicClipping(sigma=2.0, C_0=1.0, rho_C=0.25, T=2)
    other.load_state_dict(method.state_dict())
    assert other.t == 2 and other.C == method.C == 0.25


@pytest.mark.parametrize("kwargs, match", [
    (dict(sigma=-1.0), "sigma"), (dict(C_0=0.0), "C_0"), (dict(rho_C=0.0), "rho_C"), (dict(rho_C=-0.5), "rho_C"),
    (dict(T=0), "T "), (dict(T=2.5), "T "),
])
def test_dynamic_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DynamicClipping(**{**dict(sigma=1.0, C_0=1.0, rho_C=0.5, T=10), **kwargs})


@settings(max_examples=150, deadline=None)
@given(C=st.floats(1e-6, 1e6), t=st.integers(0, 100),  # t <= T keeps C_t >= 1e-7: C_t / 1e300 is not subnormal
       norms=st.lists(st.sampled_from(ADVERSARIAL_NORMS) | st.floats(0, 1e15), min_size=1))
def test_contribution_never_exceeds_C_t(C, t, norms):
    n = torch.tensor(norms, dtype=torch.float64)
    andrew = AdaClip(sigma=1.0, C_0=C, sigma_b=1.0)
    du = DynamicClipping(sigma=1.0, C_0=C, rho_C=0.1, T=100)
    du.load_state_dict({"t": t})  # C follows the schedule to step t
    for m in (andrew, du):
        w = m.weights(n)
        assert bool((w * n <= m.sensitivity() * (1 + 1e-12)).all())
        assert bool(((w >= 0) & (w <= 1)).all())
