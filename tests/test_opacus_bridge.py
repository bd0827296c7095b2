"""A dpbook method inside an Opacus script (dpbook.opacus_bridge): the step is dpbook's, the accountant Opacus's."""

from __future__ import annotations

import pytest
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpbook.methods import make_method
from dpbook.opacus_bridge import with_method
from dpbook.optim import DPOptimizer

#: What Opacus says of every such script: its own noise is not in secure mode (the method's replaces it anyway), and
#: its hooks fire on a first layer whose input needs no gradient. Neither is an accountant's warning.
pytestmark = [pytest.mark.filterwarnings("ignore:Secure RNG turned off:UserWarning"),
              pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")]

N, BATCH = 96, 24  # q = 1/4: Opacus's expected batch size int(qN) = 24 exactly


def _data():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(N, 6, generator=generator)
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _private(method, max_grad_norm=1.0, **options):
    """An Opacus script's set-up (make_private), then the one line that hands the step to ``method``."""
    model = _model()
    x, y = _data()
    engine = PrivacyEngine(accountant="rdp")
    module, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        data_loader=DataLoader(TensorDataset(x, y), batch_size=BATCH), noise_multiplier=1.0,
        max_grad_norm=max_grad_norm, **options)
    return engine, module, with_method(optimizer, method), loader


@pytest.mark.parametrize("name, hyperparameters", [
    ("dcsgd-e", dict(sigma=1.5)),
    ("psac", dict(C=0.5, r=1e-3, sigma=1.2)),
    ("dpdr", dict(C_g=1.0, C_perp=1.0, C_alpha=0.3, sigma_g=1.2, sigma_perp=1.2, sigma_alpha=3.0, s=3)),
])
def test_each_step_is_dpbooks_and_the_engine_accounts_for_it(name, hyperparameters):
    """Three steps on Opacus's Poisson batches give dpbook's DPOptimizer's parameters on the same batches (the same
    per-sample gradients, the method's releases with the same noise, its thresholds moving), and Opacus's accountant
    records each step's noise multiplier, so that its epsilon is dpbook's."""
    engine, module, optimizer, loader = _private(make_method(name, **hyperparameters))
    reference_model = _model()
    reference = DPOptimizer(reference_model, torch.optim.SGD(reference_model.parameters(), lr=0.5),
                            make_method(name, **hyperparameters), sample_rate=1 / 4, expected_batch_size=BATCH,
                            per_sample="vmap")
    batches = iter(loader)
    for _ in range(3):
        x, y = next(batches)
        optimizer.zero_grad()
        nn.functional.cross_entropy(module(x), y).backward()
        optimizer.step()
        assert reference.step(x, y) == pytest.approx(optimizer.info, rel=1e-5)
    for ours, theirs in zip(reference_model.parameters(), module.parameters()):
        torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-6)
    assert [(s, q) for s, q, _ in engine.accountant.history] == [(s, q) for s, q, _ in reference.ledger.history]
    assert engine.get_epsilon(1e-5) == pytest.approx(reference.epsilon(1e-5), rel=1e-9)


def test_an_empty_batch_is_a_step_that_adds_noise():
    engine, module, optimizer, _ = _private(make_method("dpsgd", C=1.0, sigma=1.0))
    before = [p.detach().clone() for p in module.parameters()]
    optimizer.zero_grad()
    nn.functional.cross_entropy(module(torch.zeros(0, 6)), torch.zeros(0, dtype=torch.long)).backward()
    optimizer.step()
    assert all(not torch.equal(b, p) for b, p in zip(before, module.parameters()))
    assert len(engine.accountant.history) == 1


@pytest.mark.parametrize("name, hyperparameters, message", [
    ("diff2", dict(C_g=1.0, C_d=0.5, sigma=1.0, restart_every=2), "at other parameter values"),
])
def test_a_method_that_needs_a_second_pass_is_refused_with_why(name, hyperparameters, message):
    _, module, optimizer, loader = _private(make_method(name, **hyperparameters))
    x, y = next(iter(loader))
    optimizer.zero_grad()
    nn.functional.cross_entropy(module(x), y).backward()
    optimizer.step()  # DIFF2's first step is a restart on the gradient alone; the next needs the previous iterate
    optimizer.zero_grad()
    nn.functional.cross_entropy(module(x), y).backward()
    with pytest.raises(ValueError, match=message):
        optimizer.step()


def test_what_with_method_cannot_take_is_named():
    with pytest.raises(ValueError, match="full batch with each example's index"):
        _private(make_method("psasc-momentum-gd", C=1.0, r=1e-3, s=0.8, sigma=1.0, gamma=0.5))
    with pytest.raises(ValueError, match="takes the DPOptimizer of make_private"):  # per-layer clipping's
        _private(make_method("dpsgd", C=1.0, sigma=1.0), clipping="per_layer", max_grad_norm=[1.0] * 4)
    used = make_method("dpsgd", C=1.0, sigma=1.0)
    optimizer = _private(used)[2]
    with pytest.raises(ValueError, match="takes the DPOptimizer of make_private"):  # already bridged
        with_method(optimizer, make_method("dpsgd", C=1.0, sigma=1.0))
