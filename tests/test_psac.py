"""Auto-S, DP-PSAC, DP-PSASC and DP-PSASC with momentum: closed-form facts of the weights, sensitivity on
adversarial norms, the reparametrisation identity, the noise-off oracle against per-example loops (momentum
included, with gradients literally recomputed at stored iterates), noise, checkpoint/resume and bad input."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dpbook import weights
from dpbook.data import synthetic_classification
from dpbook.methods import METHODS, make_method
from dpbook.methods.autos import AutoS
from dpbook.methods.psac import PSAC, PSASC, PSASCMomentum
from dpbook.optim import DPOptimizer
from dpbook.per_sample import PerSampleGradients, flat_norms
from dpbook.train import Trainer
from tests.reference import ADVERSARIAL_NORMS, apply_update, batch, flat_norm, per_example_gradients, tiny_cnn

B = 8.0  # expected batch size of the oracle tests
LOSS_SCALE = 1e-3  # puts the tiny model's per-sample norms (0.005 to 0.01) on both sides of the PSASC peak


def loss_fn(out, y):
    return LOSS_SCALE * nn.functional.cross_entropy(out, y)


HP = {  # r = 5e-5, s = 0.8: the PSASC peak sits at sqrt(r/s) - r = 0.0078, inside the norms of the first batch
    "autos": dict(gamma=0.01),
    "psac": dict(C=0.3, r=5e-5),
    "psasc": dict(C=0.3, r=5e-5, s=0.8),
    "psasc-momentum": dict(C=0.3, r=5e-5, s=0.8, K0=2, gamma0=0.7, gamma1=0.3),
}
OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=5.0),  # the loss is scaled by 1e-3
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}


def trainable(model: nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


# --- independent references: the paper's formulas in plain python, one example at a time ----------------------

def reference_weight(name: str, norm: float, hp: dict) -> float:
    if name == "autos":
        return 1.0 / (norm + hp["gamma"])  # Eq. (2)
    s = hp.get("s", 1.0)
    return hp["C"] / (s * norm + hp["r"] / (norm + hp["r"]))  # Eqs. (4) and (6)


def reference_steps(name, model, optimizer, batches, hp):
    """Per-example loop: backward, weight, sum, divide by the expected B, optimizer step."""
    for x, y in batches:
        total = [torch.zeros_like(p) for p in trainable(model)]
        for g in per_example_gradients(model, x, y, loss_fn=loss_fn):
            w = reference_weight(name, flat_norm(g), hp)
            total = [t + w * gi for t, gi in zip(total, g)]
        apply_update(model, optimizer, total, B)
    return [p.detach() for p in trainable(model)]


def model_at(model: nn.Module, values: list[torch.Tensor]) -> nn.Module:
    """A copy of ``model`` holding the parameter values ``values``."""
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p, v in zip(trainable(other), values):
            p.copy_(v)
    return other


def reference_momentum_steps(model, optimizer, batches, hp):
    """Algorithm 3 (clarified reading) literally: keep every iterate, recompute each example's gradient at each."""
    K0, gamma0, gamma1 = hp["K0"], hp["gamma0"], hp["gamma1"]
    iterates = []
    M = [torch.zeros_like(p) for p in trainable(model)]
    for k, (x, y) in enumerate(batches):
        iterates.append([p.detach().clone() for p in trainable(model)])  # w_k
        at = {ell: model_at(model, iterates[ell]) for ell in range(max(0, k - K0), k + 1)}
        G = [torch.zeros_like(p) for p in M]
        for i in range(len(x)):
            m = [torch.zeros_like(p) for p in M]
            for ell, past_model in at.items():
                g = per_example_gradients(past_model, x[i:i + 1], y[i:i + 1], loss_fn=loss_fn)[0]
                m = [mi + gamma0 ** (k - ell) * gi for mi, gi in zip(m, g)]
            w = reference_weight("psasc", flat_norm(m), hp)
            G = [Gj + w * mj for Gj, mj in zip(G, m)]
        M = [(1 - gamma1) * Mj + Gj for Mj, Gj in zip(M, G)]
        apply_update(model, optimizer, M, B)
    return [p.detach() for p in trainable(model)]


def private_steps(method, model, optimizer, batches, micro_batch_size=None, seed=0, per_sample="auto"):
    engine = DPOptimizer(model, optimizer, method, sample_rate=0.1, expected_batch_size=B, loss_fn=loss_fn,
                         micro_batch_size=micro_batch_size, noise_seed=seed, per_sample=per_sample)
    history = []
    for x, y in batches:
        engine.step(x, y)
        history.append([p.detach().clone() for p in trainable(model)])
    return history, engine


# --- closed-form facts of the weight functions ----------------------------------------------------------------

TABLE_II = [(0.3, 1e-4), (0.25, 1e-3), (0.1, 1e-4), (0.2, 1e-4), (0.2, 1e-2)]  # (C, r) of the five rows
S_GRID = [1.0, 0.9, 0.8, 0.55, 0.45]
X = torch.logspace(-9, 9, 20_001, dtype=torch.float64)  # a dense grid of norms (ratio 1.002 between neighbours)


@pytest.mark.parametrize("C, r", TABLE_II)
@pytest.mark.parametrize("s", S_GRID)
def test_peak_limit_and_supremum_of_psasc(C, r, s):
    w = weights.psasc_weight(X, C=C, r=r, s=s)
    peak = weights.psasc_peak(C=C, r=r, s=s)
    assert s * r < 1
    assert peak.norm == pytest.approx(math.sqrt(r / s) - r, rel=1e-15)
    assert peak.weight == pytest.approx(C / (2 * math.sqrt(s * r) - s * r), rel=1e-15)
    assert peak.weight == pytest.approx(C / (1 - (1 - math.sqrt(s * r)) ** 2), rel=1e-12)  # the paper's form
    assert float(weights.psasc_weight(torch.tensor(peak.norm, dtype=torch.float64), C=C, r=r, s=s)) == \
        pytest.approx(peak.weight, rel=1e-14)
    assert float(w.max()) <= peak.weight * (1 + 1e-14)  # nothing on the grid beats the closed form
    assert float(X[w.argmax()]) == pytest.approx(peak.norm, rel=3e-3)  # grid spacing is 2e-3 relative
    assert weights.psasc_weight(0.0, C=C, r=r, s=s) == C  # the limit C as ||g|| -> 0 (the value at 0)
    assert float(weights.psasc_weight(torch.tensor(1e-12, dtype=torch.float64), C=C, r=r, s=s)) == \
        pytest.approx(C, rel=1e-7)
    phi = X * w
    sens = weights.psasc_sensitivity(C=C, s=s)
    assert sens == C / s
    # The supremum is approached, never attained (in floating point the largest norms round onto it).
    assert bool((phi <= sens * (1 + 1e-15)).all() and (phi[X <= 1e3] < sens).all())
    assert float(phi[-1]) == pytest.approx(sens, rel=1e-8)
    assert bool((phi.diff() >= -1e-15 * sens).all())  # scaling keeps the order of the norms
    torch.testing.assert_close(weights.psasc_scaled_norm(X, C=C, r=r, s=s), phi, rtol=1e-13, atol=0)


@pytest.mark.parametrize("C, r", TABLE_II)
@pytest.mark.parametrize("s", S_GRID)
def test_psasc_against_psac_ratio_and_relative_weight(C, r, s):
    ratio = weights.psasc_weight(X, C=C, r=r, s=s) / weights.psac_weight(X, C=C, r=r)
    torch.testing.assert_close(weights.psasc_to_psac_ratio(X, r=r, s=s), ratio, rtol=1e-13, atol=0)
    assert bool((ratio >= 1 - 1e-15).all() and (ratio <= 1 / s + 1e-12).all())  # absolute: never below PSAC
    assert bool((ratio.diff() >= -4e-15).all())  # the boost grows with the norm: large gradients gain most
    rel_psasc = weights.relative_weight(weights.psasc_weight(X, C=C, r=r, s=s), weights.psasc_sensitivity(C=C, s=s))
    rel_psac = weights.relative_weight(weights.psac_weight(X, C=C, r=r), C)
    assert float(rel_psasc[0]) == pytest.approx(s * float(rel_psac[0]), rel=1e-8)  # relative to the noise: x s


def test_monotone_when_sr_at_least_one_and_psac_peak():
    w = weights.psasc_weight(X, C=2.0, r=4.0, s=0.5)  # s r = 2
    assert bool((w.diff() <= 0).all()) and weights.psasc_peak(C=2.0, r=4.0, s=0.5) == (0.0, 2.0)
    assert weights.psasc_peak(C=1.0, r=0.01) == pytest.approx((0.1 - 0.01, 1 / (0.2 - 0.01)))  # PSAC, s = 1


def test_autos_limits():
    w = weights.autos_weight(X, gamma=0.01)
    assert weights.autos_weight(0.0, gamma=0.01) == pytest.approx(100.0)  # 1/gamma for small gradients
    assert bool((X * w < 1).all()) and float((X * w)[-1]) == pytest.approx(1.0, rel=1e-10)


def test_s_equal_one_is_psac_to_the_bit():
    norms = torch.cat([torch.tensor([0.0, 1e-300, 1e-12, 1e12, 1e300]), X[::100]])
    for dtype in (torch.float64, torch.float32):
        n = norms.to(dtype)
        assert torch.equal(weights.psasc_weight(n, C=0.3, r=1e-4, s=1.0), weights.psac_weight(n, C=0.3, r=1e-4))
    a, b = PSASC(C=0.3, r=1e-4, s=1.0, sigma=1.0), PSAC(C=0.3, r=1e-4, sigma=1.0)
    assert a.releases() == b.releases() and a.noise_multiplier() == 1.0


def test_reparametrisation_identity_of_the_weights():
    for C, r in TABLE_II:
        for s in S_GRID:
            as_psac = weights.psasc_as_psac(lr=1.0, C=C, r=r, s=s)
            lhs = weights.psasc_weight(X, C=C, r=r, s=s)
            rhs = (C / s) * weights.psac_weight(X, C=1.0, r=r, r_num=as_psac["r_num"])
            torch.testing.assert_close(lhs, rhs, rtol=1e-14, atol=0)


@settings(max_examples=150, deadline=None)
@given(C=st.floats(1e-4, 1e4), r=st.floats(1e-8, 1.0), s=st.floats(1e-3, 1.0))
def test_peak_closed_form_property(C, r, s):
    peak = weights.psasc_peak(C=C, r=r, s=s)
    if s * r >= 1:
        return
    at = lambda x: float(weights.psasc_weight(torch.tensor(x, dtype=torch.float64), C=C, r=r, s=s))  # noqa: E731
    assert at(peak.norm) == pytest.approx(peak.weight, rel=1e-12)
    for x in (peak.norm * 0.9, peak.norm * 1.1, 0.0, peak.norm * 10):
        assert at(x) <= peak.weight * (1 + 1e-12)


# --- sensitivity on adversarial norms ---------------------------------------------------------------------------



def make(name, C, r, s, gamma, sigma=1.0):
    return {
        "autos": lambda: AutoS(sigma=sigma, gamma=gamma),
        "psac": lambda: PSAC(C=C, r=r, sigma=sigma),
        "psac-rnum": lambda: PSAC(C=C, r=r, r_num=r / s, sigma=sigma),
        "psasc": lambda: PSASC(C=C, r=r, s=s, sigma=sigma),
        "psasc-momentum": lambda: PSASCMomentum(C=C, r=r, s=s, sigma=sigma, K0=1, gamma0=0.5, gamma1=0.5),
    }[name]()


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["autos", "psac", "psac-rnum", "psasc", "psasc-momentum"]),
       C=st.floats(1e-6, 1e6), r=st.floats(1e-8, 1e4), s=st.floats(1e-3, 10.0), gamma=st.floats(1e-8, 1e4),
       norms=st.lists(st.sampled_from(ADVERSARIAL_NORMS) | st.floats(0, 1e15), min_size=1, max_size=20))
def test_contribution_never_exceeds_sensitivity(name, C, r, s, gamma, norms):
    m = make(name, C, r, s, gamma)
    for dtype, tol, top in ((torch.float64, 1e-12, math.inf), (torch.float32, 1e-6, 1e30)):
        n = torch.tensor([v for v in norms if v <= top], dtype=dtype)
        w = m.weights(n)
        assert bool(torch.isfinite(w).all() and (w > 0).all())
        assert bool((w * n <= m.sensitivity() * (1 + tol)).all())


# --- the reparametrisation identity, step for step ---------------------------------------------------------

@pytest.mark.parametrize("momentum", [0.0, 0.9], ids=["sgd", "heavy-ball"])
def test_psasc_is_psac_with_rescaled_lr_and_numerator_step_for_step(momentum):
    """PSASC(eta, C, r, s) and PSAC(C=1, r, r_num=r/s) at eta C/s take the same steps under the same noise draws."""
    lr, C, r, s, sigma = 0.1, 0.3, 5e-5, 0.55, 1.3
    batches = [batch(n, seed=k) for k, n in enumerate((7, 5, 0, 6, 4))]
    a, b = tiny_cnn(), tiny_cnn()
    as_psac = weights.psasc_as_psac(lr=lr, C=C, r=r, s=s)
    run_a, _ = private_steps(PSASC(C=C, r=r, s=s, sigma=sigma), a,
                             torch.optim.SGD(a.parameters(), lr=lr, momentum=momentum), batches, seed=4)
    run_b, _ = private_steps(PSAC(C=as_psac["C"], r=as_psac["r"], r_num=as_psac["r_num"], sigma=sigma), b,
                             torch.optim.SGD(b.parameters(), lr=as_psac["lr"], momentum=momentum), batches, seed=4)
    for step_a, step_b in zip(run_a, run_b):
        for pa, pb in zip(step_a, step_b):
            torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)
    initial = [p.detach() for p in trainable(tiny_cnn())]
    assert max(float((p - q).abs().max()) for p, q in zip(run_a[-1], initial)) > 1e-2  # the steps are not tiny


def test_s_equal_one_trains_exactly_like_psac():
    batches = [batch(n, seed=k) for k, n in enumerate((7, 5, 6))]
    runs = []
    for method in (PSASC(C=0.3, r=5e-5, s=1.0, sigma=1.0), PSAC(C=0.3, r=5e-5, sigma=1.0)):
        model = tiny_cnn()
        runs.append(private_steps(method, model, torch.optim.SGD(model.parameters(), lr=1.0), batches)[0])
    assert all(torch.equal(p, q) for sa, sb in zip(*runs) for p, q in zip(sa, sb))


# --- the noise-off oracle ---------------------------------------------------------------------------------------

def test_norms_straddle_the_psasc_peak():
    """Guards the oracle: the tiny problem exercises the rising and the falling branch of the PSASC weight."""
    norms = flat_norms(PerSampleGradients(tiny_cnn(), loss_fn)(*batch(7)))
    peak = weights.psasc_peak(C=0.3, r=5e-5, s=0.8).norm
    assert (norms < peak).any() and (norms > peak).any()


@pytest.mark.parametrize("name", sorted(HP))
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("micro_batch_size", [None, 3])
def test_noise_off_oracle_equals_per_example_loop(name, opt, micro_batch_size):
    batches = [batch(n, seed=k) for k, n in enumerate((7, 4, 0, 4))]  # 4 steps: the momentum window slides
    ref_model, dp_model = tiny_cnn(), tiny_cnn()
    ref_opt, dp_opt = OPTIMIZERS[opt](ref_model.parameters()), OPTIMIZERS[opt](dp_model.parameters())
    if name == "psasc-momentum":
        expected = reference_momentum_steps(ref_model, ref_opt, batches, HP[name])
    else:
        expected = reference_steps(name, ref_model, ref_opt, batches, HP[name])
    method = make_method(name, sigma=0.0, **HP[name])
    got = private_steps(method, dp_model, dp_opt, batches, micro_batch_size)[0][-1]
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=0)
    initial = [p.detach() for p in trainable(tiny_cnn())]
    assert max(float((e - p).abs().max()) for e, p in zip(expected, initial)) > 1e-3  # the model moved


def test_momentum_oracle_over_more_steps_with_a_long_window():
    """K0 = 3 and 5 steps: the window fills, then slides; gamma0 = 1 weighs old gradients fully."""
    hp = dict(C=0.3, r=5e-5, s=0.45, K0=3, gamma0=1.0, gamma1=0.6)
    batches = [batch(n, seed=10 + k) for k, n in enumerate((2, 3, 0, 2, 3))]
    ref_model, dp_model = tiny_cnn(1), tiny_cnn(1)
    expected = reference_momentum_steps(ref_model, torch.optim.SGD(ref_model.parameters(), lr=2.0), batches, hp)
    method = PSASCMomentum(sigma=0.0, **hp)
    got = private_steps(method, dp_model, torch.optim.SGD(dp_model.parameters(), lr=2.0), batches, 2)[0][-1]
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=0)
    assert len(method.history) == 3 and method.t == 5 and method.window == 3


@pytest.mark.parametrize("hp", [dict(K0=0, gamma0=0.5, gamma1=1.0), dict(K0=3, gamma0=0.0, gamma1=1.0)],
                         ids=["K0=0", "gamma0=0"])
def test_momentum_without_momentum_is_psasc_to_the_bit(hp):
    batches = [batch(n, seed=k) for k, n in enumerate((7, 0, 5, 6))]
    runs = []
    momentum = PSASCMomentum(C=0.3, r=5e-5, s=0.8, sigma=1.2, **hp)
    for method in (PSASC(C=0.3, r=5e-5, s=0.8, sigma=1.2), momentum):
        model = tiny_cnn()
        runs.append(private_steps(method, model, torch.optim.SGD(model.parameters(), lr=1.0), batches, seed=3,
                                  per_sample="vmap")[0])  # the momentum's engine: the same sums, bit for bit
    assert all(torch.equal(p, q) for sa, sb in zip(*runs) for p, q in zip(sa, sb))
    assert momentum.history == [] and momentum.state_dict()["history"] == []  # no iterate is stored


def test_momentum_with_noise_does_not_depend_on_micro_batching():
    batches = [batch(n, seed=k) for k, n in enumerate((5, 4, 3))]
    results = []
    for mbs in (None, 2):
        model = tiny_cnn()
        method = PSASCMomentum(C=0.3, r=5e-5, s=0.8, sigma=1.1, K0=2, gamma0=0.6, gamma1=0.4)
        results.append(private_steps(method, model, torch.optim.SGD(model.parameters(), lr=1.0), batches, mbs)[0][-1])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


# --- noise and accounting -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, hp, sensitivity", [
    ("autos", dict(gamma=0.01), 1.0),
    ("psac", dict(C=0.7, r=1e-3), 0.7),
    ("psasc", dict(C=0.7, r=1e-3, s=0.55), 0.7 / 0.55),
    ("psasc-momentum", dict(C=0.7, r=1e-3, s=0.55, K0=2, gamma0=0.5, gamma1=0.25), 0.7 / 0.55),
])
def test_noise_std_is_sigma_times_sensitivity_and_accountant_sees_sigma(name, hp, sensitivity):
    """Empty batches and lr = 1: each update is the released noise / B (for momentum, M accumulates the noise)."""
    sigma = 3.0
    model = nn.Linear(200, 50)
    method = make_method(name, sigma=sigma, **hp)
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=1.0), method, sample_rate=0.5,
                         expected_batch_size=B)
    assert method.sensitivity() == pytest.approx(sensitivity)
    empty = (torch.zeros(0, 200), torch.zeros(0, dtype=torch.long))
    before = model.weight.detach().clone()
    engine.step(*empty)
    first = before - model.weight.detach()
    assert first.std().item() == pytest.approx(sigma * sensitivity / B, rel=0.05)
    before = model.weight.detach().clone()
    engine.step(*empty)
    second = before - model.weight.detach()
    decay = 1 - hp.get("gamma1", 1.0)  # M_2 = (1 - gamma1) n_1 + n_2
    assert second.std().item() == pytest.approx(sigma * sensitivity / B * math.sqrt(1 + decay ** 2), rel=0.05)
    assert engine.ledger.history == [(sigma, 0.5, 2)]


def test_registry_has_the_four_methods():
    assert {"autos", "psac", "psasc", "psasc-momentum"} <= set(METHODS)
    assert METHODS["psasc-momentum"] is PSASCMomentum and PSASCMomentum.name == "psasc-momentum"
    assert PSAC.name == "psac" and PSASC.name == "psasc" and AutoS.name == "autos"


# --- checkpoint and resume ------------------------------------------------------------------------------------

def momentum_trainer(checkpoint=None) -> Trainer:
    model = tiny_cnn(seed=123)
    method = PSASCMomentum(C=0.3, r=1e-4, s=0.8, sigma=1.2, K0=2, gamma0=0.5, gamma1=0.3)
    data = synthetic_classification(n_train=64, n_test=32, shape=(1, 6, 6), num_classes=4, seed=5)
    return Trainer(model, method, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5), data,
                   expected_batch_size=16, epochs=2, delta=1e-5, seed=0, checkpoint=checkpoint,
                   checkpoint_every=3, progress=False)


def test_momentum_checkpoint_and_resume_equal_an_uninterrupted_run(tmp_path):
    full = momentum_trainer()
    full_log = full.run()
    ckpt = tmp_path / "run.pt"
    first = momentum_trainer(checkpoint=ckpt)
    first.run(max_steps=6)  # interrupted mid-epoch 2: the window of iterates and M are in the checkpoint
    saved = torch.load(ckpt, weights_only=False)["engine"]["method"]
    assert saved["t"] == 6 and len(saved["history"]) == 2 and len(saved["M"]) == len(trainable(first.model))
    resumed = momentum_trainer(checkpoint=ckpt)  # a fresh process rebuilds everything, then loads
    resumed_log = resumed.run()
    assert resumed.step == full.step == full.T
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(full.engine.method.M, resumed.engine.method.M):
        assert torch.equal(a, b)
    assert all(torch.equal(a, b) for wa, wb in zip(full.engine.method.history, resumed.engine.method.history)
               for a, b in zip(wa, wb))
    assert resumed_log.epochs == full_log.epochs


def test_momentum_state_from_another_K0_is_rejected():
    m = PSASCMomentum(C=1.0, r=1e-3, s=0.5, sigma=1.0, K0=1, gamma0=0.5, gamma1=0.5)
    m.bind([torch.zeros(3)], expected_batch_size=4)
    state = {"t": 3, "M": [torch.ones(3)], "history": [[torch.zeros(3)], [torch.ones(3)]]}
    with pytest.raises(ValueError, match="keeps 1 .K0 = 1"):
        m.load_state_dict(state)
    state["history"] = state["history"][1:]
    m.load_state_dict(state)
    assert m.t == 3 and torch.equal(m.M[0], torch.ones(3)) and torch.equal(m.history[0][0], torch.ones(3))


# --- bad input ----------------------------------------------------------------------------------------------

GOOD = dict(C=1.0, r=1e-3, s=0.5, sigma=1.0, K0=2, gamma0=0.5, gamma1=0.5)


@pytest.mark.parametrize("cls, kwargs, match", [
    (AutoS, dict(sigma=1.0, gamma=0.0), "gamma"),
    (AutoS, dict(sigma=1.0, gamma=-0.01), "gamma"),
    (AutoS, dict(sigma=-1.0), "sigma"),
    (PSAC, dict(C=0.0, r=1e-3, sigma=1.0), r"C \(maximum norm size\)"),
    (PSAC, dict(C=-1.0, r=1e-3, sigma=1.0), "C"),
    (PSAC, dict(C=1.0, r=0.0, sigma=1.0), r"r \(stable parameter\)"),
    (PSAC, dict(C=1.0, r=1e-3, sigma=1.0, r_num=0.0), "r_num"),
    (PSAC, dict(C=1.0, r=1e-3, sigma=math.nan), "sigma"),
    (PSASC, dict(C=1.0, r=1e-3, s=0.0, sigma=1.0), r"s \(scaling coefficient\)"),
    (PSASC, dict(C=1.0, r=1e-3, s=-0.5, sigma=1.0), "s "),
    (PSASC, dict(C=math.inf, r=1e-3, s=0.5, sigma=1.0), "C"),
    (PSASCMomentum, {**GOOD, "K0": -1}, r"K0 \(momentum length\) must be an integer >= 0"),
    (PSASCMomentum, {**GOOD, "K0": 1.5}, "K0"),
    (PSASCMomentum, {**GOOD, "gamma0": -0.1}, "gamma0"),
    (PSASCMomentum, {**GOOD, "gamma0": 1.5}, r"gamma0 \(inner momentum parameter\) must be in \[0, 1\]"),
    (PSASCMomentum, {**GOOD, "gamma1": 0.0}, r"gamma1 \(outer momentum parameter\) must be in \(0, 1\]"),
    (PSASCMomentum, {**GOOD, "gamma1": 1.5}, "gamma1"),
    (PSASCMomentum, {**GOOD, "s": 0.0}, "s "),
])
def test_bad_hyperparameters_are_clear_errors(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


@pytest.mark.parametrize("call, match", [
    (lambda: weights.psasc_weight(1.0, C=1.0, r=1e-3, s=0.0), "s"),
    (lambda: weights.psasc_peak(C=0.0, r=1e-3, s=0.5), "C"),
    (lambda: weights.psac_weight(1.0, C=1.0, r=-1.0), "r"),
    (lambda: weights.autos_weight(1.0, gamma=0.0), "gamma"),
    (lambda: weights.psasc_as_psac(lr=0.0, C=1.0, r=1e-3, s=0.5), "lr"),
    (lambda: weights.relative_weight(1.0, 0.0), "sensitivity"),
])
def test_weight_functions_reject_bad_parameters(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_momentum_needs_its_parameters():
    with pytest.raises(ValueError, match=r"needs the hyperparameter\(s\) K0, gamma0, gamma1; its hyperparameters"):
        make_method("psasc-momentum", C=1.0, r=1e-3, s=0.5, sigma=1.0)


def test_weights_accept_numpy():
    x = np.array([0.0, 1.0])
    np.testing.assert_allclose(weights.psasc_weight(x, C=1.0, r=1.0, s=0.5), [1.0, 1 / (0.5 + 0.5)])
