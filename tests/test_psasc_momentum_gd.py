"""DP-PSASC with momentum, GD version (Algorithm 2, ``psasc-momentum-gd``): the noise-off oracle against a
per-example loop for both readings of the line order (PSASC-10), the sensitivity on adversarial gradient sequences
(neighbouring datasets), noise and accounting at sample rate 1 (cross-checked against Google's dp_accounting and the
exact composition of Gaussian mechanisms), example identities, checkpoint/resume and bad input."""

from __future__ import annotations

import math

import dp_accounting
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats
from torch import nn

from dpbook.accounting import epsilon
from dpbook.data import synthetic_classification
from dpbook.methods import METHODS, make_method
from dpbook.methods.base import MicroBatch
from dpbook.methods.psac import PSASC
from dpbook.methods.psasc_momentum_gd import READINGS, PSASCMomentumGD
from dpbook.optim import DPOptimizer
from dpbook.per_sample import FormedView, PerSampleGradients, flat_norms, no_other_values
from dpbook.sampling import PoissonSampler
from dpbook.train import Trainer
from dpbook.tuning import tuning_plan
from tests.reference import ADVERSARIAL_NORMS, NoNoise, apply_update, batch, flat_norm, per_example_gradients, tiny_cnn

N = 7  # training-set size of the oracle tests: every step is all of it
LOSS_SCALE = 1e-3  # puts the tiny model's per-sample norms (0.005 to 0.01) on both sides of the PSASC peak
HP = dict(C=0.3, r=5e-5, s=0.8, gamma=0.4)
OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=5.0),  # the loss is scaled by 1e-3
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}


def loss_fn(out, y):
    return LOSS_SCALE * nn.functional.cross_entropy(out, y)


def trainable(model: nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.requires_grad]


# --- the reference: Algorithm 2 one example at a time, in plain python ------------------------------------------

def reference_gd_steps(model, optimizer, x, y, hp, steps, reading):
    """Algorithm 2 literally: every example's gradient, its EMA (line 2, line 10), Eq. (6) on it, sum, / N, step."""
    C, r, s, gamma = hp["C"], hp["r"], hp["s"], hp["gamma"]
    m = None
    for k in range(steps):
        g = per_example_gradients(model, x, y, loss_fn=loss_fn)  # g[i][p]: example i, parameter p, at w_k
        new = g if k == 0 else [[gamma * gp + (1 - gamma) * mp for gp, mp in zip(gi, mi)] for gi, mi in zip(g, m)]
        used = new if reading == "update-then-scale" else (g if k == 0 else m)
        m = new
        total = [torch.zeros_like(p) for p in trainable(model)]
        for mi in used:
            norm = flat_norm(mi)
            w = C / (s * norm + r / (norm + r))  # Eq. (6)
            total = [t + w * mp for t, mp in zip(total, mi)]
        apply_update(model, optimizer, total, len(x))  # line 8: eta / N (PSASC-11)
    return [p.detach() for p in trainable(model)]


def engine(model, optimizer, method, *, micro_batch_size=None, seed=0, noise_off=True, per_sample="auto"):
    e = DPOptimizer(model, optimizer, method, sample_rate=1.0, expected_batch_size=N, loss_fn=loss_fn,
                    micro_batch_size=micro_batch_size, noise_seed=seed, per_sample=per_sample)
    if noise_off:
        e.noise = NoNoise()
    return e


def gd_steps(method, model, optimizer, x, y, steps, *, orders=None, **options):
    """Run ``steps`` full-batch steps; ``orders[k]`` (a permutation) presents the training set in another order."""
    e = engine(model, optimizer, method, **options)
    history = []
    for k in range(steps):
        index = torch.arange(len(x)) if orders is None else orders[k]
        e.step(x[index], y[index], index=index)
        history.append([p.detach().clone() for p in trainable(model)])
    return history, e


# --- the noise-off oracle -----------------------------------------------------------------------------------------

def test_norms_straddle_the_psasc_peak():
    """Guards the oracle: the tiny problem exercises the rising and the falling branch of the weight."""
    from dpbook import weights

    norms = flat_norms(PerSampleGradients(tiny_cnn(), loss_fn)(*batch(N)))
    peak = weights.psasc_peak(C=HP["C"], r=HP["r"], s=HP["s"]).norm
    assert (norms < peak).any() and (norms > peak).any()


@pytest.mark.parametrize("reading", READINGS)
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("micro_batch_size", [None, 3])
def test_noise_off_oracle_equals_per_example_loop(reading, opt, micro_batch_size):
    x, y = batch(N)
    steps = 5
    ref_model, dp_model = tiny_cnn(), tiny_cnn()
    expected = reference_gd_steps(ref_model, OPTIMIZERS[opt](ref_model.parameters()), x, y, HP, steps, reading)
    method = make_method("psasc-momentum-gd", sigma=0.0, reading=reading, **HP)
    got = gd_steps(method, dp_model, OPTIMIZERS[opt](dp_model.parameters()), x, y, steps,
                   micro_batch_size=micro_batch_size)[0][-1]
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=0)
    initial = [p.detach() for p in trainable(tiny_cnn())]
    assert max(float((e - p).abs().max()) for e, p in zip(expected, initial)) > 1e-3  # the model moved
    assert method.t == steps and [tuple(m.shape) for m in method.m] == [(N, *p.shape) for p in trainable(dp_model)]


def test_the_two_readings_differ_and_momentum_matters():
    """Guards the oracle: the readings, and gamma, change the trajectory (so the oracle tells them apart)."""
    x, y = batch(N)
    finals = {}
    for key, hp, reading in (("update", HP, "update-then-scale"), ("scale", HP, "scale-then-update"),
                             ("no momentum", {**HP, "gamma": 1.0}, "update-then-scale")):
        model = tiny_cnn()
        method = PSASCMomentumGD(sigma=0.0, reading=reading, **hp)
        finals[key] = gd_steps(method, model, torch.optim.SGD(model.parameters(), lr=5.0), x, y, 4)[0][-1]
    for a, b in (("update", "scale"), ("update", "no momentum")):
        assert max(float((p - q).abs().max()) for p, q in zip(finals[a], finals[b])) > 1e-4, (a, b)


def test_the_state_is_indexed_by_example_not_by_position():
    """Presenting the training set in a new order every step (with its indices) changes nothing."""
    x, y = batch(N)
    g = torch.Generator().manual_seed(3)
    orders = [torch.randperm(N, generator=g) for _ in range(4)]
    runs = []
    for order in (None, orders):
        model = tiny_cnn()
        method = PSASCMomentumGD(sigma=1.3, **HP)
        runs.append(gd_steps(method, model, torch.optim.SGD(model.parameters(), lr=5.0), x, y, 4, orders=order,
                             noise_off=False, seed=2)[0][-1])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("hp_change", [{}, {"sigma": 0.0}], ids=["noise", "no-noise"])
def test_gamma_one_is_full_batch_psasc_to_the_bit(hp_change):
    """gamma = 1 keeps no memory: m_{k,i} = g_{k,i}, and Algorithm 2 is Algorithm 1 with the whole set as batch."""
    x, y = batch(N)
    sigma = hp_change.get("sigma", 1.2)
    runs = []
    for method in (PSASC(C=0.3, r=5e-5, s=0.8, sigma=sigma), PSASCMomentumGD(C=0.3, r=5e-5, s=0.8, sigma=sigma,
                                                                              gamma=1.0)):
        model = tiny_cnn()
        runs.append(gd_steps(method, model, torch.optim.SGD(model.parameters(), lr=5.0), x, y, 4, noise_off=False,
                             seed=5, per_sample="vmap")[0])  # Algorithm 2's engine: bit for bit
    assert all(torch.equal(p, q) for sa, sb in zip(*runs) for p, q in zip(sa, sb))


def test_micro_batching_with_noise_changes_nothing():
    x, y = batch(N)
    results = []
    for mbs in (None, 2, 1):
        model = tiny_cnn()
        method = PSASCMomentumGD(sigma=1.1, **HP)
        results.append(gd_steps(method, model, torch.optim.SGD(model.parameters(), lr=5.0), x, y, 3,
                                micro_batch_size=mbs, noise_off=False)[0][-1])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


# --- sensitivity: neighbouring datasets on adversarial gradient sequences ----------------------------------------

def released_sums(method: PSASCMomentumGD, grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """Drive the method directly: ``grads[k]`` (n, d) are the n examples' gradients at step k; noise-free sums."""
    n, d = grads[0].shape
    method.bind([torch.zeros(d, dtype=grads[0].dtype)], expected_batch_size=n)
    sums = []
    for g in grads:
        acc = method.start([torch.zeros(d, dtype=g.dtype)])
        method.accumulate(acc, MicroBatch(FormedView([g], flat_norms([g]), no_other_values), torch.arange(n)))
        sums.append(method.release(acc, NoNoise())[0])
        method.advance()
    return sums


@settings(max_examples=150, deadline=None)
@given(C=st.floats(1e-6, 1e6), r=st.floats(1e-8, 1e4), s=st.floats(1e-3, 10.0),
       gamma=st.floats(1e-6, 1.0) | st.just(1.0), reading=st.sampled_from(READINGS),
       precision=st.sampled_from([(torch.float64, 1e150, 1e-12), (torch.float32, 1e18, 1e-5)]),
       n=st.integers(1, 5), steps=st.integers(1, 4), seed=st.integers(0, 2 ** 31 - 1), removed=st.integers(0, 4),
       norms=st.lists(st.sampled_from(ADVERSARIAL_NORMS) | st.floats(0, 1e15), min_size=20, max_size=20))
def test_removing_one_example_moves_every_release_by_less_than_the_sensitivity(
        C, r, s, gamma, reading, precision, n, steps, seed, removed, norms):
    """Add/remove-one adjacency: with the same released history (here: gradients that do not depend on it), the
    noise-free sums on D and on D minus one example differ by at most C/s at every step, whatever the gradients
    (norms from 0 to 1e150, directions flipping from step to step, EMAs that cancel)."""
    dtype, top, tol = precision
    removed %= n
    g = torch.Generator().manual_seed(seed)
    capped = [v for v in norms if v <= top] or [0.0]
    grads = []
    for k in range(steps):
        direction = torch.randn(n, 3, generator=g, dtype=torch.float64)
        direction /= torch.linalg.vector_norm(direction, dim=1, keepdim=True)
        scale = torch.tensor([capped[(k * n + i) % len(capped)] for i in range(n)], dtype=torch.float64)
        grads.append((direction * scale[:, None]).to(dtype))
    full = PSASCMomentumGD(C=C, r=r, s=s, sigma=1.0, gamma=gamma, reading=reading)
    keep = [i for i in range(n) if i != removed]
    neighbour = PSASCMomentumGD(C=C, r=r, s=s, sigma=1.0, gamma=gamma, reading=reading)
    assert full.sensitivity() == C / s
    a = released_sums(full, grads)
    b = released_sums(neighbour, [gk[keep] for gk in grads]) if keep else [torch.zeros_like(s_) for s_ in a]
    for sa, sb in zip(a, b):
        assert bool(torch.isfinite(sa).all())
        diff = float(torch.linalg.vector_norm((sa - sb).double()))
        assert diff <= full.sensitivity() * (1 + tol * max(n, 1)), (diff, full.sensitivity())


# --- noise and accounting at sample rate 1 -------------------------------------------------------------------------

def test_noise_std_is_sigma_C_over_s_and_the_accountant_sees_sigma_at_rate_one():
    """lr = 1: the difference between a noisy and a noise-free run's first update is the released noise / N."""
    sigma, C, s = 3.0, 0.7, 0.55
    x, y = torch.randn(N, 200), torch.randint(0, 50, (N,))
    updates, engines = [], []
    for noise_off in (False, True):
        torch.manual_seed(0)
        model = nn.Linear(200, 50)
        before = model.weight.detach().clone()
        e = engine(model, torch.optim.SGD(model.parameters(), lr=1.0),
                   PSASCMomentumGD(C=C, r=1e-3, s=s, sigma=sigma, gamma=0.5), noise_off=noise_off)
        e.step(x, y, index=torch.arange(N))
        updates.append(before - model.weight.detach())
        e.step(x, y, index=torch.arange(N))
        engines.append(e)
    noise = (updates[0] - updates[1]) * N
    assert noise.std().item() == pytest.approx(sigma * C / s, rel=0.05)
    assert engines[0].ledger.history == [(sigma, 1.0, 2)]  # T = 2 full-batch Gaussian steps, no subsampling


def exact_gaussian_epsilon(sigma: float, steps: int, delta: float) -> float:
    """Epsilon of T adaptively composed Gaussian mechanisms at noise multiplier sigma, exactly: a Gaussian with
    mu = sqrt(T)/sigma, delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Balle & Wang 2018, Thm. 8;
    Dong, Roth & Su 2022, Cor. 3.3)."""
    mu = math.sqrt(steps) / sigma

    def excess(eps):
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta

    return optimize.brentq(excess, 0.0, 100.0, xtol=1e-12)


def google_epsilon(sigma: float, steps: int, delta: float, accountant: str) -> float:
    """dp_accounting (Google): T self-composed Gaussian mechanisms, nothing subsampled."""
    acc = dp_accounting.rdp.RdpAccountant() if accountant == "rdp" else dp_accounting.pld.PLDAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), steps))
    return acc.get_epsilon(delta)


def test_accounting_at_rate_one_matches_dp_accounting_and_the_exact_gaussian_composition():
    """One setting: a run of T = 60 full-batch steps calibrated to (4, 1e-5) at q = 1."""
    eps_target, delta, T = 4.0, 1e-5, 60
    plan = tuning_plan(eps_target, delta, sample_rate=1.0, steps=T)
    method = PSASCMomentumGD.from_plan(plan, C=0.3, r=1e-4, s=0.9, gamma=0.2)
    sigma = method.noise_multiplier()
    assert sigma == plan.sigma and 4.0 - 0.011 <= epsilon(sigma, 1.0, T, delta) <= 4.0
    ours_rdp = epsilon(sigma, 1.0, T, delta)
    ours_prv = epsilon(sigma, 1.0, T, delta, accountant="prv")
    google_rdp = google_epsilon(sigma, T, delta, "rdp")
    google_pld = google_epsilon(sigma, T, delta, "pld")
    exact = exact_gaussian_epsilon(sigma, T, delta)
    # At q = 1 the RDP curve is T alpha / (2 sigma^2) for both libraries: the same conversion, the same number.
    assert ours_rdp == pytest.approx(google_rdp, rel=1e-9)
    # Google's PLD of an unsampled Gaussian is exact to its discretisation; our PRV is an upper estimate, ~0.01 above.
    assert google_pld == pytest.approx(exact, abs=1e-6)
    assert exact <= ours_prv <= exact + 0.02
    assert exact < ours_rdp <= exact * 1.15  # RDP is an upper bound, loose by a few percent here
    # No subsampling amplification: the same sigma at q < 1 would spend far less.
    assert epsilon(sigma, 0.5, T, delta) < 0.75 * ours_rdp


def test_a_trainer_run_at_batch_size_N_is_algorithm_2_and_spends_its_plan():
    data = synthetic_classification(n_train=40, n_test=20, shape=5, num_classes=3, seed=2)
    T = 6
    plan = tuning_plan(2.0, 1e-5, sample_rate=1.0, steps=T)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    method = METHODS["psasc-momentum-gd"].from_plan(plan, C=1.0, r=1e-3, s=0.5, gamma=0.3)
    trainer = Trainer(model, method, torch.optim.SGD(model.parameters(), lr=0.5), data, expected_batch_size=40,
                      epochs=T, delta=1e-5, seed=0, progress=False)
    log = trainer.run()
    assert trainer.sampler.q == 1.0 and trainer.T == T  # an epoch is one full-batch step
    assert trainer.engine.ledger.history == [(plan.sigma, 1.0, T)]
    assert log.epochs[-1]["epsilon"] <= 2.0 and log.epochs[-1]["gamma"] == 0.3
    assert method.t == T and len(method.m[0]) == 40


def test_the_sampler_at_rate_one_returns_every_index_in_order():
    sampler = PoissonSampler(N=25, expected_batch_size=25, seed=4)
    assert sampler.q == 1.0 and sampler.steps_per_epoch() == 1
    for _ in range(20):
        assert torch.equal(sampler.sample(), torch.arange(25))


def test_from_plan_refuses_a_subsampled_plan():
    plan = tuning_plan(4.0, 1e-5, sample_rate=0.1, steps=100)
    with pytest.raises(ValueError, match=r"full-batch.*sample rate 0\.1.*'psasc-momentum' \(Algorithm 3\)"):
        METHODS["psasc-momentum-gd"].from_plan(plan, C=1.0, r=1e-3, s=0.5, gamma=0.3)


def test_registry_and_full_batch_flag():
    assert METHODS["psasc-momentum-gd"] is PSASCMomentumGD and PSASCMomentumGD.name == "psasc-momentum-gd"
    assert PSASCMomentumGD.full_batch and not METHODS["psasc-momentum"].full_batch
    m = make_method("psasc-momentum-gd", C=0.2, r=1e-4, s=0.8, sigma=1.5, gamma=0.1)
    assert m.diagnostics() == {"C": 0.2, "r": 1e-4, "s": 0.8, "gamma": 0.1}
    assert (m.sensitivity(), m.noise_multiplier()) == pytest.approx((0.25, 1.5))


# --- checkpoint and resume ------------------------------------------------------------------------------------------

def gd_trainer(checkpoint=None) -> Trainer:
    torch.manual_seed(123)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    method = PSASCMomentumGD(C=0.3, r=1e-4, s=0.8, sigma=1.2, gamma=0.3)
    data = synthetic_classification(n_train=30, n_test=10, shape=5, num_classes=3, seed=5)
    return Trainer(model, method, torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.5), data,
                   expected_batch_size=30, epochs=7, delta=1e-5, seed=0, checkpoint=checkpoint, checkpoint_every=2,
                   progress=False)


def test_checkpoint_and_resume_equal_an_uninterrupted_run(tmp_path):
    full = gd_trainer()
    full_log = full.run()
    ckpt = tmp_path / "run.pt"
    first = gd_trainer(checkpoint=ckpt)
    first.run(max_steps=4)
    saved = torch.load(ckpt, weights_only=False)["engine"]["method"]
    assert saved["t"] == 4 and [tuple(m.shape) for m in saved["m"]] == [(30, *p.shape) for p in
                                                                         trainable(first.model)]
    resumed = gd_trainer(checkpoint=ckpt)
    resumed_log = resumed.run()
    assert resumed.step == full.step == full.T == 7
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(full.engine.method.m, resumed.engine.method.m))
    assert resumed_log.epochs == full_log.epochs


def test_state_of_another_training_set_is_rejected():
    m = PSASCMomentumGD(C=1.0, r=1e-3, s=0.5, sigma=1.0, gamma=0.5)
    m.bind([torch.zeros(3)], expected_batch_size=4)
    with pytest.raises(ValueError, match=r"shapes \[\(5, 3\)\] but this method keeps \[\(4, 3\)\] \(N = 4\)"):
        m.load_state_dict({"t": 2, "m": [torch.ones(5, 3)]})
    m.load_state_dict({"t": 2, "m": [torch.ones(4, 3)]})
    assert m.t == 2 and torch.equal(m.m[0], torch.ones(4, 3))


# --- bad input ----------------------------------------------------------------------------------------------------

GOOD = dict(C=1.0, r=1e-3, s=0.5, sigma=1.0, gamma=0.5)


@pytest.mark.parametrize("kwargs, match", [
    ({**GOOD, "gamma": 0.0}, r"gamma \(momentum parameter\) must be in \(0, 1\] \(the weight of the new gradient"),
    ({**GOOD, "gamma": -0.1}, "gamma"),
    ({**GOOD, "gamma": 1.5}, "gamma"),
    ({**GOOD, "gamma": math.nan}, "gamma"),
    ({**GOOD, "reading": "literal"}, r"unknown reading 'literal'.*scale-then-update \(reading PSASC-10\)"),
    ({**GOOD, "s": 0.0}, r"s \(scaling coefficient\)"),
    ({**GOOD, "C": -1.0}, r"C \(maximum norm size\)"),
    ({**GOOD, "r": 0.0}, r"r \(stable parameter\)"),
    ({**GOOD, "sigma": -1.0}, "sigma"),
])
def test_bad_hyperparameters_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PSASCMomentumGD(**kwargs)


def test_gamma_is_required():
    with pytest.raises(ValueError, match=r"psasc-momentum-gd. needs the hyperparameter\(s\) gamma;"):
        make_method("psasc-momentum-gd", C=1.0, r=1e-3, s=0.5, sigma=1.0)


def bound_engine(n=N):
    model = tiny_cnn()
    return DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=1.0), PSASCMomentumGD(**GOOD),
                       sample_rate=1.0, expected_batch_size=n, loss_fn=loss_fn)


@pytest.mark.parametrize("call, match", [
    (lambda e, x, y: e.step(x, y), r"keeps a state per example: pass each example's index"),
    (lambda e, x, y: e.step(x[:5], y[:5], index=torch.arange(5)), r"held 5 of them; run it at sample rate q = 1"),
    (lambda e, x, y: e.step(x, y, index=torch.tensor([0, 1, 2, 3, 4, 5, 5])), "appears twice in one step"),
    (lambda e, x, y: e.step(x, y, index=torch.arange(1, N + 1)), r"indices must lie in 0 \.\. N-1 = 6"),
    (lambda e, x, y: e.step(x, y, index=torch.arange(N - 1)), r"index holds 6 indices for a batch of 7 examples"),
])
def test_a_step_that_is_not_the_whole_training_set_once_is_an_error(call, match):
    x, y = batch(N)
    with pytest.raises(ValueError, match=match):
        call(bound_engine(), x, y)


def test_a_fractional_expected_batch_size_is_refused():
    with pytest.raises(ValueError, match=r"training-set size N, an integer, got 6\.5"):
        bound_engine(6.5)
