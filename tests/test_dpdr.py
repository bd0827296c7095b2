"""DPDR, DIFF and DIFF2: the decomposition's identities, the fast path against materialised orthogonal parts, the
sensitivity on adversarial gradients, the base after step 1, the accountant's history and the calibrator, the
noise-off oracle against one-example-at-a-time loops, micro-batching, resume, and bad input."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dpbook.accounting import epsilon_of_history, sigma_eff
from dpbook.data import load_digits
from dpbook.methods import GaussianNoise, MicroBatch, make_method
from dpbook.methods.base import gradient_sensitivity
from dpbook.methods.diff import DIFF, DIFF2, diff2_history
from dpbook.methods.dpdr import (
    DPDR,
    calibrate_sigma_g,
    difference_sq_norms,
    dpdr_history,
    layer_coefficients,
    orthogonal_sq_norms,
    project,
    unit_directions,
)
from dpbook.models import digits_cnn
from dpbook.optim import DPOptimizer
from dpbook.per_sample import FormedView, NonFiniteGradientError, flat_norms, no_other_values
from dpbook.train import Trainer
from dpbook.tuning import tuning_plan
from tests import reference
from tests.reference import apply_update, flat_norm, per_example_gradients

B = 8.0  # expected batch size of the small tests


SHAPES = [(3, 4), (4,), (2, 2, 3)]  # three "layers" (parameter tensors) for the synthetic tests


def tiny_cnn(seed: int = 0, dtype=torch.float64) -> nn.Module:
    return reference.tiny_cnn(seed, dtype=dtype)  # float64 by default: the oracle compares only the algorithm


def batch(n: int, seed: int, dtype=torch.float64):
    return reference.batch(n, seed, dtype=dtype)


def random_grads(n: int, seed: int = 0, dtype=torch.float64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, *shape, generator=g, dtype=dtype) for shape in SHAPES]


def random_base(seed: int = 1, dtype=torch.float64) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return unit_directions([torch.randn(*shape, generator=g, dtype=dtype) for shape in SHAPES])


def micro_batch(grads) -> MicroBatch:
    n = len(grads[0])
    return MicroBatch(FormedView(grads, flat_norms(grads), no_other_values), torch.arange(n))


def gdr_method(dtype=torch.float64, **hp) -> DPDR:
    """A DPDR bound to parameters shaped like SHAPES, positioned at a GDR step (t = 2 of s = 2), base set."""
    kw = dict(C_perp=1.0, C_alpha=1.0, sigma_perp=0.0, sigma_alpha=0.0, C_g=1.0, sigma_g=0.0, s=2)
    method = DPDR(**{**kw, **hp})
    method.bind([torch.zeros(shape, dtype=dtype) for shape in SHAPES], expected_batch_size=B)
    method.t = 1
    method.b = random_base(dtype=dtype)
    return method


# --------------------------------------------------------------------------------------------------------------
# The decomposition
# --------------------------------------------------------------------------------------------------------------

def test_per_layer_projection_identity():
    g, b = [x[0] for x in random_grads(1)], random_base()
    alpha, g_perp = project(g, b)
    assert alpha.shape == (len(SHAPES),)
    for gl, al, bl, pl in zip(g, alpha, b, g_perp):
        torch.testing.assert_close(al * bl + pl, gl)                   # g^(l) = alpha^(l) b^(l) + g_perp^(l)
        assert abs(float((pl * bl).sum())) < 1e-12                    # g_perp^(l) is orthogonal to b^(l)
        assert float(bl.norm()) == pytest.approx(1.0)
    assert flat_norm(g_perp) <= flat_norm(g)                           # Pythagoras


def test_orthogonal_norm_from_layer_norms_and_coefficients():
    grads, b = random_grads(6), random_base()
    a, sq = layer_coefficients(grads, b)
    naive = torch.tensor([flat_norm(project([g[i] for g in grads], b)[1]) ** 2 for i in range(6)])
    torch.testing.assert_close(orthogonal_sq_norms(a, sq), naive.to(torch.float64))
    torch.testing.assert_close(sq.sum(1).sqrt(), flat_norms(grads))


def test_geometry_orthogonal_part_is_the_shortest_residual():
    """||g_perp|| <= min(||g||, ||g - g~_{t-1}||) ([DPDR-7]) with g~_{t-1} = r_l b^(l)."""
    grads, b = random_grads(50), random_base()
    r = torch.tensor([0.5, 2.0, 7.0], dtype=torch.float64)
    a, sq = layer_coefficients(grads, b)
    perp, diff = orthogonal_sq_norms(a, sq), difference_sq_norms(a, sq, r)
    previous = [rl * bl for rl, bl in zip(r, b)]
    naive_diff = torch.tensor([flat_norm([g[i] - v for g, v in zip(grads, previous)]) ** 2 for i in range(50)])
    torch.testing.assert_close(diff, naive_diff.to(torch.float64))
    assert bool((perp <= sq.sum(1) + 1e-12).all() and (perp <= diff + 1e-12).all())


def naive_gdr_sum(grads, b, C_perp, C_alpha):
    """sum_i Clip(p_i, C_perp) and sum_i Clip(a_i, C_alpha) with every p_i materialised (the test's reference)."""
    P, A = [torch.zeros_like(bl) for bl in b], torch.zeros(len(b), dtype=b[0].dtype)
    for i in range(len(grads[0])):
        a, p = project([g[i] for g in grads], b)
        c, e = min(1.0, C_perp / max(flat_norm(p), 1e-300)), min(1.0, C_alpha / max(float(a.norm()), 1e-300))
        P = [Pl + c * pl for Pl, pl in zip(P, p)]
        A = A + e * a
    return P, A


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-4)])
def test_fast_path_equals_materialised_orthogonal_parts(dtype, tol):
    grads = random_grads(9, dtype=dtype)
    method = gdr_method(dtype, C_perp=4.8, C_alpha=1.5)
    a, sq = layer_coefficients(grads, method.b)
    p_norms, a_norms = orthogonal_sq_norms(a, sq).sqrt(), a.norm(dim=1)
    assert (p_norms > 4.8).any() and (p_norms < 4.8).any() and (a_norms > 1.5).any() and (a_norms < 1.5).any()
    acc = method.start([torch.zeros(s, dtype=dtype) for s in SHAPES])
    for part in (slice(0, 4), slice(4, 9)):  # two micro-batches
        method.accumulate(acc, micro_batch([g[part] for g in grads]))
    b = [x.clone() for x in method.b]
    released = method.release(acc, GaussianNoise(0))
    P, A = naive_gdr_sum(grads, b, 4.8, 1.5)
    for r, Pl, Al, bl in zip(released, P, A, b):
        torch.testing.assert_close(r, Al * bl + Pl, atol=tol, rtol=tol)


def test_noise_off_large_bounds_reconstruct_the_batch_sum():
    """With sigma = 0 and bounds that clip nothing, g~ = alpha~ b + g~_perp is exactly sum_i g_i
    (so g~/B = mean * |B|/B)."""
    grads = random_grads(7)
    method = gdr_method(C_perp=1e6, C_alpha=1e6)
    acc = method.start([torch.zeros(s, dtype=torch.float64) for s in SHAPES])
    method.accumulate(acc, micro_batch(grads))
    for r, g in zip(method.release(acc, GaussianNoise(0)), grads):
        torch.testing.assert_close(r, g.sum(0), atol=1e-12, rtol=0)


# --------------------------------------------------------------------------------------------------------------
# Sensitivity on adversarial gradients
# --------------------------------------------------------------------------------------------------------------

SCALES = st.sampled_from([0.0, 1e-30, 1e-8, 1e-3, 1.0, 1e3, 1e6, 1e9])


@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from([torch.float32, torch.float64]), parallel=SCALES, orthogonal=SCALES,
       sign=st.sampled_from([-1.0, 1.0]), C_perp=st.floats(1e-4, 1e4), C_alpha=st.floats(1e-4, 1e4),
       seed=st.integers(0, 2 ** 16))
def test_contributions_stay_within_C_perp_and_C_alpha(dtype, parallel, orthogonal, sign, C_perp, C_alpha, seed):
    """One example, made nearly parallel to b (the cancellation case) or orthogonal, huge or tiny: its orthogonal
    contribution is within C_perp, its coefficients within C_alpha, its whole contribution within sensitivity()."""
    method = gdr_method(dtype, C_perp=C_perp, C_alpha=C_alpha)
    direction = [x[0].to(torch.float64) for x in random_grads(1, seed=seed)]
    _, noise_dir = project(direction, [b.to(torch.float64) for b in method.b])
    unit = 1 / max(flat_norm(noise_dir), 1e-300)
    g = [(sign * parallel * b.to(torch.float64) + orthogonal * unit * n).to(dtype).unsqueeze(0)
         for b, n in zip(method.b, noise_dir)]
    acc = method.start([torch.zeros(s, dtype=dtype) for s in SHAPES])
    method.accumulate(acc, micro_batch(g))
    P = [s - ca * b for s, ca, b in zip(acc["sum"], acc["ca"], method.b)]
    rel = 1e-5 if dtype == torch.float32 else 1e-9  # float32: rounding of sum c g - (sum c a) b (dpdr docs)
    assert flat_norm([p.to(torch.float64) for p in P]) <= C_perp * (1 + rel)
    assert float(acc["A"].to(torch.float64).norm()) <= C_alpha * (1 + rel)
    bound = gradient_sensitivity(method.releases())  # sqrt(C_perp^2 + C_alpha^2): orthogonal parts
    released = method.release(acc, GaussianNoise(0))
    assert bound == pytest.approx(math.hypot(C_perp, C_alpha))
    assert flat_norm([r.to(torch.float64) for r in released]) <= bound * (1 + rel)


@settings(max_examples=100, deadline=None)
@given(scale=SCALES, offset=SCALES, C_d=st.floats(1e-4, 1e4), seed=st.integers(0, 2 ** 16))
def test_diff_residual_contribution_stays_within_C_d(scale, offset, C_d, seed):
    """DIFF: g_i = g~_{t-1} + small residual (the cancellation case) or anything else: ||Clip(g_i - g~)|| <= C_d."""
    method = DIFF(C_d=C_d, sigma=0.0)
    method.bind([torch.zeros(s) for s in SHAPES], expected_batch_size=B)
    method.t = 1
    base = [x[0] for x in random_grads(1, seed=seed, dtype=torch.float32)]
    method.previous = [scale * x for x in base]
    residual = [x[0] for x in random_grads(1, seed=seed + 1, dtype=torch.float32)]
    g = [(v + offset * r).unsqueeze(0) for v, r in zip(method.previous, residual)]
    acc = method.start([torch.zeros(s) for s in SHAPES])
    method.accumulate(acc, micro_batch(g))
    contribution = [s - acc["c_total"] * v for s, v in zip(acc["sum"], method.previous)]
    assert flat_norm([c.double() for c in contribution]) <= C_d * (1 + 1e-5)


# --------------------------------------------------------------------------------------------------------------
# The base, the noise, the schedule and the accountant
# --------------------------------------------------------------------------------------------------------------

def test_base_is_set_after_step_1_from_the_released_gradient():
    model = tiny_cnn(dtype=torch.float32)
    method = DPDR(C_perp=1.0, C_alpha=1.0, sigma_perp=1.0, sigma_alpha=2.0, C_g=1.0, sigma_g=1.0, s=5)
    opt = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=1.0), method, sample_rate=0.1,
                      expected_batch_size=B)
    assert not method.is_gdr_step() and all(bool((b == 0).all()) for b in method.b)
    before = [p.detach().clone() for p in model.parameters()]
    opt.step(*batch(6, seed=0, dtype=torch.float32))
    released = [(w0 - w1) * B for w0, w1 in zip(before, model.parameters())]  # SGD, lr = 1: w1 = w0 - g~/B
    for b, expected in zip(method.b, unit_directions(released)):
        torch.testing.assert_close(b, expected, atol=1e-5, rtol=1e-4)
        assert float(b.norm()) == pytest.approx(1.0, abs=1e-6)
    assert method.is_gdr_step() and method.step == 2


def test_gdr_noise_is_isotropic_plus_coefficient_noise_along_b():
    """An empty GDR batch releases alpha~ b + N(0, (sigma_perp C_perp)^2 I): its part along each b^(l) has variance
    (sigma_alpha C_alpha)^2 + (sigma_perp C_perp)^2 and its orthogonal part per-coordinate std sigma_perp C_perp."""
    method = gdr_method(sigma_perp=0.7, C_perp=2.0, sigma_alpha=3.0, C_alpha=0.5)
    noise, along, orth = GaussianNoise(0), [], []
    for _ in range(3000):
        acc = method.start([torch.zeros(s, dtype=torch.float64) for s in SHAPES])
        released = method.release(acc, noise)
        alpha, g_perp = project(released, method.b)
        along.append(alpha)
        orth.append(torch.cat([p.flatten() for p in g_perp]))
    along = torch.stack(along)
    assert float(along.std()) == pytest.approx(math.hypot(3.0 * 0.5, 0.7 * 2.0), rel=0.05)
    d, m = sum(math.prod(s) for s in SHAPES), len(SHAPES)
    orth_sq = torch.stack(orth).pow(2).sum(1).mean()  # E||P_perp noise||^2 = (d - m) (sigma_perp C_perp)^2
    assert float(orth_sq) == pytest.approx((d - m) * (0.7 * 2.0) ** 2, rel=0.05)


def run_engine(method, steps, sizes=None, q=0.1, seed=0, dtype=torch.float32, opt="sgd", micro_batch_size=None,
               per_sample="auto"):
    model = tiny_cnn(dtype=dtype)
    optimizer = OPTIMIZERS[opt](model.parameters())
    engine = DPOptimizer(model, optimizer, method, sample_rate=q, expected_batch_size=B,
                         micro_batch_size=micro_batch_size, noise_seed=seed, nonprivate_diagnostics=True,
                         per_sample=per_sample)
    infos = []
    for k, n in enumerate(sizes or [6] * steps):  # released info and the raw-batch statistics, for the assertions
        infos.append({**engine.step(*batch(n, seed=k, dtype=dtype)), **engine.nonprivate_info})
    return model, engine, infos


def test_ledger_history_is_sigma_g_then_sigma_eff_then_sigma_g():
    hp = dict(sigma_perp=0.9, sigma_alpha=2.5, sigma_g=1.1, s=4)
    _, engine, infos = run_engine(DPDR(C_perp=1.0, C_alpha=1.0, C_g=1.0, **hp), steps=9)
    eff = sigma_eff(0.9, 2.5)
    assert engine.ledger.history == [(1.1, 0.1, 1), (eff, 0.1, 3), (1.1, 0.1, 5)]
    assert engine.ledger.history == dpdr_history(sample_rate=0.1, steps=9, **hp)
    assert [i["gdr"] for i in infos] == [0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    gdr = [i for i in infos if i["gdr"]]  # per-sample means: ||p_i|| <= ||g_i|| and ||p_i|| <= ||g_i - g~_{t-1}||
    assert all(i["nonprivate/orthogonal_norm"] <= i["nonprivate/norm"] + 1e-6 for i in gdr)
    assert all(i["nonprivate/orthogonal_norm"] <= i["nonprivate/difference_norm"] + 1e-6 for i in gdr)


def test_s_equal_1_is_dpsgd():
    from dpbook.methods import DPSGD

    m1, e1, _ = run_engine(DPDR(C_perp=1, C_alpha=1, sigma_perp=1, sigma_alpha=1, C_g=0.7, sigma_g=1.3, s=1), 3)
    m2, e2, _ = run_engine(DPSGD(C=0.7, sigma=1.3), 3)  # the same engine and path: bit for bit
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    assert e1.ledger.history == e2.ledger.history == [(1.3, 0.1, 3)]


@pytest.mark.parametrize("s", [1, 50])
def test_calibrator_hits_the_target(s):
    q, T, delta = 256 / 60000, 4700, 1e-5
    sigma_g = calibrate_sigma_g(3.0, sigma_perp=0.81, sigma_alpha=2.0, s=s, sample_rate=q, steps=T, delta=delta)
    history = dpdr_history(sigma_g=sigma_g, sigma_perp=0.81, sigma_alpha=2.0, s=s, sample_rate=q, steps=T)
    assert 3.0 - 1e-4 <= epsilon_of_history(history, delta) <= 3.0
    if s == 1:  # no GDR step: plain DP-SGD's calibration (Table 2: 0.803)
        assert sigma_g == pytest.approx(0.803, abs=1e-3)


def test_calibrator_says_when_the_gdr_steps_alone_exceed_the_target():
    with pytest.raises(ValueError, match=r"unreachable.*GDR steps.*alone"):
        calibrate_sigma_g(1.0, sigma_perp=0.3, sigma_alpha=0.5, s=500, sample_rate=0.01, steps=1000, delta=1e-5)


# --------------------------------------------------------------------------------------------------------------
# Noise-off oracle: the engine equals one example at a time (float64, so that only the algorithm is compared)
# --------------------------------------------------------------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.5),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}
SIZES = (5, 4, 0, 4, 3, 4)  # an empty batch in the GDR phase: its release is 0, so the next base is 0


def clip(v, C):
    n = flat_norm(v)
    return [x * (min(1.0, C / n) if n > 0 else 1.0) for x in v]


def add(total, v):
    return [t + x for t, x in zip(total, v)]


def reference_dpdr(model, optimizer, batches, C_perp, C_alpha, C_g, s):
    params = [p for p in model.parameters() if p.requires_grad]
    b = None
    for t, (x, y) in enumerate(batches, start=1):
        grads = per_example_gradients(model, x, y)
        total = [torch.zeros_like(p) for p in params]
        if 2 <= t <= s:
            A = torch.zeros(len(params), dtype=params[0].dtype)
            for g in grads:
                alpha, g_perp = project(g, b)
                total = add(total, clip(g_perp, C_perp))
                A = A + clip([alpha], C_alpha)[0]
            total = [al * bl + p for al, bl, p in zip(A, b, total)]
        else:
            for g in grads:
                total = add(total, clip(g, C_g))
        if t < s:
            b = unit_directions(total)
        apply_update(model, optimizer, total, B)
    return [p.detach() for p in params]


def reference_diff(model, optimizer, batches, C_d, C_g):
    params = [p for p in model.parameters() if p.requires_grad]
    previous = None
    for t, (x, y) in enumerate(batches, start=1):
        total = [torch.zeros_like(p) for p in params]
        for g in per_example_gradients(model, x, y):
            total = add(total, clip(g, C_g) if t == 1 else clip([gi - v for gi, v in zip(g, previous)], C_d))
        if t > 1:
            total = [s + B * v for s, v in zip(total, previous)]
        previous = [s / B for s in total]
        apply_update(model, optimizer, total, B)
    return [p.detach() for p in params]


def reference_diff2(model, optimizer, batches, C_d, C_g, restart_every):
    params = [p for p in model.parameters() if p.requires_grad]
    v, before = None, None
    for t, (x, y) in enumerate(batches, start=1):
        total = [torch.zeros_like(p) for p in params]
        restart = (t - 1) % restart_every == 0
        old = None if restart else per_example_gradients(before, x, y)
        for i, g in enumerate(per_example_gradients(model, x, y)):
            total = add(total, clip(g, C_g) if restart else clip([a - b for a, b in zip(g, old[i])], C_d))
        if not restart:
            total = [s + B * vi for s, vi in zip(total, v)]
        v = [s / B for s in total]
        before = copy.deepcopy(model)  # w_t, the previous iterate of the next step
        apply_update(model, optimizer, total, B)
    return [p.detach() for p in params]


ORACLES = {
    "dpdr": (dict(C_perp=6.0, C_alpha=1.4, sigma_perp=0.0, sigma_alpha=0.0, C_g=7.0, sigma_g=0.0, s=4),
             lambda m, o, bs: reference_dpdr(m, o, bs, C_perp=6.0, C_alpha=1.4, C_g=7.0, s=4)),
    "diff": (dict(C_d=6.0, C_g=7.0, sigma=0.0),
             lambda m, o, bs: reference_diff(m, o, bs, C_d=6.0, C_g=7.0)),
    "diff2": (dict(C_d=4.0, C_g=6.5, sigma=0.0, restart_every=3),
              lambda m, o, bs: reference_diff2(m, o, bs, C_d=4.0, C_g=6.5, restart_every=3)),
}


@pytest.mark.parametrize("opt, micro_batch_size", [("sgd", None), ("adam", 2)])  # micro-batching is optimizer-blind
@pytest.mark.parametrize("name", sorted(ORACLES))
def test_noise_off_oracle_equals_per_example_loop(name, opt, micro_batch_size):
    hp, reference = ORACLES[name]
    batches = [batch(n, seed=k) for k, n in enumerate(SIZES)]
    ref_model = tiny_cnn()
    expected = reference(ref_model, OPTIMIZERS[opt](ref_model.parameters()), batches)
    got, _, infos = run_engine(make_method(name, **hp), len(SIZES), sizes=SIZES, dtype=torch.float64, opt=opt,
                               micro_batch_size=micro_batch_size)
    for e, g in zip(expected, got.parameters()):
        torch.testing.assert_close(g.detach(), e, atol=1e-5, rtol=0)
    # the oracle exercises both branches of every clip: some examples clipped, some not
    fractions = [i["nonprivate/clipped_fraction"] for i in infos if not math.isnan(i["nonprivate/clipped_fraction"])]
    assert any(0 < f < 1 for f in fractions), fractions
    if name == "dpdr":
        alpha = [i["nonprivate/clipped_fraction_alpha"] for i in infos
                 if i["gdr"] and not math.isnan(i["nonprivate/clipped_fraction_alpha"])]
        assert any(0 < f < 1 for f in alpha), alpha


NOISY = {
    "dpdr": dict(C_perp=0.4, C_alpha=1.0, sigma_perp=0.8, sigma_alpha=2.0, C_g=2.0, sigma_g=1.0, s=3),
    "diff": dict(C_d=0.5, C_g=2.0, sigma=1.0),
    "diff2": dict(C_d=0.05, C_g=2.0, sigma=1.0, restart_every=3, sigma_restart=0.7),
}


def test_diff2_noise_and_ledger_follow_the_split():
    """Empty batches, lr = 1: the update is the noise / B, of std sigma_restart C_g on restarts and sigma C_d on the
    difference steps (added to the carried estimate); each step is recorded at its own multiplier."""
    model = nn.Linear(200, 50)
    method = DIFF2(C_d=0.5, C_g=2.0, sigma=3.0, sigma_restart=1.5, restart_every=2)
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=1.0), method, sample_rate=0.5,
                         expected_batch_size=B)
    empty = (torch.zeros(0, 200), torch.zeros(0, dtype=torch.long))
    stds = []
    for _ in range(2):
        before = model.weight.detach().clone()
        estimate = [v.clone() for v in method.previous]
        engine.step(*empty)
        step = (before - model.weight.detach()) - (estimate[0] if method.t == 2 else 0)
        stds.append(step.std().item())
    assert stds[0] == pytest.approx(1.5 * 2.0 / B, rel=0.05) and stds[1] == pytest.approx(3.0 * 0.5 / B, rel=0.05)
    assert engine.ledger.history == [(1.5, 0.5, 1), (3.0, 0.5, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("protocol, G", [("none", 1), ("rdp", 5), ("lt", 5), ("ps", 5)])
@pytest.mark.parametrize("ratio", [0.5, 1.0, 2.0])
def test_diff2_from_plan_spends_exactly_what_the_plan_charges(protocol, G, ratio):
    plan = tuning_plan(2.0, 1e-5, sample_rate=0.05, steps=200, G=G, protocol=protocol)
    m = DIFF2.from_plan(plan, restart_noise_ratio=ratio, C_d=0.1, restart_every=5)
    assert m.sigma_restart == pytest.approx(ratio * m.sigma, rel=1e-12)
    history = diff2_history(sigma=m.sigma, sigma_restart=m.sigma_restart, restart_every=5, sample_rate=0.05,
                            steps=200)
    assert plan.charge_limit - 1e-3 <= plan.charge(history) <= plan.charge_limit
    assert (m.sigma == plan.sigma) == (ratio == 1.0)


def test_diff2_history_counts_restarts():
    assert diff2_history(sigma=1.0, sigma_restart=2.0, restart_every=None, sample_rate=0.1, steps=7) == [
        (2.0, 0.1, 1), (1.0, 0.1, 6)]
    assert diff2_history(sigma=1.0, sigma_restart=2.0, restart_every=1, sample_rate=0.1, steps=3) == [(2.0, 0.1, 3)]
    assert diff2_history(sigma=1.0, sigma_restart=2.0, restart_every=50, sample_rate=0.1, steps=0) == []


@pytest.mark.parametrize("name", sorted(NOISY))
def test_micro_batching_does_not_change_the_noisy_run(name):
    runs = [run_engine(make_method(name, **NOISY[name]), 4, micro_batch_size=mbs, seed=7)[0] for mbs in (None, 2)]
    for other in runs[1:]:
        for a, b in zip(runs[0].parameters(), other.parameters()):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


# --------------------------------------------------------------------------------------------------------------
# Checkpoint and resume
# --------------------------------------------------------------------------------------------------------------

DPDR_TRAIN = dict(C_perp=0.5, C_alpha=1.0, sigma_perp=1.0, sigma_alpha=2.0, C_g=1.0, sigma_g=1.2, s=8)


def make_trainer(checkpoint=None):
    """192 digits at B = 16: one epoch of T = 12 steps, GDR on steps 2..8; the interruption falls at step 5."""
    torch.manual_seed(123)
    model = digits_cnn()
    x_train, y_train, x_test, y_test = load_digits()
    data = (x_train[:192], y_train[:192], x_test[:64], y_test[:64])
    return Trainer(model, DPDR(**DPDR_TRAIN), torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9), data,
                   expected_batch_size=16, epochs=1, delta=1e-5, seed=0, checkpoint=checkpoint, checkpoint_every=3)


def test_dpdr_interrupted_and_resumed_run_equals_uninterrupted(tmp_path):
    full = make_trainer()
    full_log = full.run()
    ckpt = tmp_path / "run.pt"
    make_trainer(checkpoint=ckpt).run(max_steps=5)  # interrupted inside the GDR phase
    resumed = make_trainer(checkpoint=ckpt)
    resumed_log = resumed.run()
    assert resumed.step == full.step == full.T == 12
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    assert resumed_log.epochs == full_log.epochs and resumed_log.steps == full_log.steps
    hp = {k: DPDR_TRAIN[k] for k in ("sigma_g", "sigma_perp", "sigma_alpha", "s")}
    assert resumed.engine.ledger.history == full.engine.ledger.history == dpdr_history(
        sample_rate=full.sampler.q, steps=full.T, **hp)


@pytest.mark.parametrize("name", ["diff", "diff2"])
def test_state_dict_round_trip_continues_the_run_exactly(name):
    """Carried state (previous estimate, previous iterate) is all in state_dict: a fresh engine loaded mid-run
    continues bit for bit."""
    hp = dict(NOISY[name], restart_every=4) if name == "diff2" else NOISY[name]
    batches = [batch(5, seed=k, dtype=torch.float32) for k in range(6)]

    def engine(model):
        return DPOptimizer(model, torch.optim.Adam(model.parameters(), lr=0.01), make_method(name, **hp),
                           sample_rate=0.1, expected_batch_size=B, noise_seed=3)

    full_model = tiny_cnn(dtype=torch.float32)
    full = engine(full_model)
    for xb in batches:
        full.step(*xb)
    first_model = tiny_cnn(dtype=torch.float32)
    first = engine(first_model)
    for xb in batches[:3]:
        first.step(*xb)
    state, weights = copy.deepcopy(first.state_dict()), copy.deepcopy(first_model.state_dict())
    second_model = tiny_cnn(seed=9, dtype=torch.float32)
    second_model.load_state_dict(weights)
    second = engine(second_model)
    second.load_state_dict(state)
    for xb in batches[3:]:
        second.step(*xb)
    for a, b in zip(full_model.parameters(), second_model.parameters()):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------------------------

GOOD = dict(C_perp=1.0, C_alpha=1.0, sigma_perp=1.0, sigma_alpha=1.0, C_g=1.0, sigma_g=1.0, s=50)


@pytest.mark.parametrize("change, match", [
    (dict(s=0), "s .*integer >= 1"), (dict(s=-3), "s "), (dict(s=2.5), "s "), (dict(s=True), "s "),
    (dict(C_perp=0.0), "C_perp"), (dict(C_alpha=-1.0), "C_alpha"), (dict(C_g=math.nan), "C_g"),
    (dict(C_perp=math.inf), "C_perp"), (dict(sigma_perp=-0.1), "sigma_perp"), (dict(sigma_alpha=-1), "sigma_alpha"),
    (dict(sigma_g=-2.0), "sigma_g"), (dict(sigma_g=math.nan), "sigma_g"),
])
def test_dpdr_rejects_bad_hyperparameters(change, match):
    with pytest.raises(ValueError, match=match):
        DPDR(**{**GOOD, **change})


@pytest.mark.parametrize("cls, kwargs, match", [
    (DIFF, dict(C_d=0.0, sigma=1.0), "C_d"), (DIFF, dict(C_d=1.0, sigma=-1.0), "sigma"),
    (DIFF, dict(C_d=1.0, sigma=1.0, C_g=-1.0), "C_g"), (DIFF2, dict(C_d=-0.1, sigma=1.0), "C_d"),
    (DIFF2, dict(C_d=1.0, sigma=-0.5), "sigma"), (DIFF2, dict(C_d=1.0, sigma=1.0, restart_every=0), "restart_every"),
    (DIFF2, dict(C_d=1.0, sigma=1.0, restart_every=2.0), "restart_every"),
    (DIFF2, dict(C_d=1.0, sigma=1.0, sigma_restart=-1.0), "sigma_restart"),
])
def test_diff_methods_reject_bad_hyperparameters(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(target_epsilon=0.0), "target_epsilon"), (dict(s=0), "s "), (dict(sigma_perp=-1.0), "sigma"),
    (dict(steps=0), "steps"), (dict(sample_rate=1.5), "sample_rate"), (dict(delta=0.0), "delta"),
])
def test_calibrator_rejects_bad_input(kwargs, match):
    args = dict(target_epsilon=3.0, sigma_perp=0.8, sigma_alpha=2.0, s=50, sample_rate=0.01, steps=1000, delta=1e-5)
    with pytest.raises(ValueError, match=match):
        calibrate_sigma_g(**{**args, **kwargs})


def test_methods_are_registered():
    assert type(make_method("dpdr", **GOOD)) is DPDR
    assert type(make_method("diff", C_d=1.0, sigma=1.0)) is DIFF
    assert type(make_method("diff2", C_d=1.0, sigma=1.0)) is DIFF2


@pytest.mark.parametrize("name", ["diff2", "psasc-momentum"])
def test_a_combination_that_overflows_is_named_with_its_fix(name):
    """The gradients at both iterates are finite (the engine checks those), but their difference (DIFF2) or
    weighted sum (DP-PSASC*'s inner momentum) overflows float32: a NonFiniteGradientError says so and what to do."""
    model = nn.Linear(3, 2)
    method = make_method(name, C_d=1.0, sigma=1.0) if name == "diff2" else \
        make_method(name, C=1.0, r=0.01, s=0.9, sigma=1.0, K0=2, gamma0=0.5, gamma1=1.0)
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), method, sample_rate=0.5,
                         expected_batch_size=B, per_sample="vmap")
    x, y = torch.randn(4, 3), torch.randint(0, 2, (4,))
    engine.step(x, y)  # DIFF2's restart, or DP-PSASC*'s first iterate stored
    huge = [torch.full((4, *p.shape), 3e38) for p in model.parameters()]  # x 2 (or x 1.5) is past float32's max
    sign = -1 if name == "diff2" else 1
    mb = MicroBatch(FormedView(huge, flat_norms(huge), lambda params: [sign * g for g in huge]), torch.arange(4))
    with pytest.raises(NonFiniteGradientError, match="overflowed.*rescale the loss"):
        method.accumulate(method.start(list(model.parameters())), mb)
