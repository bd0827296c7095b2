"""Accounting: Opacus golden values, Google's dp_accounting as an independent accountant, noise calibration,
the ledger, the noise splits, and every bad-input error."""

from __future__ import annotations

import io
import math
import warnings

import dp_accounting
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from opacus.accountants import RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from dpbook import accounting
from dpbook.accounting import (
    PrivacyLedger,
    epsilon,
    epsilon_of_history,
    noise_multiplier,
    sigma_delta,
    sigma_eff,
    sigma_T,
)

MNIST_Q = 256 / 60000  # B = 256 on MNIST's 60,000 training images
MNIST_T = 20 * math.ceil(60000 / 256)  # 20 epochs = 4700 steps


def google_epsilon(history, delta, accountant):
    """Epsilon from dp_accounting (Google): RDP or PLD over the same Poisson-subsampled Gaussian history."""
    events = [
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
        for sigma, q, steps in history
    ]
    acc = dp_accounting.rdp.RdpAccountant() if accountant == "rdp" else dp_accounting.pld.PLDAccountant()
    acc.compose(dp_accounting.ComposedDpEvent(events))
    return acc.get_epsilon(delta)


# ---------------------------------------------------------------------------------------------------------------
# Golden values (Opacus's own tests)
# ---------------------------------------------------------------------------------------------------------------

def test_golden_rdp():
    assert epsilon(1.5, 0.04, 2250, 1e-5) == pytest.approx(7.3291, abs=1e-3)


def test_golden_prv():
    # Opacus's PRV works to eps_error = 0.01 and returns its upper estimate (measured here: 6.7791).
    assert epsilon(1.5, 0.04, 2250, 1e-5, accountant="prv") == pytest.approx(6.7774, abs=0.02)


# ---------------------------------------------------------------------------------------------------------------
# Cross-checks against Google's dp_accounting
# ---------------------------------------------------------------------------------------------------------------
# (sigma, q, steps, delta): sigma in [0.6, 5], q in [0.001, 0.1], steps in [300, 10000], delta 1e-5 / 1e-6, all with
# epsilon between about 0.9 and 14, where the optimal RDP order lies inside Opacus's grid (< 63).
SETTINGS = [
    (0.6, 0.001, 10000, 1e-5),
    (0.7, 0.02, 300, 1e-5),
    (0.8, 0.01, 1000, 1e-6),
    (1.0, 0.004, 5000, 1e-5),
    (1.5, 0.04, 2250, 1e-5),
    (1.5, 0.1, 1000, 1e-5),
    (2.5, 0.1, 1000, 1e-6),
    (3.0, 0.05, 5000, 1e-6),
    (5.0, 0.04, 1000, 1e-5),
    (5.0, 0.01, 10000, 1e-6),
]
HISTORIES = [
    # DPDR on MNIST at epsilon 3 (Table 2): 1 DP-SGD step, 49 decomposition steps at sigma_eff, then DP-SGD.
    [(0.803, MNIST_Q, 1), (sigma_eff(0.81, 2.0), MNIST_Q, 49), (0.803, MNIST_Q, MNIST_T - 50)],
    [(1.2, 0.01, 500), (sigma_eff(1.1, 3.0), 0.01, 200), (0.9, 0.005, 1000)],
    [(2.0, 0.05, 100), (0.8, 0.01, 2000), (4.0, 0.1, 300)],
]

# RDP vs RDP. Both convert with Balle et al. (2020) Thm. 21 over nearly the same orders, and agree to ~1e-13 where
# the optimal order is an integer. At fractional orders dp_accounting 0.6 sums the absolute values of the series
# for log A_alpha (an upper bound), while Opacus sums it with its signs (exact: it matches numerical integration of
# A_alpha to 1e-10), so dp_accounting is higher. Measured on SETTINGS and HISTORIES: 0 <= (theirs - ours) / theirs
# <= 4.04e-3, the largest at (1.5, 0.1, 1000); tolerance 5e-3. (Outside this regime they differ more: where the
# optimal order passes 63, dp_accounting's extra orders 128...1024 make it much lower for epsilon below ~0.3.)
RDP_REL_TOL = 5e-3


@pytest.mark.parametrize("sigma, q, steps, delta", SETTINGS)
def test_rdp_matches_dp_accounting(sigma, q, steps, delta):
    ours = epsilon(sigma, q, steps, delta)
    theirs = google_epsilon([(sigma, q, steps)], delta, "rdp")
    assert ours <= theirs * (1 + 1e-9)
    assert (theirs - ours) / theirs <= RDP_REL_TOL


@pytest.mark.parametrize("history", HISTORIES)
def test_heterogeneous_rdp_matches_dp_accounting(history):
    ours = epsilon_of_history(history, 1e-5)
    theirs = google_epsilon(history, 1e-5, "rdp")
    assert ours <= theirs * (1 + 1e-9)
    assert (theirs - ours) / theirs <= RDP_REL_TOL


# PRV vs PLD. Opacus's PRV returns the upper end of its estimate, about eps_error = 0.01 above the point estimate;
# dp_accounting's PLD (pessimistic, discretisation 1e-4) is close to exact. Measured on these settings and the
# heterogeneous history: ours - theirs in [+0.0099, +0.0106] (on a wider grid up to +0.0175 at epsilon ~ 460).
# Tolerance 0.02 absolute. (The PLD takes up to ~1 s per setting, so only a subset runs here.)
PRV_ABS_TOL = 0.02


@pytest.mark.parametrize("sigma, q, steps, delta", [SETTINGS[i] for i in (2, 6, 7, 8, 9)])
def test_prv_matches_dp_accounting_pld(sigma, q, steps, delta):
    ours = epsilon(sigma, q, steps, delta, accountant="prv")
    theirs = google_epsilon([(sigma, q, steps)], delta, "pld")
    assert abs(ours - theirs) <= PRV_ABS_TOL


def test_heterogeneous_prv_matches_dp_accounting_pld():
    history = [(1.0, 0.01, 300), (3.0, 0.05, 300)]  # short: the PLD takes ~1 s on HISTORIES
    ours = epsilon_of_history(history, 1e-5, accountant="prv")
    assert abs(ours - google_epsilon(history, 1e-5, "pld")) <= PRV_ABS_TOL


# ---------------------------------------------------------------------------------------------------------------
# Epsilon: conventions and composition
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_zero_noise_is_infinite_epsilon_and_zero_steps_free(accountant):
    assert epsilon(0.0, 0.04, 1, 1e-5, accountant=accountant) == math.inf
    assert epsilon_of_history([(1.5, 0.04, 2250), (0.0, 0.04, 1)], 1e-5, accountant=accountant) == math.inf
    assert epsilon(1.5, 0.04, 0, 1e-5, accountant=accountant) == 0.0
    assert epsilon(0.0, 0.04, 0, 1e-5, accountant=accountant) == 0.0  # nothing was released
    assert epsilon_of_history([], 1e-5, accountant=accountant) == 0.0
    # infinite noise releases nothing: the segment costs nothing
    with_inf = epsilon_of_history([(1.5, 0.04, 100), (math.inf, 0.04, 50)], 1e-5, accountant=accountant)
    assert with_inf == epsilon(1.5, 0.04, 100, 1e-5, accountant=accountant)


def test_full_batch_needs_no_sampling_and_warns_nothing():
    # q = 1 is the plain Gaussian mechanism: RDP_alpha = T alpha / (2 sigma^2), in closed form.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rdp = epsilon(10.0, 1.0, 10, 1e-5)
        prv = epsilon(10.0, 1.0, 10, 1e-5, accountant="prv")
    assert 0 < prv < rdp < 2


def test_single_segment_history_equals_epsilon():
    assert epsilon_of_history([(1.5, 0.04, 2250)], 1e-5) == epsilon(1.5, 0.04, 2250, 1e-5)
    assert epsilon_of_history(((1.5, 0.04, 200),), 1e-5, "prv") == epsilon(1.5, 0.04, 200, 1e-5, "prv")


def test_split_segments_compose_like_one():
    merged = [(1.5, 0.04, 500)]
    split = [(1.5, 0.04, 200), (1.5, 0.04, 300)]
    # RDP is additive over steps, so the split is exact up to rounding.
    assert epsilon_of_history(split, 1e-5) == pytest.approx(epsilon_of_history(merged, 1e-5), rel=1e-12)
    # PRV discretises each segment, so they agree to its eps_error.
    assert epsilon_of_history(split, 1e-5, "prv") == pytest.approx(epsilon_of_history(merged, 1e-5, "prv"), abs=0.02)


def test_composition_is_tighter_than_adding_epsilons():
    history = HISTORIES[2]
    total = epsilon_of_history(history, 1e-5)
    assert max(epsilon(*seg, 1e-5) for seg in history) < total < sum(epsilon(*seg, 1e-5) for seg in history)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_epsilon_is_monotone(accountant):
    by_steps = [epsilon(1.0, 0.01, t, 1e-5, accountant=accountant) for t in (10, 100, 1000)]
    by_sigma = [epsilon(s, 0.01, 1000, 1e-5, accountant=accountant) for s in (0.7, 1.5, 3.0)]
    by_delta = [epsilon(1.0, 0.01, 1000, d, accountant=accountant) for d in (1e-3, 1e-7)]
    by_delta.insert(1, by_steps[-1])  # delta = 1e-5
    assert by_steps == sorted(by_steps) and len(set(by_steps)) == len(by_steps)
    assert by_sigma == sorted(by_sigma, reverse=True) and len(set(by_sigma)) == len(by_sigma)
    assert by_delta == sorted(by_delta) and len(set(by_delta)) == len(by_delta)


def test_history_equals_opacus_accountant():
    history = HISTORIES[1]
    acc = RDPAccountant()
    acc.history = list(history)
    assert epsilon_of_history(history, 1e-5) == acc.get_epsilon(delta=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# RDP orders that contain the optimum (small delta, large noise)
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("q, sigma", [(0.004, 0.7), (0.01, 3.0), (0.1, 20.0), (0.3, 1.2)])
@pytest.mark.parametrize("alpha", [2, 17, 63])
def test_vectorised_log_a_equals_opacus_loop(q, sigma, alpha):
    """The integer-order A_alpha used above Opacus's grid is Opacus's formula, summed in log space at once."""
    from opacus.accountants.analysis.rdp import _compute_log_a_for_int_alpha
    assert accounting._log_a_int(q, sigma, alpha) == pytest.approx(_compute_log_a_for_int_alpha(q, sigma, alpha),
                                                                  rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("q, sigma, alpha", [(0.004, 3.0, 200), (0.01, 20.0, 1500), (0.1, 5.0, 4000)])
def test_high_orders_equal_google_rdp(q, sigma, alpha):
    """Above alpha = 1030 Opacus's binomial coefficient overflows; Google's log-space sum does not."""
    from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_poisson_subsampled_gaussian
    google = _compute_rdp_poisson_subsampled_gaussian(q, sigma, [alpha])[0]
    ours = accounting._rdp_of_one_step(sigma, q, (alpha,))[0]
    assert ours == pytest.approx(google, rel=1e-9)


@pytest.mark.parametrize("history, delta", [
    ([(3.0, 256 / 60000, 2344)], 1e-17),     # LT's per-run delta on MNIST: optimum ~ 200
    ([(20.0, 0.01, 1000)], 1e-5),            # a calibration's first probe: optimum ~ 1000
    ([(1e4, 0.01, 1000)], 1e-5),             # far past every chunk but the last
])
def test_grid_grows_until_the_optimum_is_interior(history, delta):
    opt = accounting.rdp_optimum(history, delta)
    assert opt.edge is None and opt.order > 63
    # a valid bound at every order: the optimum is below what Opacus's grid gives, and below every order's value
    acc = RDPAccountant()
    acc.history = list(history)
    with pytest.warns(UserWarning, match="Optimal order is the largest alpha"):
        opacus_eps = acc.get_epsilon(delta)
    assert opt.epsilon < opacus_eps
    assert epsilon_of_history(history, delta) == opt.epsilon


def _random_histories(n: int, seed: int = 0) -> list[tuple[list, float]]:
    """Histories of one to three segments over the ranges the library meets (sigma 0.2-50, q 1e-4-1, T 1-1e5) at
    delta 1e-17-1e-2; seeded, so that a failure names the same case every time."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        history = [(float(10 ** rng.uniform(-0.7, 1.7)), float(min(1.0, 10 ** rng.uniform(-4, 0.3))),
                    int(10 ** rng.uniform(0, 5))) for _ in range(rng.integers(1, 4))]
        cases.append((history, float(10 ** rng.uniform(-17, -2))))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("history, delta", [
    *_random_histories(40),
    ([(0.5, 1.0, 1000)], 1e-5),               # the optimum below 1.1
    ([(1.5, 0.04, 2250)], 1e-5),              # the optimum among the fractional orders (3.9)
    ([(0.9, 1.0, 1)], 0.1),                   # one full-batch step, large delta: the optimum near 2
])
def test_fractional_orders_skipped_only_where_they_cannot_be_the_minimum(history, delta):
    """Every order of Opacus's grid (and the low orders) evaluated, against the grid whose fractional orders are
    evaluated only where a bound cannot rule them out: the same minimum and order, bit for bit."""
    for orders in (accounting.OPACUS_ORDERS, accounting.LOW_ORDERS + accounting.OPACUS_ORDERS):
        full = accounting.epsilon_of_rdp(accounting.rdp_at_orders(history, orders), orders, delta)
        curve = accounting._LazyCurve(history, orders, {})
        fast, best = accounting._pruned_minimum(curve, delta, accounting._Identity())
        assert best == int(np.nanargmin(full)) and fast[best] == full[best]


def test_the_fractional_orders_are_mostly_skipped_at_a_tuning_protocols_delta():
    curve = accounting._LazyCurve([(3.0, 256 / 60000, 2344)], accounting.OPACUS_ORDERS, {})  # optimum ~ 200
    accounting._pruned_minimum(curve, 1e-17, accounting._Identity())
    assert not [a for a in curve.known if not float(a).is_integer()]  # no fractional order evaluated


def test_the_grids_ends_are_refused_not_hidden():
    with pytest.raises(ValueError, match=r"optimal at the largest order evaluated \(alpha = 65536\).*prv"):
        epsilon(1e6, 0.01, 10, 1e-5)
    with pytest.raises(ValueError, match=r"optimal at the smallest order evaluated \(alpha = 1.01\).*more noise"):
        epsilon(0.05, 0.5, 10_000, 1e-5)


def test_low_orders_extend_below_opacus():
    # little noise, many full-batch steps: the best order, 1 + (2 sigma^2 ln(1/delta) / T)^(1/2) ~ 1.08, is below
    # Opacus's smallest (1.1)
    opt = accounting.rdp_optimum([(0.5, 1.0, 1000)], 1e-5)
    assert opt.edge is None and opt.order == 1.08


def test_no_accountant_warning_anywhere(recwarn):
    """The cases that made Opacus warn (LT's delta_1, big probes, PRV's domain at tiny delta) warn no more."""
    noise_multiplier(0.3333, 1e-17, 256 / 60000, 2344)
    epsilon(50.0, 0.01, 100, 1e-5, accountant="prv")
    assert not [w for w in recwarn if "Optimal order" in str(w.message)]


# ---------------------------------------------------------------------------------------------------------------
# Noise calibration
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target, delta, q, steps", [
    (1.0, 1e-5, MNIST_Q, MNIST_T),
    (8.0, 1e-6, 0.01, 2000),
    (15.0, 1e-5, 0.005, 2000),
])
def test_noise_multiplier_round_trip_rdp(target, delta, q, steps):
    sigma = noise_multiplier(target, delta, q, steps)
    assert target - 0.01 <= epsilon(sigma, q, steps, delta) <= target


@pytest.mark.filterwarnings("ignore:Optimal order is the:UserWarning")  # Opacus's own probes, not ours
@pytest.mark.parametrize("target, steps", [(3.0, MNIST_T), (0.5, 100)])
def test_noise_multiplier_equals_opacus(target, steps):
    # the same sigma as Opacus's get_noise_multiplier (make_private_with_epsilon), digit for digit
    ours = noise_multiplier(target, 1e-5, MNIST_Q, steps)
    assert ours == get_noise_multiplier(target_epsilon=target, target_delta=1e-5, sample_rate=MNIST_Q, steps=steps)


def test_noise_multiplier_round_trip_prv():
    sigma = noise_multiplier(2.0, 1e-5, 0.01, 300, accountant="prv")
    assert 2.0 - 0.01 <= epsilon(sigma, 0.01, 300, 1e-5, accountant="prv") <= 2.0
    # PRV is tighter than RDP, so it needs less noise for the same target
    assert sigma < noise_multiplier(2.0, 1e-5, 0.01, 300)


def test_noise_multiplier_tolerance():
    sigma = noise_multiplier(3.0, 1e-5, 0.01, 1000, epsilon_tolerance=1e-4)
    assert 3.0 - 1e-4 <= epsilon(sigma, 0.01, 1000, 1e-5) <= 3.0


def test_noise_multiplier_is_monotone():
    def calibrate(target, steps):
        return noise_multiplier(target, 1e-5, 0.01, steps, epsilon_tolerance=0.05)

    by_target = [calibrate(e, 1000) for e in (1.0, 4.0, 8.0)]
    by_steps = [calibrate(4.0, 100), by_target[1], calibrate(4.0, 3000)]
    assert by_target == sorted(by_target, reverse=True)
    assert by_steps == sorted(by_steps)


def test_dpdr_table2_sigma_g():
    # DPDR Table 2, MNIST (B = 256, 20 epochs, delta = 1e-5, RDP): sigma_g = 0.803 at epsilon 3, 0.59 at epsilon 8.
    assert round(noise_multiplier(3, 1e-5, MNIST_Q, MNIST_T), 3) == 0.803
    assert round(noise_multiplier(8, 1e-5, MNIST_Q, MNIST_T), 2) == 0.59


def test_noise_multiplier_large_noise_is_found():
    # more than the initial bracket (20): the upper end doubles
    sigma = noise_multiplier(0.5, 1e-5, 1.0, 10)
    assert sigma > 20
    assert 0.49 <= epsilon(sigma, 1.0, 10, 1e-5) <= 0.5


@pytest.mark.parametrize("accountant, target, steps", [("rdp", 1e-3, 10 ** 9), ("prv", 0.005, 10)])
def test_unreachable_target(accountant, target, steps):
    # RDP, full batch: a billion steps at sigma = 1e6 still cost epsilon ~ 0.2
    with pytest.raises(ValueError, match=r"target_epsilon=.* is unreachable .*larger target_epsilon, fewer steps "
                                         r"or a smaller sample_rate"):
        noise_multiplier(target, 1e-10, 1.0, steps, accountant=accountant)


# ---------------------------------------------------------------------------------------------------------------
# The ledger
# ---------------------------------------------------------------------------------------------------------------

def test_ledger_merges_equal_consecutive_steps():
    ledger = PrivacyLedger()
    assert ledger.history == [] and ledger.steps == 0 and ledger.epsilon(1e-5) == 0.0
    for _ in range(3):
        ledger.record(1.0, 0.01)
    ledger.record(1.0, 0.02)
    ledger.record(1.0, 0.02, steps=4)
    ledger.record(2.0, 0.02, steps=0)  # nothing recorded
    ledger.record(1.0, 0.01)  # equal to an earlier segment, but not the last one: a new segment
    assert ledger.history == [(1.0, 0.01, 3), (1.0, 0.02, 5), (1.0, 0.01, 1)]
    assert ledger.steps == 9


def test_ledger_history_matches_opacus_step():
    rng = np.random.default_rng(0)
    ledger, acc = PrivacyLedger(), RDPAccountant()
    for _ in range(100):
        sigma, q = float(rng.choice([0.8, 1.0])), float(rng.choice([0.01, 0.01, 0.01, 0.02]))
        ledger.record(sigma, q)
        acc.step(noise_multiplier=sigma, sample_rate=q)
    assert ledger.history == acc.history


def test_ledger_epsilon_equals_epsilon_of_history():
    ledger = PrivacyLedger(HISTORIES[1])
    assert ledger.history == HISTORIES[1] and ledger.steps == 1700
    assert ledger.epsilon(1e-5) == epsilon_of_history(HISTORIES[1], 1e-5)
    short = PrivacyLedger([(1.0, 0.01, 200), (2.0, 0.02, 100)])
    assert short.epsilon(1e-6, accountant="prv") == epsilon_of_history(short.history, 1e-6, accountant="prv")


def test_ledger_stores_python_numbers():
    ledger = PrivacyLedger()
    ledger.record(torch.tensor(1.5), np.float32(0.25), steps=np.int64(2))
    (sigma, q, steps), = ledger.history
    assert (type(sigma), type(q), type(steps)) == (float, float, int)
    assert (sigma, q, steps) == (1.5, 0.25, 2)


def test_ledger_state_dict_round_trip_through_torch_checkpoint():
    ledger = PrivacyLedger(HISTORIES[1])
    buffer = io.BytesIO()
    torch.save({"ledger": ledger.state_dict()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["ledger"]
    restored = PrivacyLedger()
    restored.load_state_dict(state)
    assert restored.history == ledger.history
    assert restored.epsilon(1e-5) == ledger.epsilon(1e-5)
    assert PrivacyLedger.from_state_dict(state).history == ledger.history
    restored.record(*HISTORIES[1][-1][:2])  # merges with the restored last segment
    assert restored.steps == ledger.steps + 1


def test_ledger_empty_state_dict_round_trip():
    state = PrivacyLedger().state_dict()
    assert state == {"history": []}
    ledger = PrivacyLedger([(1.0, 0.1, 3)])
    ledger.load_state_dict(state)
    assert ledger.history == []


def test_ledger_zero_noise_is_infinite_epsilon():
    ledger = PrivacyLedger()
    ledger.record(1.0, 0.01, steps=100)
    ledger.record(0.0, 0.01)
    assert ledger.epsilon(1e-5) == math.inf
    assert ledger.epsilon(1e-5, accountant="prv") == math.inf


def test_ledger_rejects_bad_input():
    ledger = PrivacyLedger()
    with pytest.raises(ValueError, match="noise_multiplier must be a number >= 0"):
        ledger.record(-1.0, 0.01)
    with pytest.raises(ValueError, match=r"sample_rate must be in \(0, 1\]"):
        ledger.record(1.0, 0.0)
    with pytest.raises(ValueError, match="steps must be an integer >= 0"):
        ledger.record(1.0, 0.01, steps=-1)
    assert ledger.history == []
    with pytest.raises(ValueError, match=r"history\[0\] sample_rate must be in \(0, 1\]"):
        ledger.load_state_dict({"history": [[1.0, 2.0, 3]]})
    with pytest.raises(ValueError, match="state_dict must be a dict with a 'history' key"):
        ledger.load_state_dict({"segments": []})


# ---------------------------------------------------------------------------------------------------------------
# Noise splits
# ---------------------------------------------------------------------------------------------------------------

def test_sigma_T_hand_computed():
    assert sigma_T(4.0, 5.0) == pytest.approx(20 / 3, rel=1e-14)  # (1/16 - 1/25)^(-1/2) = (9/400)^(-1/2)
    assert sigma_T(3.0, 5.0) == pytest.approx(15 / 4, rel=1e-14)  # (1/9 - 1/25)^(-1/2) = (16/225)^(-1/2)
    # values of sigma_T derived from the DC-SGD paper's Eq. (5)
    assert sigma_T(1.0, 5.0) == pytest.approx(1.0206, abs=5e-5)
    assert sigma_T(0.9, 1.0) == pytest.approx(2.0647, abs=5e-5)
    assert sigma_T(2.0, 8.0) == pytest.approx(2.0656, abs=5e-5)
    assert sigma_T(1.5, math.inf) == 1.5  # no histogram


def test_sigma_delta_hand_computed():
    assert sigma_delta(3.0, 2.5) == pytest.approx(15 / 4, rel=1e-14)  # (1/9 - 1/25)^(-1/2)
    assert sigma_delta(1.0, 1.0) == pytest.approx(2 / math.sqrt(3), rel=1e-14)  # (1 - 1/4)^(-1/2)
    # sigma_b = B/20 = 12.8 (B = 256) raises the noise by under 2% even at sigma = 4.5 (derived)
    assert 1 < sigma_delta(4.5, 12.8) / 4.5 < 1.02


def test_sigma_eff_hand_computed():
    assert sigma_eff(3.0, 4.0) == pytest.approx(2.4, rel=1e-14)  # (1/9 + 1/16)^(-1/2) = (25/144)^(-1/2)
    assert sigma_eff(2.0) == 2.0
    assert sigma_eff(2.0, 2.0) == pytest.approx(math.sqrt(2), rel=1e-14)
    assert sigma_eff(1.0, 1.0, 1.0, 1.0) == pytest.approx(0.5, rel=1e-14)
    assert sigma_eff(0.0, 1.0) == 0.0  # a release without noise
    assert sigma_eff(math.inf, 2.0) == 2.0  # a release of nothing
    assert sigma_eff(math.inf) == math.inf
    # DPDR Table 2, MNIST at epsilon 3: sigma_perp = 0.81, sigma_alpha = 2.0
    assert sigma_eff(0.81, 2.0) == pytest.approx(0.7508, abs=5e-5)


sigmas = st.floats(min_value=0.05, max_value=50.0)
factors = st.floats(min_value=1.001, max_value=100.0)


@settings(max_examples=200, deadline=None)
@given(sigma=sigmas, factor=factors)
def test_splits_are_inverted_by_sigma_eff(sigma, factor):
    side = sigma * factor
    main = sigma_T(sigma, side)
    assert main > sigma
    assert sigma_eff(main, side) == pytest.approx(sigma, rel=1e-9)
    assert sigma_eff(sigma_delta(sigma, side / 2), side) == pytest.approx(sigma, rel=1e-9)
    assert sigma_delta(sigma, side / 2) == pytest.approx(main, rel=1e-12)  # the same split, sigma_b = sigma_H / 2


@settings(max_examples=100, deadline=None)
@given(sigma=sigmas, a=factors, b=factors)
def test_sigma_T_decreases_with_sigma_H(sigma, a, b):
    lo, hi = sorted((a, b))
    assert sigma_T(sigma, sigma * hi) <= sigma_T(sigma, sigma * lo) * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(values=st.lists(sigmas, min_size=1, max_size=5))
def test_sigma_eff_is_below_each_sigma(values):
    assert sigma_eff(*values) <= min(values) * (1 + 1e-12)
    assert sigma_eff(*values) == pytest.approx(sigma_eff(*reversed(values)), rel=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda: sigma_T(1.0, 1.0), r"sigma_H must exceed sigma .*sigma_H=1.0, sigma=1.0"),
    (lambda: sigma_T(2.0, 1.0), r"sigma_H must exceed sigma"),
    (lambda: sigma_T(1.0, math.nan), r"sigma_H must be a real number, not NaN"),
    (lambda: sigma_T(0.0, 5.0), r"sigma must be a finite number > 0, got 0.0"),
    (lambda: sigma_T(-1.0, 5.0), r"sigma must be a finite number > 0"),
    (lambda: sigma_delta(3.0, 1.5), r"sigma_b: 2 \* sigma_b must exceed sigma .*sigma_b=1.5, sigma=3.0"),
    (lambda: sigma_delta(math.inf, 1.5), r"sigma must be a finite number > 0, got inf"),
    (lambda: sigma_eff(), r"sigma_eff needs at least one noise multiplier"),
    (lambda: sigma_eff(1.0, -1.0), r"sigmas\[1\] must be a number >= 0"),
    (lambda: sigma_eff(math.nan), r"sigmas\[0\] must be a real number, not NaN"),
])
def test_split_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------------------------------------------------------
# Bad input: each error names the parameter, its value and the valid range
# ---------------------------------------------------------------------------------------------------------------

GOOD = dict(noise_multiplier=1.0, sample_rate=0.01, steps=100, delta=1e-5)


@pytest.mark.parametrize("name, value, message", [
    ("noise_multiplier", -0.5, r"noise_multiplier must be a number >= 0 .*got -0.5"),
    ("noise_multiplier", math.nan, r"noise_multiplier must be a real number, not NaN.*got nan"),
    ("noise_multiplier", "one", r"noise_multiplier must be a real number .*got 'one'"),
    ("noise_multiplier", "1.5", r"noise_multiplier must be a real number .*got '1.5'"),
    ("sample_rate", 0.0, r"sample_rate must be in \(0, 1\] .*got 0.0"),
    ("sample_rate", 1.5, r"sample_rate must be in \(0, 1\] .*got 1.5"),
    ("sample_rate", -0.1, r"sample_rate must be in \(0, 1\]"),
    ("sample_rate", math.nan, r"sample_rate must be a real number, not NaN"),
    ("delta", 0.0, r"delta must be in \(0, 1\) .*got 0.0"),
    ("delta", 1.0, r"delta must be in \(0, 1\) .*got 1.0"),
    ("delta", math.nan, r"delta must be a real number, not NaN"),
    ("steps", -1, r"steps must be an integer >= 0, got -1"),
    ("steps", 2.5, r"steps must be an integer >= 0, got 2.5"),
    ("steps", 100.0, r"steps must be an integer >= 0, got 100.0"),
    ("steps", True, r"steps must be an integer >= 0, got True"),
    ("accountant", "gdp", r"unknown accountant 'gdp'.*; valid: rdp, prv"),
    ("accountant", "RDP", r"unknown accountant 'RDP' \(did you mean 'rdp'\?\); valid: rdp, prv"),
])
def test_epsilon_bad_input(name, value, message):
    with pytest.raises(ValueError, match="^" + message):
        epsilon(**{**GOOD, name: value})


@pytest.mark.parametrize("history, message", [
    ([(1.0, 0.01)], r"history\[0\] must be a \(noise_multiplier, sample_rate, steps\) triple"),
    ([(1.0, 0.01, 10), 5], r"history\[1\] must be a \(noise_multiplier, sample_rate, steps\) triple"),
    ([(1.0, 0.01, 10), (-1.0, 0.01, 10)], r"history\[1\] noise_multiplier must be a number >= 0"),
    ([(1.0, 1.01, 10)], r"history\[0\] sample_rate must be in \(0, 1\]"),
    ([(1.0, 0.01, 1.5)], r"history\[0\] steps must be an integer >= 0"),
])
def test_history_bad_input(history, message):
    with pytest.raises(ValueError, match=message):
        epsilon_of_history(history, 1e-5)


GOOD_TARGET = dict(target_epsilon=3.0, target_delta=1e-5, sample_rate=0.01, steps=100)


@pytest.mark.parametrize("name, value, message", [
    ("target_epsilon", 0.0, r"target_epsilon must be a finite number > 0, got 0.0"),
    ("target_epsilon", -1.0, r"target_epsilon must be a finite number > 0, got -1.0"),
    ("target_epsilon", math.inf, r"target_epsilon must be a finite number > 0, got inf"),
    ("target_epsilon", math.nan, r"target_epsilon must be a real number, not NaN.*got nan"),
    ("target_delta", 0.0, r"target_delta must be in \(0, 1\) .*got 0.0"),
    ("target_delta", 2.0, r"target_delta must be in \(0, 1\) .*got 2.0"),
    ("sample_rate", 0.0, r"sample_rate must be in \(0, 1\] .*got 0.0"),
    ("steps", 0, r"steps must be an integer >= 1, got 0"),
    ("steps", 10.5, r"steps must be an integer >= 1, got 10.5"),
    ("accountant", "moments", r"unknown accountant 'moments'.*; valid: rdp, prv"),
    ("epsilon_tolerance", 0.0, r"epsilon_tolerance must be a finite number > 0, got 0.0"),
    ("epsilon_tolerance", -0.01, r"epsilon_tolerance must be a finite number > 0, got -0.01"),
    ("sigma_tolerance", 0.0, r"sigma_tolerance must be a finite number > 0, got 0.0"),
])
def test_noise_multiplier_bad_input(name, value, message):
    with pytest.raises(ValueError, match="^" + message):
        noise_multiplier(**{**GOOD_TARGET, name: value})


@pytest.mark.parametrize("history", [
    [(1.5, 0.04, 2250)], [(1.1, 0.01, 5), (0.8, 0.01, 49), (1.1, 0.01, 3000)], [(0.5, 0.3, 10)], [(3.0, 1.0, 7)],
])
def test_cached_rdp_equals_opacus_rdp_accountant_exactly(history):
    """The per-(sigma, q) cache of the RDP curve changes nothing: bit-for-bit Opacus's RDPAccountant."""
    reference = RDPAccountant()
    reference.history = list(history)
    assert epsilon_of_history(history, 1e-5) == reference.get_epsilon(1e-5)


def test_dpdr_table2_svhn_reading():
    # [DPDR-16] Table 2's SVHN sigma_g (0.696 at epsilon 3, 0.531 at 8) is DP-SGD's RDP calibration at B = 100 and 30
    # epochs, to within 0.002 as the MNIST and CIFAR-10 rows; not at the stated B = 256, 20 epochs, nor at B = 128, 20.
    def sigma(target, B, epochs):
        return noise_multiplier(target, 1e-5, B / 73257, epochs * math.ceil(73257 / B))

    assert abs(sigma(3, 100, 30) - 0.696) <= 0.002 and abs(sigma(8, 100, 30) - 0.531) <= 0.002
    assert abs(sigma(3, 128, 20) - 0.696) > 0.002 and abs(sigma(8, 128, 20) - 0.531) > 0.002
    assert abs(sigma(3, 256, 20) - 0.696) > 0.05 and abs(sigma(8, 256, 20) - 0.531) > 0.02
