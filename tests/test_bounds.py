"""Convergence bounds (dpbook.bounds): hand-computed points, monotonicity the papers claim, crossovers, conditions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpbook import bounds as bd

DC = dict(sigma=2.0, d=1000, B=50, L=0.5, G_max=3.0, loss_gap=4.0)


# ------------------------------------------------------------------------------------------------ DC-SGD
def test_dcsgd_p_eq9_by_hand_with_a_schedule():
    T, eta, p = 4, 0.05, 0.8
    C = [3.0, 2.0, 1.0, 0.5]
    gnorm = [2.0, 1.0, 1.0, 0.0]
    b = bd.dcsgd_p_theorem3(T, eta, C, p=p, full_grad_norms=gnorm, **DC)
    assert b.optimisation == pytest.approx(4.0 / (4 * 0.05))
    assert b.second_moment == pytest.approx(0.5 * 0.05 * 9.0)
    sumC2 = 9.0 + 4.0 + 1.0 + 0.25
    assert b.noise == pytest.approx(0.5 * 0.05 * 2.0 ** 2 * 1000 / 50 ** 2 / 4 * sumC2)
    assert b.clipping_bias == pytest.approx((2.0 + 1.0 + 1.0 + 0.0) / 4 * (1 - 0.8) * 3.0)
    assert b.total == pytest.approx(b.optimisation + b.second_moment + b.noise + b.clipping_bias)


def test_dcsgd_p_sigma_H_uses_the_split_multiplier():
    exact = bd.dcsgd_p_theorem3(10, 0.1, 1.0, p=0.5, **DC)
    split = bd.dcsgd_p_theorem3(10, 0.1, 1.0, p=0.5, sigma_H=4.0, **DC)
    sigma_T2 = 1 / (2.0 ** -2 - 4.0 ** -2)
    assert split.noise == pytest.approx(exact.noise * sigma_T2 / 2.0 ** 2)
    assert bd.dcsgd_p_theorem3(10, 0.1, 1.0, p=0.5, sigma_H=math.inf, **DC).noise == pytest.approx(exact.noise)


def test_dcsgd_monotone_in_the_papers_directions():
    kw = dict(p=0.5, **DC)
    Ts = [10, 100, 1000]
    opt = [bd.dcsgd_p_theorem3(T, 0.1, 1.0, **kw).optimisation for T in Ts]
    assert opt[0] > opt[1] > opt[2]                       # optimisation falls in T
    etas = [0.01, 0.1, 1.0]
    b = [bd.dcsgd_p_theorem3(100, e, 1.0, **kw) for e in etas]
    assert b[0].optimisation > b[1].optimisation > b[2].optimisation   # falls in eta
    assert b[0].noise < b[1].noise < b[2].noise                        # rises in eta
    assert b[0].second_moment < b[1].second_moment < b[2].second_moment
    noise_C = [bd.dcsgd_p_theorem3(100, 0.1, C, **kw).noise for C in (0.5, 1.0, 2.0)]
    assert noise_C[0] < noise_C[1] < noise_C[2]            # rises in C_t
    bias_p = [bd.dcsgd_p_theorem3(100, 0.1, 1.0, p=p, **DC).clipping_bias for p in (0.1, 0.5, 0.9)]
    assert bias_p[0] > bias_p[1] > bias_p[2]               # falls linearly in p
    assert bias_p[0] - bias_p[1] == pytest.approx(bias_p[1] - bias_p[2])
    # a decaying schedule costs less noise than holding C_0
    decaying = bd.dcsgd_p_theorem3(4, 0.1, [2.0, 1.0, 0.5, 0.25], **kw)
    constant = bd.dcsgd_p_theorem3(4, 0.1, 2.0, **kw)
    assert decaying.noise < constant.noise


def test_dcsgd_sigma_and_eq22_by_hand():
    T, q, eps, delta = 2000, 0.02, 0.5, 1e-5
    assert bd.dcsgd_sigma(T, q=q, epsilon=eps, delta=delta, c1=1.0, c2=2.0) == pytest.approx(
        2.0 * 0.02 * math.sqrt(2000 * math.log(1e5)) / 0.5)
    b = bd.dcsgd_theorem3_eq22(T, 0.01, N=5000, B=100, epsilon=eps, delta=delta, d=200, L=2.0, G_max=1.5,
                               loss_gap=3.0, c1=1.0, c2=2.0, p=0.75)
    assert b.optimisation == pytest.approx(3.0 / (2000 * 0.01))
    assert b.second_moment == pytest.approx(2.0 * 0.01 * 1.5 ** 2)
    assert b.noise == pytest.approx(2.0 * 2000 * 0.01 * 200 * math.log(1e5) * 4.0 * 2.25 / (5000 ** 2 * 0.25))
    assert b.clipping_bias == pytest.approx(0.25 * 2.25)
    e = bd.dcsgd_theorem3_eq22(T, 0.01, N=5000, B=100, epsilon=eps, delta=delta, d=200, L=2.0, G_max=1.5,
                               loss_gap=3.0, c1=1.0, c2=2.0)
    assert e.clipping_bias == pytest.approx(2.25)          # Eq. 25: bias G_max^2 for DC-SGD-E


def test_eq22_equals_eq9_at_the_worst_case():
    # Eq. 22 is Eq. 9 with C_t = ||g_t|| = ||g_bar_t|| = G_max and sigma from the budget
    T, N, B, eps, delta, c2 = 500, 1000, 100, 0.5, 1e-3, 1.3
    sigma = bd.dcsgd_sigma(T, q=B / N, epsilon=eps, delta=delta, c1=1.0, c2=c2)
    a = bd.dcsgd_p_theorem3(T, 0.02, 2.0, p=0.6, sigma=sigma, d=30, B=B, L=1.1, G_max=2.0, loss_gap=1.0)
    b = bd.dcsgd_theorem3_eq22(T, 0.02, N=N, B=B, epsilon=eps, delta=delta, d=30, L=1.1, G_max=2.0, loss_gap=1.0,
                               c1=1.0, c2=c2, p=0.6)
    for f in ("optimisation", "second_moment", "noise", "clipping_bias"):
        assert getattr(a, f) == pytest.approx(getattr(b, f))


def test_balanced_choice_equalises_the_three_rate_terms():
    N, eps, delta, d = 10_000, 2.0, 1e-5, 50
    bal = bd.dcsgd_balanced(N=N, epsilon=eps, delta=delta, d=d)
    r = math.sqrt(d * math.log(1 / delta)) / (N * eps)
    assert bal.rate == pytest.approx(r) and bal.eta == pytest.approx(r)
    assert bal.T * bal.eta == pytest.approx(N * eps / math.sqrt(d * math.log(1 / delta)))
    # the three O-terms of Eq. 22 with unit constants: 1/(T eta), eta, T eta d ln(1/delta)/(N eps)^2
    terms = [1 / (bal.T * bal.eta), bal.eta, bal.T * bal.eta * d * math.log(1 / delta) / (N * eps) ** 2]
    assert terms == pytest.approx([r, r, r])


def test_dcsgd_e_eq10_by_hand():
    norms = np.array([[0.5, 1.5, 3.0], [1.0, 2.0, 2.5]])
    C = [1.0, 2.0]
    b = bd.dcsgd_e_eq10(2, 0.1, C, grad_norms=norms, **DC)
    excess = ((0 + 0.5 + 2.0) / 3 + (0 + 0 + 0.5) / 3) / 2
    assert b.clipping_bias == pytest.approx(3.0 * excess)
    assert b.noise == pytest.approx(0.5 * 0.1 * 4.0 * 1000 / 2500 * (1.0 + 4.0) / 2)
    assert bd.dcsgd_e_eq10(2, 0.1, C, **DC).clipping_bias == pytest.approx(9.0)  # Eq. 25
    # same norms at every step, threshold changing
    same = bd.dcsgd_e_eq10(2, 0.1, C, grad_norms=norms[0], **DC)
    assert same.clipping_bias == pytest.approx(3.0 * ((0 + 0.5 + 2.0) / 3 + (0 + 0 + 1.0) / 3) / 2)


def test_dcsgd_e_bias_falls_and_noise_rises_in_C():
    norms = np.random.default_rng(0).uniform(0, 3.0, 200)
    bs = [bd.dcsgd_e_eq10(10, 0.1, C, grad_norms=norms, **DC) for C in (0.5, 1.0, 2.0, 3.0)]
    assert all(a.clipping_bias > b.clipping_bias for a, b in zip(bs, bs[1:]))
    assert all(a.noise < b.noise for a, b in zip(bs, bs[1:]))
    assert bs[-1].clipping_bias == 0.0


@pytest.mark.parametrize("call, match", [
    (lambda: bd.dcsgd_sigma(10, q=0.1, epsilon=0.2, delta=1e-5, c1=1.0, c2=1.0), "epsilon must be < c1 q"),
    (lambda: bd.dcsgd_theorem3_eq22(10, 0.1, N=100, B=10, epsilon=0.2, delta=1e-5, d=5, L=1, G_max=1, loss_gap=1,
                                    c1=1.0, c2=1.0), "epsilon must be < c1 q"),
    (lambda: bd.dcsgd_p_theorem3(10, 0.1, 1.0, p=1.0, **DC), "p must be in"),
    (lambda: bd.dcsgd_p_theorem3(10, 0.1, 1.0, p=0.5, sigma_H=2.0, **DC), "sigma_H must be > sigma"),
    (lambda: bd.dcsgd_p_theorem3(10, -0.1, 1.0, p=0.5, **DC), "eta must be"),
    (lambda: bd.dcsgd_p_theorem3(10, 0.1, [1.0, 2.0], p=0.5, **DC), "length T=10"),
    (lambda: bd.dcsgd_p_theorem3(10.5, 0.1, 1.0, p=0.5, **DC), "T must be an integer"),
    (lambda: bd.dcsgd_e_eq10(1, 0.1, 1.0, grad_norms=[4.0], **DC), "Assumption 2"),
    (lambda: bd.dcsgd_theorem3_eq22(10, 0.1, N=100, B=200, epsilon=0.2, delta=1e-5, d=5, L=1, G_max=1, loss_gap=1,
                                    c1=1.0, c2=1.0), "B must be <= N"),
])
def test_dcsgd_conditions(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -------------------------------------------------------------------------------------------------- DPDR
DR = dict(B=4, loss0=2.0, rho=0.5, d=1000, m=3, C_perp=0.2, C_alpha=1.5, sigma_perp=1.2, sigma_alpha=0.8)


def test_dpdr_theorem2_by_hand():
    b = bd.dpdr_theorem2(20, 0.05, tau_perp=2.0, tau_alpha=[1.0, 0.0] * 10, P_perp=0.36, P_alpha=[0.25, 1.0] * 10,
                         **DR)
    g1 = 4 * 0.05
    assert b.optimisation == pytest.approx(2.0 / (0.05 * 20))
    assert b.second_moment == pytest.approx(0.5 * g1 / 2 * (2 * 0.04 + 2 * 2.25))
    assert b.noise == pytest.approx(0.5 * g1 / 2 * (1000 * 0.04 * 1.44 + 3 * 2.25 * 0.64))
    assert b.clipping_bias == pytest.approx(15 / 4 * (0.2 * 2.0 * 0.6 + 1.5 * (1.0 * 0.5 + 0.0 * 1.0) / 2))
    pb = bd.dpdr_theorem2(20, 0.05, tau_perp=2.0, tau_alpha=1.0, P_perp=0.36, P_alpha=0.25,
                          noise_reading="per_batch", **DR)
    assert pb.noise == pytest.approx(b.noise / 16)


def test_dpdr_lemma2_by_hand_and_theorem2_without_clipping():
    b = bd.dpdr_lemma2(50, 0.02, loss0=1.0, rho=2.0, d=500, C_perp=0.3, sigma_perp=1.5, c=0.5)
    assert (b.optimisation, b.noise, b.clipping_bias) == pytest.approx((1.0 / (0.02 * 50), 0.5 * 2 * 0.02 * 500 *
                                                                        0.09 * 2.25, 0.0))
    t2 = bd.dpdr_theorem2(50, 0.02, tau_perp=1.0, tau_alpha=1.0, P_perp=0.0, P_alpha=0.0, **DR)
    assert t2.clipping_bias == 0.0     # never clipped: Theorem 2 loses its clipping term (Lemma 2's setting)


def test_dpdr_monotone():
    base = dict(DR, tau_perp=1.0, tau_alpha=1.0, P_perp=0.5, P_alpha=0.1)
    noise_C = [bd.dpdr_theorem2(10, 0.1, **dict(base, C_perp=C)).noise for C in (0.1, 0.2, 0.4)]
    assert noise_C[0] < noise_C[1] < noise_C[2]               # noise grows as C_perp^2
    assert noise_C[2] / noise_C[1] < 4 + 1e-9
    bias_P = [bd.dpdr_theorem2(10, 0.1, **dict(base, P_perp=P)).clipping_bias for P in (0.0, 0.3, 0.9)]
    assert bias_P[0] < bias_P[1] < bias_P[2]                  # more clipping, more bias
    sa = [bd.dpdr_theorem2(10, 0.1, **dict(base, sigma_alpha=s)).noise for s in (0.0, 0.8, 10.0)]
    assert sa[0] < sa[1] < sa[2]
    assert (sa[1] - sa[0]) / sa[0] < 0.1    # m = 3 << d = 1000: at sigma_alpha = 0.8 the alpha noise adds < 10%
    # the clip-probability model falls in C: bias term falls with C_perp while noise rises (the U-shape)
    P = [bd.dpdr_clip_probability(C, mean_norm=1.0, tau=0.5, d=100) for C in (0.5, 1.0, 1.5, 3.0)]
    assert P[0] > P[1] > P[2] > P[3] and P[0] > 0.99 and P[3] < 1e-6


@pytest.mark.parametrize("change, match", [
    (dict(m=2000), "m must be <= d"), (dict(P_perp=1.5), "P_perp must be"), (dict(eta=0.0), "eta must be"),
    (dict(noise_reading="other"), "noise_reading"), (dict(tau_perp=[1.0, 2.0]), "length T=10"),
    (dict(C_perp=0.0), "C_perp must be"),
])
def test_dpdr_conditions(change, match):
    kw = dict(DR, eta=0.1, tau_perp=1.0, tau_alpha=1.0, P_perp=0.5, P_alpha=0.1)
    kw.update(change)
    with pytest.raises(ValueError, match=match):
        bd.dpdr_theorem2(10, **kw)


# ---------------------------------------------------------------------------------------------- DP-PSASC
def test_psasc_step_size_and_inferred_term_by_hand():
    T, s, F0, beta, sigma, d, kh = 400, 0.5, 2.303, 2.0, 1.1, 26010, 100
    eta = bd.psasc_theorem2_step_size(T, s=s, F0=F0, beta=beta, sigma=sigma, d=d, k_hat=kh)
    assert eta == pytest.approx(math.sqrt(2 * 0.25 * 2.303 / (2.0 * 300 * (2 + 1.21 * 26010))))
    b = bd.psasc_theorem2_leading_term(T, s=s, F0=F0, beta=beta, sigma=sigma, d=d, k_hat=kh)
    assert b.total == pytest.approx(math.sqrt(2 * 2.0 * 2.303 * (2 + 1.21 * 26010) / (0.25 * 300)))
    assert b.optimisation == pytest.approx(b.noise)
    # the printed eta is the minimiser of F0/(eta (T - khat)) + beta eta V / 2
    V = (2 + sigma ** 2 * d) / s ** 2
    f = lambda e: F0 / (e * (T - kh)) + beta * e * V / 2  # noqa: E731
    assert f(eta) == pytest.approx(b.total)
    assert f(eta) < f(eta * 1.01) and f(eta) < f(eta * 0.99)


def test_psasc_inferred_term_scales_as_one_over_s_sqrt_T():
    kw = dict(F0=1.0, beta=1.0, sigma=1.0, d=100)
    a = bd.psasc_theorem2_leading_term(100, s=1.0, **kw).total
    assert bd.psasc_theorem2_leading_term(400, s=1.0, **kw).total == pytest.approx(a / 2)
    assert bd.psasc_theorem2_leading_term(100, s=0.5, **kw).total == pytest.approx(2 * a)


def test_psasc_rates_and_schedules():
    assert bd.psasc_theorem2_rate(10_000, tau=0.05, c_opt=2.0, c_tau=3.0).total == pytest.approx(0.02 + 0.15)
    assert bd.psasc_theorem3_rate(16, c=2.0).total == pytest.approx(1.0)
    sch = bd.psasc_theorem3_schedules(1e8, c_r=2.0, c_s=3.0, c_gamma=0.5, c_eta=4.0)
    assert sch == pytest.approx((2e-4, 3e-2, 5e-3, 4e-6))
    rates = [bd.psasc_theorem3_rate(T).total for T in (10, 100, 1000)]
    assert rates[0] > rates[1] > rates[2]
    # Theorem 2's rate does not vanish: it tends to tau
    assert bd.psasc_theorem2_rate(1e16, tau=0.1).total == pytest.approx(0.1, rel=1e-6)


@pytest.mark.parametrize("tau, T_cross", [(0.01, 9.6e7), (0.02, 5.75e6), (0.05, 1.29e5), (0.1, 6.2e3),
                                          (0.2, 171)])
def test_psasc_crossover_matches_a_hand_computed_table(tau, T_cross):
    T = bd.psasc_crossover_T(tau)
    assert T == pytest.approx(T_cross, rel=0.01)
    # below the crossover T^(-1/4) is above T^(-1/2) + tau, beyond it below (unit constants)
    for factor, above in ((0.5, True), (2.0, False)):
        t = T * factor
        assert (bd.psasc_theorem3_rate(t).total > bd.psasc_theorem2_rate(t, tau=tau).total) is above
    assert bd.psasc_theorem3_rate(T).total == pytest.approx(bd.psasc_theorem2_rate(T, tau=tau).total)


def test_psasc_crossover_large_tau():
    assert bd.psasc_crossover_T(0.25) == 1.0 and bd.psasc_crossover_T(0.5) == 1.0
    Ts = np.logspace(0, 8, 50)
    assert all(bd.psasc_theorem3_rate(t).total <= bd.psasc_theorem2_rate(t, tau=0.3).total for t in Ts)


@pytest.mark.parametrize("call, match", [
    (lambda: bd.psasc_theorem2_step_size(100, s=1.0, F0=1.0, beta=1.0, sigma=1.0, d=10, k_hat=100), "T must be >"),
    (lambda: bd.psasc_theorem2_step_size(100, s=0.0, F0=1.0, beta=1.0, sigma=1.0, d=10), "s must be"),
    (lambda: bd.psasc_theorem3_schedules(0.5), "gamma must be in"),      # gamma = T^(-1/4) > 1
    (lambda: bd.psasc_crossover_T(0.0), "tau must be"),
    (lambda: bd.psasc_theorem2_rate(0, tau=0.1), "T must be"),
])
def test_psasc_conditions(call, match):
    with pytest.raises(ValueError, match=match):
        call()
