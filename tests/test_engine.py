"""The private-step engine with DP-SGD: noise-off oracle, micro-batching, empty batches, sampling, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dpbook.methods import DPSGD, make_method
from dpbook.optim import DPOptimizer
from dpbook.per_sample import NonFiniteGradientError
from dpbook.sampling import PoissonSampler, micro_batches
from tests.reference import OPTIMIZERS, batch, clipped_step, tiny_cnn

B = 8.0  # expected batch size used by the tests
def reference_steps(model, optimizer, batches, C):
    """One example at a time: backward, flat L2 clip, sum, divide by the expected B, optimizer step."""
    for x, y in batches:
        clipped_step(model, optimizer, x, y, C, B)
    return [p.detach() for p in model.parameters() if p.requires_grad]


def private_steps(model, optimizer, batches, C, micro_batch_size=None, sigma=0.0, seed=0):
    engine = DPOptimizer(model, optimizer, DPSGD(C=C, sigma=sigma), sample_rate=0.1, expected_batch_size=B,
                         micro_batch_size=micro_batch_size, noise_seed=seed)
    for x, y in batches:
        engine.step(x, y)
    return [p.detach() for p in model.parameters()], engine


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("micro_batch_size", [None, 3])
@pytest.mark.parametrize("sizes", [(7, 5), (0, 6), (6, 0)], ids=["full", "empty-first", "empty-second"])
def test_noise_off_oracle_equals_per_example_loop(opt, micro_batch_size, sizes):
    batches = [batch(n, seed=k) for k, n in enumerate(sizes)]
    C = 7.5  # norms of the first batch lie in [6.6, 9.3]: some examples are clipped and some are not
    ref_model, dp_model = tiny_cnn(), tiny_cnn()
    expected = reference_steps(ref_model, OPTIMIZERS[opt](ref_model.parameters()), batches, C)
    got, _ = private_steps(dp_model, OPTIMIZERS[opt](dp_model.parameters()), batches, C, micro_batch_size)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=0)


def test_some_examples_are_clipped_and_some_not():
    """Guards the oracle: at C = 7.5 the tiny problem exercises both branches of min(1, C/||g||)."""
    from dpbook.per_sample import PerSampleGradients, flat_norms

    norms = flat_norms(PerSampleGradients(tiny_cnn(), nn.functional.cross_entropy)(*batch(7)))
    assert (norms > 7.5).any() and (norms < 7.5).any()


def test_micro_batching_does_not_change_the_noisy_step():
    x, y = batch(9)
    results = []
    for mbs in (None, 1, 4):
        model = tiny_cnn()
        got, _ = private_steps(model, torch.optim.SGD(model.parameters(), lr=0.1), [(x, y)], 1.0, mbs, sigma=1.3)
        results.append(got)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_empty_batch_still_adds_noise_and_is_accounted():
    model = tiny_cnn()
    before = [p.detach().clone() for p in model.parameters()]
    x, y = batch(0)
    after, engine = private_steps(model, torch.optim.SGD(model.parameters(), lr=1.0), [(x, y)], 1.0, sigma=2.0)
    assert any(not torch.equal(a, b) for a, b in zip(after, before))
    assert engine.ledger.history == [(2.0, 0.1, 1)]


def test_noise_has_std_sigma_C_over_B():
    """With zero gradients (lr=1, empty batch) the update is exactly the noise / B: its std is sigma*C/B."""
    model = nn.Linear(200, 50)
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=1.0), DPSGD(C=0.7, sigma=3.0),
                         sample_rate=0.5, expected_batch_size=B)
    before = model.weight.detach().clone()
    engine.step(torch.zeros(0, 200), torch.zeros(0, dtype=torch.long))
    std = (before - model.weight.detach()).std().item()
    assert std == pytest.approx(3.0 * 0.7 / B, rel=0.05)


def test_same_seed_same_run_different_seed_different_noise():
    x, y = batch(5)
    runs = []
    for seed in (0, 0, 1):
        model = tiny_cnn()
        runs.append(private_steps(model, torch.optim.SGD(model.parameters(), lr=0.1), [(x, y)], 1.0,
                                  sigma=1.0, seed=seed)[0])
    assert all(torch.equal(a, b) for a, b in zip(runs[0], runs[1]))
    assert not all(torch.equal(a, b) for a, b in zip(runs[0], runs[2]))


@settings(max_examples=200, deadline=None)
@given(C=st.floats(1e-6, 1e6), norms=st.lists(st.sampled_from(
    [0.0, 1e-300, 1e-12, 1e-6, 1e-3, 0.5, 1.0, 2.0, 1e3, 1e6, 1e12, 1e300]) | st.floats(0, 1e15), min_size=1))
def test_dpsgd_contribution_never_exceeds_sensitivity(C, norms):
    m = DPSGD(C=C, sigma=1.0)
    n = torch.tensor(norms, dtype=torch.float64)
    contribution = m.weights(n) * n
    assert bool((contribution <= m.sensitivity() * (1 + 1e-12)).all())
    assert bool((m.weights(n) <= 1).all() and (m.weights(n) >= 0).all())


def test_poisson_sampler_rate_and_determinism():
    s1 = PoissonSampler(N=2000, expected_batch_size=100, seed=3)
    s2 = PoissonSampler(N=2000, expected_batch_size=100, seed=3)
    sizes = [len(s1.sample()) for _ in range(200)]
    assert abs(sum(sizes) / len(sizes) - 100) < 3  # std of the mean ~ sqrt(95)/sqrt(200) ~ 0.7
    assert torch.equal(PoissonSampler(N=2000, expected_batch_size=100, seed=3).sample(), s2.sample())
    state = s1.state_dict()
    a = s1.sample()
    s1.load_state_dict(state)
    assert torch.equal(a, s1.sample())


def test_micro_batches_cover_the_batch():
    assert [(s.start, s.stop) for s in micro_batches(7, 3)] == [(0, 3), (3, 6), (6, 7)]
    assert list(micro_batches(0, 3)) == []
    assert [(s.start, s.stop) for s in micro_batches(7, None)] == [(0, 7)]


# --- bad input --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(C=0.0, sigma=1.0), "C"), (dict(C=-1.0, sigma=1.0), "C"), (dict(C=math.nan, sigma=1.0), "C"),
    (dict(C=1.0, sigma=-0.1), "sigma"), (dict(C=1.0, sigma=math.inf), "sigma"),
])
def test_dpsgd_rejects_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DPSGD(**kwargs)


@pytest.mark.parametrize("q", [0.0, -0.1, 1.5, math.nan])
def test_engine_rejects_bad_sample_rate(q):
    model = tiny_cnn()
    with pytest.raises(ValueError, match="sample_rate"):
        DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), DPSGD(C=1, sigma=1), sample_rate=q,
                    expected_batch_size=B)


def test_engine_rejects_batchnorm_naming_the_layer():
    model = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.Flatten(), nn.Linear(48, 4))
    with pytest.raises(ValueError, match=r"'1'.*GroupNorm|GroupNorm.*'1'"):
        DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), DPSGD(C=1, sigma=1), sample_rate=0.1,
                    expected_batch_size=B)


def test_nan_gradient_is_an_error_naming_the_parameter():
    model = tiny_cnn()
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), DPSGD(C=1, sigma=1), sample_rate=0.1,
                         expected_batch_size=B)
    x, y = batch(4)
    x[2, 0, 0, 0] = math.nan
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(NonFiniteGradientError, match=r"parameter '0\.weight'.*example\(s\) \[2\]"):
        engine.step(x, y)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters())), "no update after the error"
    assert engine.ledger.history == []


def test_optimizer_must_hold_the_trainable_parameters():
    model = tiny_cnn()
    with pytest.raises(ValueError, match="optimizer does not hold"):
        DPOptimizer(model, torch.optim.SGD(list(model.parameters())[:1], lr=0.1), DPSGD(C=1, sigma=1),
                    sample_rate=0.1, expected_batch_size=B)


def test_frozen_parameters_are_left_alone():
    model = tiny_cnn()
    model[0].requires_grad_(False)
    frozen = model[0].weight.detach().clone()
    trainable = [p for p in model.parameters() if p.requires_grad]
    engine = DPOptimizer(model, torch.optim.SGD(trainable, lr=0.1), DPSGD(C=1, sigma=1), sample_rate=0.1,
                         expected_batch_size=B)
    engine.step(*batch(5))
    assert torch.equal(model[0].weight, frozen)
    assert engine.method.d == sum(p.numel() for p in trainable)


def test_unknown_method_lists_the_registry():
    with pytest.raises(ValueError, match="registered methods.*dpsgd"):
        make_method("nope")
