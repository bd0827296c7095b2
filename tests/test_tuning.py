"""Privacy cost of hyperparameter tuning: Theorem 1 (Liu-Talwar, as the DC-SGD paper states it) by hand, the G-fold
RDP composition recomputed by the accountant, which protocol is cheaper where, the charged grid-search runner on
deterministic stand-ins for training, and every bad-input error; on DC-SGD's settings and grids, which its
reproduction module holds (:mod:`dpbook.repro.papers.dcsgd`)."""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest

import dpbook.tuning as tuning
from dpbook import accounting
from dpbook.accounting import epsilon, epsilon_of_history, noise_multiplier
from dpbook.protocols import (
    LT_DELTA2,
    PROTOCOLS,
    FreeTuning,
    LiuTalwar,
    Protocol,
    lt_expected_runs,
    lt_gamma,
    lt_max_runs,
    lt_theorem,
    make_protocol,
)
from dpbook.repeat_select import RunCount
from dpbook.repro.experiment import Experiment, plan_of
from dpbook.repro.papers.dcsgd import DCSGD_SETTINGS, GRID_SIZES, GRID_SIZES_SGD, paper_grid, paper_table
from dpbook.repro.results import RESULTS_DIR
from dpbook.sampling import PoissonSampler
from dpbook.tuning import calibrate_sigma, grid_search, per_run_budget, tuning_plan

MNIST = DCSGD_SETTINGS["mnist"]            # N = 60000, 10 epochs, B = 256: q = 0.00427, T = 2340, delta = 1/N
Q, T, DELTA = MNIST.sample_rate, MNIST.steps, MNIST.delta
TOL = 1e-3                                 # calibration tolerance of the comparisons below


# --------------------------------------------------------------------------------------------------------------
# The paper's grids and settings
# --------------------------------------------------------------------------------------------------------------

def test_grid_sizes_are_table_vii():
    assert GRID_SIZES == {r["method"]: r["G"] for r in paper_table("I")["rows"]}   # Table I's multipliers
    assert sorted(GRID_SIZES.values()) == [1, 9, 10, 45, 90]
    assert GRID_SIZES_SGD == {m: 20 * g for m, g in GRID_SIZES.items()}
    assert paper_grid("dynamic")[0] == {"C0": 0.1, "rho_C": 0.1}
    assert paper_grid("dpsgd", "sgd")[-1] == {"C": 10.0, "lr": 5.24288}
    lrs = sorted({p["lr"] for p in paper_grid("dpsgd", "sgd")})
    assert lrs[:3] == [1e-5, 2e-5, 4e-5] and len(lrs) == 20


def test_settings_count_the_papers_steps_and_cover_a_trainer_run():
    assert DCSGD_SETTINGS["mnist"].steps == 2344          # ceil(60000 x 10 / 256), the paper's T
    for s in DCSGD_SETTINGS.values():
        sampler = PoissonSampler(N=s.N, expected_batch_size=256, seed=0)
        assert s.steps == math.ceil(s.N * s.epochs / 256) >= s.epochs * sampler.steps_per_epoch()
        assert s.sample_rate == pytest.approx(sampler.q) and s.delta == 1 / s.N


# --------------------------------------------------------------------------------------------------------------
# Theorem 1 and the per-run budget, by hand
# --------------------------------------------------------------------------------------------------------------

def test_lt_cap_and_gamma():
    assert lt_gamma(10) == 0.05
    assert lt_max_runs(0.05) == pytest.approx(20 * 46.051701859880914)      # 20 ln(1e20) = 921.03
    assert lt_max_runs(lt_gamma(7)) / 7 == pytest.approx(2 * math.log(1e20))  # about 92.1 G
    assert lt_expected_runs(0.05) == pytest.approx(20.0)
    assert lt_expected_runs(0.5, delta2=0.25) == pytest.approx(1.5)   # cap floor(2 ln 4) = 2 runs: 1 + 1/2


def test_lt_theorem_forwards_by_hand():
    # delta_2 = e^-10 and gamma = 0.1 make T_LT = 100 runs; delta_1 = 5e-13 makes sqrt(2 delta_1) = 1e-6.
    eps, delta = lt_theorem(1.0, 5e-13, gamma=0.1, delta2=math.exp(-10))
    assert eps == pytest.approx(3.0 + 3e-6, rel=1e-12)
    assert delta == pytest.approx(3e-6 * 100 + math.exp(-10), rel=1e-12)


def test_lt_per_run_budget_by_hand():
    # The same numbers backwards: G = 5 gives gamma = 1/10, so T_LT = 100 with delta_2 = e^-10.
    d2 = math.exp(-10)
    eps1, delta1 = per_run_budget(3.0, 3e-4 + d2, G=5, protocol="lt", delta2=d2)
    assert eps1 == pytest.approx(1.0 - 1e-6, rel=1e-9)
    assert delta1 == pytest.approx(5e-13, rel=1e-9)


def test_lt_per_run_budget_paper_defaults():
    # CIFAR10 (delta = 1/50000), DP-SGD's grid G = 10: T_LT = 921.03, sqrt(2 delta_1) = 2e-5 / 2763.1 = 7.238e-9.
    eps1, delta1 = per_run_budget(2.0, 1 / 50000, G=10)
    assert math.sqrt(2 * delta1) == pytest.approx(7.2382e-9, rel=1e-4)
    assert delta1 == pytest.approx(2.6196e-17, rel=1e-4)     # delta_1 ~ 2.6e-17
    assert eps1 == pytest.approx(2 / 3 - 7.2382e-9, rel=1e-12)
    # Du's grid G = 90: T_LT is 9 times larger, delta_1 81 times smaller.
    assert per_run_budget(2.0, 1 / 50000, G=90)[1] == pytest.approx(delta1 / 81, rel=1e-9)


@pytest.mark.parametrize("eps, delta, G", [(2.0, 1 / 60000, 10), (8.0, 1 / 104743, 90), (0.5, 1e-3, 2),
                                           (4.0, 1 / 73257, 1800)])
def test_lt_budget_round_trips_through_the_theorem(eps, delta, G):
    eps1, delta1 = per_run_budget(eps, delta, G)
    eps_back, delta_back = lt_theorem(eps1, delta1, lt_gamma(G))
    assert eps_back <= eps and delta_back <= delta          # never over budget, even by rounding
    assert eps_back == pytest.approx(eps, rel=1e-9) and delta_back == pytest.approx(delta, rel=1e-9)


def test_one_point_and_no_tuning_take_the_whole_budget():
    for protocol in PROTOCOLS:
        assert per_run_budget(2.0, 1e-5, G=1, protocol=protocol) == (2.0, 1e-5)
    assert per_run_budget(2.0, 1e-5, G=10, protocol="none") == (2.0, 1e-5)
    with pytest.raises(ValueError, match="calibrate_sigma"):
        per_run_budget(2.0, 1e-5, G=10, protocol="rdp")


# --------------------------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------------------------

def test_G1_gives_the_single_run_sigma():
    single = noise_multiplier(4.0, DELTA, Q, T)
    for protocol in PROTOCOLS:
        assert calibrate_sigma(4.0, DELTA, Q, T, G=1, protocol=protocol) == single
    assert calibrate_sigma(4.0, DELTA, Q, T, G=10, protocol="none") == single   # no tuning cost: G ignored


@pytest.mark.parametrize("protocol", ["rdp", "lt"])
def test_sigma_grows_with_G(protocol):
    sigmas = [calibrate_sigma(4.0, DELTA, Q, T, G, protocol, epsilon_tolerance=TOL) for G in (1, 9, 10, 90)]
    assert all(a < b for a, b in zip(sigmas, sigmas[1:])), sigmas


def test_rdp_composed_sigma_meets_the_total_budget():
    for G in (10, 45):
        sigma = calibrate_sigma(4.0, DELTA, Q, T, G, "rdp")
        runs = [(sigma, Q, T)] * G                          # G copies of one run's history
        total = epsilon_of_history(runs, DELTA)
        assert total == pytest.approx(epsilon(sigma, Q, G * T, DELTA), rel=1e-12)  # = one history of G*T steps
        assert 4.0 - 0.01 <= total <= 4.0
        # and it is really the composition that costs: one run alone is far cheaper than the budget
        assert epsilon(sigma, Q, T, DELTA) < 4.0 / 2


def test_lt_sigma_meets_the_per_run_budget_and_the_theorem():
    plan = tuning_plan(4.0, DELTA, Q, T, G=10, protocol="lt")
    eps1, delta1 = per_run_budget(4.0, DELTA, 10)
    assert plan.per_run_delta == delta1
    assert plan.per_run_epsilon == pytest.approx(epsilon(plan.sigma, Q, T, delta1), rel=1e-12)
    assert eps1 - 0.01 <= plan.per_run_epsilon <= eps1
    assert plan.total_epsilon <= 4.0 and plan.total_delta <= DELTA
    assert plan.max_runs == 921 and plan.expected_runs == pytest.approx(20.0)


def test_which_protocol_is_cheaper_where():
    """What we found (MNIST, 10 epochs, B = 256, delta = 1/N; see the chapter for all four datasets):

    - RDP composition is cheaper for small grids: it grows like sqrt(G) from sigma_1, while LT starts at about
      3x the epsilon cost (epsilon_1 ~ epsilon/3 at delta_1 ~ 1e-17) and then grows only through ln(1/delta_1).
    - For Du's G = 90, LT is cheaper at every epsilon from 1 to 8; for DP-SGD's G = 10, RDP is cheaper at every
      epsilon.
    """
    def both(eps, G):
        return (calibrate_sigma(eps, DELTA, Q, T, G, "rdp", epsilon_tolerance=TOL),
                calibrate_sigma(eps, DELTA, Q, T, G, "lt", epsilon_tolerance=TOL))

    for eps in (1.0, 2.0, 4.0, 8.0):
        rdp, lt = both(eps, 10)
        assert rdp < lt, eps                    # e.g. 1.00 vs 1.78 at epsilon 4
        rdp, lt = both(eps, 90)
        assert lt < rdp, eps                    # e.g. 4.17 vs 2.93 at epsilon 2


def test_lt_at_epsilon_one_is_reachable():
    """An accountant limited to Opacus's orders (alpha <= 63) called this unreachable: its optimum is near 200."""
    plan = tuning_plan(1.0, DELTA, Q, T, G=10, protocol="lt")
    assert 5.0 < plan.sigma < 5.3 and plan.total_epsilon <= 1.0 and plan.total_delta <= DELTA
    assert accounting.rdp_optimum([(plan.sigma, Q, T)], plan.per_run_delta).order > 150


def test_lt_unreachable_error_says_what_to_change():
    with pytest.raises(ValueError) as info:
        calibrate_sigma(1e-6, DELTA, 1.0, 10 ** 6, G=10, protocol="lt")   # q = 1: closed-form RDP, fast
    message = str(info.value)
    assert "LT per-run budget" in message and "G=10" in message and "unreachable" in message
    assert "Use a larger epsilon" in message


def test_rdp_unreachable_error_names_the_grid():
    with pytest.raises(ValueError, match=r"(?s)G=1000 runs.*smaller grid"):
        calibrate_sigma(1e-3, 1e-10, 1.0, 10 ** 6, G=1000, protocol="rdp")   # q = 1: closed-form RDP, fast


# --------------------------------------------------------------------------------------------------------------
# The calibration table against Google's dp_accounting
# --------------------------------------------------------------------------------------------------------------
# The DC-SGD paper's settings with its step count T = ceil(N epochs / B): MNIST (N = 60000, 10 epochs) and CIFAR10
# (N = 50000, 20 epochs), B = 256, delta = 1/N; epsilon in {1, 2, 4, 8}, G in {1, 10, 90}, protocols none/rdp/lt.
TABLE_SETTINGS = {"mnist": (60000, 10), "cifar10": (50000, 20)}
WIDE_ORDERS = [1 + x / 20 for x in range(1, 180)] + list(range(10, 301))   # optima here reach ~220
CELLS = [(name, eps, G, protocol) for name in TABLE_SETTINGS for eps in (1.0, 2.0, 4.0, 8.0)
         for G, protocol in ((1, "none"), (10, "rdp"), (90, "rdp"), (10, "lt"), (90, "lt"))]


def _table_cell(name, eps, G, protocol):
    N, epochs = TABLE_SETTINGS[name]
    q, T, delta = 256 / N, math.ceil(N * epochs / 256), 1 / N
    sigma = calibrate_sigma(eps, delta, q, T, G, protocol)
    if protocol == "lt":
        (target, at_delta), steps = per_run_budget(eps, delta, G), T
    else:
        (target, at_delta), steps = (eps, delta), T * (G if protocol == "rdp" else 1)
    return sigma, q, steps, target, at_delta


def _google(accountant, sigma, q, steps, delta):
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    if accountant == "pld":
        return dp_accounting.pld.PLDAccountant().compose(event).get_epsilon(delta)
    eps, order = dp_accounting.rdp.RdpAccountant(orders=WIDE_ORDERS).compose(event).get_epsilon_and_optimal_order(delta)
    assert WIDE_ORDERS[0] < order < WIDE_ORDERS[-1], "the cross-check's own orders must contain its optimum"
    return eps


@pytest.mark.slow
@pytest.mark.parametrize("name, eps, G, protocol", CELLS)
def test_calibration_table_agrees_with_google_rdp_to_one_percent(name, eps, G, protocol):
    """Google's RDP accountant (orders up to 300) puts the smallest sufficient sigma within 1 % below ours."""
    sigma, q, steps, target, delta = _table_cell(name, eps, G, protocol)
    assert _google("rdp", sigma, q, steps, delta) <= target * 1.005    # 0.4 %: its bound at fractional orders
    assert _google("rdp", 0.99 * sigma, q, steps, delta) > target


@pytest.mark.slow
@pytest.mark.parametrize("name, eps, G, protocol", [c for c in CELLS if c[3] != "lt"])
def test_calibration_table_is_private_under_google_pld(name, eps, G, protocol):
    """The PLD accountant is tighter than RDP: our sigma meets the target there too (by 2-20 %).

    LT's cells are not checked by PLD: at delta_1 ~ 1e-17 the FFT convolution of a PLD resolves no mass that small
    (dp_accounting returns inf, or wrong values with a raised truncation bound), so RDP is the only accountant
    there.
    """
    sigma, q, steps, target, delta = _table_cell(name, eps, G, protocol)
    assert _google("pld", sigma, q, steps, delta) < target


# --------------------------------------------------------------------------------------------------------------
# The grid-search runner
# --------------------------------------------------------------------------------------------------------------

GRID = [{"C": C} for C in (0.1, 0.5, 1.0, 2.0, 8.0)]
FAST = dict(epsilon=4.0, delta=1e-5, sample_rate=0.01, steps=500)   # a cheap setting for calibration


def fake_train(calls):
    """A deterministic stand-in for training: accuracy peaks at C = 1 and falls with the noise."""
    def train(hp, sigma, seed):
        calls.append((dict(hp), sigma, seed))
        return {"accuracy": 0.9 - 0.1 * abs(math.log(hp["C"])) - 0.01 * sigma,
                "history": [(sigma, FAST["sample_rate"], FAST["steps"])]}
    return train


def test_runner_rdp_runs_every_point_and_charges_the_composition():
    calls = []
    result = grid_search(GRID, fake_train(calls), protocol="rdp", metric="accuracy", seed=7, **FAST)
    assert [c[0] for c in calls] == GRID                      # every grid point once, in order
    assert {c[1] for c in calls} == {result.sigma}             # all at the calibrated sigma
    assert [c[2] for c in calls] == [7, 8, 9, 10, 11]          # run k gets seed + k
    assert result.best.hyperparameters == {"C": 1.0} and result.best.grid_index == 2
    assert result.sigma == calibrate_sigma(G=len(GRID), protocol="rdp", **FAST)
    # the charged total, recomputed independently from the runs actually made
    history = [(result.sigma, FAST["sample_rate"], FAST["steps"])] * len(result.runs)
    assert result.total_epsilon == pytest.approx(epsilon_of_history(history, FAST["delta"]), rel=1e-12)
    assert result.composed_epsilon == pytest.approx(result.total_epsilon, rel=1e-12)
    assert 4.0 - 0.01 <= result.total_epsilon <= 4.0 and result.plan.selection_charged
    assert "covered" in result.summary() and "C': 1.0" in result.summary()


def test_runner_minimises_when_asked():
    result = grid_search(GRID, lambda hp, sigma, seed: hp["C"], protocol="rdp", maximize=False, **FAST)
    assert result.best.hyperparameters == {"C": 0.1}
    ties = grid_search([{"a": 1}, {"a": 2}, {"a": 3}], lambda hp, s, k: 1.0, protocol="rdp", **FAST)
    assert ties.best.order == 0                                # ties: the first run


def test_runner_lt_is_random_stopping_charged_by_theorem_1():
    calls = []
    result = grid_search(GRID, fake_train(calls), protocol="lt", metric="accuracy", seed=3, **FAST)
    plan = result.plan
    assert plan.charged_protocol == "lt" and plan.charged.gamma == 1 / (2 * len(GRID))
    assert result.sigma == calibrate_sigma(G=len(GRID), protocol="lt", **FAST)
    assert 1 <= len(result.runs) <= plan.max_runs
    assert all(0 <= r.grid_index < len(GRID) and r.hyperparameters == GRID[r.grid_index] for r in result.runs)
    assert result.best.metric == max(r.metric for r in result.runs)
    eps1, delta1 = per_run_budget(FAST["epsilon"], FAST["delta"], len(GRID))
    assert plan.per_run_delta == delta1 and plan.per_run_epsilon <= eps1
    assert (result.total_epsilon, result.total_delta) == lt_theorem(plan.per_run_epsilon, delta1, plan.charged.gamma)
    assert result.total_epsilon <= 4.0 and result.total_delta <= 1e-5
    again = grid_search(GRID, fake_train([]), protocol="lt", metric="accuracy", seed=3, **FAST)
    assert [r.grid_index for r in again.runs] == [r.grid_index for r in result.runs]   # seeded, reproducible


def test_lt_random_stopping_makes_2G_runs_on_average(monkeypatch):
    plan = tuning_plan(G=len(GRID), protocol="lt", **FAST)
    monkeypatch.setattr(tuning, "tuning_plan", lambda *a, **k: plan)   # calibrate once, search many times
    counts, visits = [], np.zeros(len(GRID))
    for seed in range(250):
        result = grid_search(GRID, lambda hp, s, k: 0.0, protocol="lt", seed=seed, **FAST)
        counts.append(len(result.runs))
        for r in result.runs:
            visits[r.grid_index] += 1
    mean, se = np.mean(counts), np.std(counts) / math.sqrt(len(counts))
    assert abs(mean - 2 * len(GRID)) < 4 * se                    # geometric with gamma = 1/(2G): mean 2G = 10
    assert np.all(np.abs(visits / visits.sum() - 1 / len(GRID)) < 0.03)   # uniform over the grid


def test_runner_one_point_is_one_run_at_the_whole_budget():
    for protocol in ("rdp", "lt"):
        calls = []
        result = grid_search([{"C": 1.0}], fake_train(calls), protocol=protocol, metric="accuracy", **FAST)
        assert len(calls) == 1 and result.plan.charged_protocol == "none"
        assert result.sigma == calibrate_sigma(**FAST)


def test_runner_none_does_not_cover_the_selection():
    result = grid_search(GRID, lambda hp, s, k: hp["C"], protocol="none", **FAST)
    assert len(result.runs) == len(GRID) and not result.plan.selection_charged
    assert result.total_epsilon <= 4.0 < result.composed_epsilon   # what the five runs really compose to
    assert "NOT covered" in result.summary()


def test_runner_rejects_a_run_that_spent_more_than_it_was_charged():
    def cheat(hp, sigma, seed):
        return {"metric": 1.0, "history": [(sigma / 2, FAST["sample_rate"], FAST["steps"])]}
    with pytest.raises(ValueError, match="run 0 .* spends more than it was charged"):
        grid_search(GRID, cheat, protocol="rdp", **FAST)

    def too_long(hp, sigma, seed):
        return {"metric": 1.0, "history": [(sigma, FAST["sample_rate"], FAST["steps"] + 1)]}
    with pytest.raises(ValueError, match="501 steps, more than the 500"):
        grid_search(GRID, too_long, protocol="rdp", **FAST)


def test_runner_metric_errors():
    with pytest.raises(ValueError, match="without the metric key 'metric'.*accuracy"):
        grid_search(GRID, lambda hp, s, k: {"accuracy": 1.0}, protocol="rdp", **FAST)
    with pytest.raises(ValueError, match="the metric of run 0"):
        grid_search(GRID, lambda hp, s, k: float("nan"), protocol="rdp", **FAST)
    with pytest.raises(ValueError, match="the metric of run 0"):
        grid_search(GRID, lambda hp, s, k: "high", protocol="rdp", **FAST)


# --------------------------------------------------------------------------------------------------------------
# Bad input: every error names the parameter
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    (dict(G=0), "G"), (dict(G=2.5), "G"), (dict(G=True), "G"),
    (dict(epsilon=0.0), "epsilon"), (dict(epsilon=-1.0), "epsilon"), (dict(epsilon=math.inf), "epsilon"),
    (dict(epsilon=math.nan), "epsilon"), (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"),
    (dict(sample_rate=0.0), "sample_rate"), (dict(steps=0), "steps"), (dict(delta2=0.0), "delta2"),
    (dict(protocol="grid"), "protocol"), (dict(accountant="gdp"), "accountant"),
    (dict(epsilon_tolerance=0.0), "epsilon_tolerance"),
])
def test_calibrate_sigma_bad_input_names_the_parameter(kwargs, name):
    args = dict(epsilon=2.0, delta=1e-5, sample_rate=0.01, steps=100, G=10, protocol="lt") | kwargs
    with pytest.raises(ValueError, match=rf"^(unknown )?{name}\b"):
        calibrate_sigma(**args)


def test_unknown_protocol_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid: none, rdp, lt"):
        per_run_budget(2.0, 1e-5, 10, protocol="LT")


def test_theorem_helpers_bad_input():
    with pytest.raises(ValueError, match="^gamma"):
        lt_max_runs(0.0)
    with pytest.raises(ValueError, match="^delta1"):
        lt_theorem(1.0, -1e-9, 0.1)
    with pytest.raises(ValueError, match="^delta must exceed"):
        per_run_budget(2.0, 1e-21, 10)
    with pytest.raises(ValueError, match="^epsilon="):
        per_run_budget(1e-12, 0.5, 10, delta2=1e-3)           # epsilon/3 - sqrt(2 delta_1) <= 0
    with pytest.raises(ValueError, match="^unknown method"):
        paper_grid("sgd")
    with pytest.raises(ValueError, match="^unknown optimizer .*Table VI"):
        paper_grid("dpsgd", "adamw")


def _zero(*args):
    return 0.0


@pytest.mark.parametrize("grid, train, kwargs, name", [
    ([], _zero, {}, "grid"), ("C", _zero, {}, "grid"), ([{"C": 1}, 3], _zero, {}, r"grid\[1\]"),
    ([{"C": 1}], "train", {}, "train"), ([{"C": 1}], _zero, dict(seed=-1), "seed"),
    ([{"C": 1}], _zero, dict(protocol="best"), "protocol"), ([{"C": 1}], _zero, dict(epsilon=0), "epsilon"),
])
def test_grid_search_bad_input_names_the_parameter(grid, train, kwargs, name):
    args = dict(FAST, protocol="rdp") | kwargs
    with pytest.raises(ValueError, match=rf"^(unknown )?{name}"):
        grid_search(grid, train, **args)


# --------------------------------------------------------------------------------------------------------------
# The protocols as objects
# --------------------------------------------------------------------------------------------------------------

def test_every_protocol_is_registered_under_its_name():
    assert list(PROTOCOLS) == ["none", "rdp", "lt", "ps"]
    for name, cls in PROTOCOLS.items():
        assert issubclass(cls, Protocol) and cls.name == name and cls.summary
        assert make_protocol(name, G=1) == FreeTuning(1)  # one point: nothing is selected, whatever was asked
        assert type(make_protocol(name, G=3)) is cls and make_protocol(name, G=3).G == 3
    assert [cls.free for cls in PROTOCOLS.values()] == [True, False, False, False]  # the re-run rule
    assert [cls.tag(10) for cls in PROTOCOLS.values()] == ["none", "rdp10", "lt10", "ps10"]
    assert make_protocol("lt", 4, delta2=1e-15) == LiuTalwar(4, delta2=1e-15)
    assert make_protocol("ps", 4, distribution="poisson").count == RunCount.poisson(4)
    assert not FreeTuning(3).selection_charged and FreeTuning(1).selection_charged


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_a_committed_run_holds_the_plan_todays_protocol_makes(name):
    """A recorded run's plan is what today's code plans for its experiment, key for key; its numbers to the last
    digits (bit for bit at requirements.txt's versions; the oldest supported numpy and scipy round the last bit of
    an epsilon differently)."""
    path = sorted((RESULTS_DIR / "digits-benchmark" / "psasc").glob(f"digits_eps8_{name}*.json"))[0]
    record = json.loads(path.read_text())
    planned = plan_of(Experiment(**record["experiment"]), record["N"]).record()
    assert sorted(planned) == sorted(record["plan"])
    for key, value in planned.items():
        if isinstance(value, float):
            assert math.isclose(value, record["plan"][key], rel_tol=1e-12), key
        else:
            assert value == record["plan"][key], key


def test_lt_delta2_is_the_papers():
    assert LT_DELTA2 == 1e-20


def test_chapter_claim_separate_histogram_accounting_undercharges():
    """The chapter 'Privacy of DC-SGD', Section 2, claims the opposite of what one might expect.

    Composing the gradient at sigma_T and the histogram at sigma_H as two independently subsampled Gaussians gives
    a *smaller* epsilon than the true mechanism: one subsampled Gaussian at sigma on the shared batch. So the
    separate view under-charges. Google's PLD accountant agrees. With q = 1 the two views coincide.
    """
    import dp_accounting

    from dpbook.accounting import sigma_T

    def pld(history):
        acc = dp_accounting.pld.PLDAccountant()
        for s, q, t in history:
            acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), t)
        return acc.get_epsilon(DELTA)

    sigma = 0.668                                     # MNIST's single-run sigma at epsilon = 4
    h = math.sqrt(2) * sigma                          # an even split of the precision
    joint, separate = [(sigma, Q, T)], [(sigma_T(sigma, h), Q, T), (h, Q, T)]
    assert epsilon_of_history(separate, DELTA) < 0.6 * epsilon_of_history(joint, DELTA)
    assert pld(separate) < 0.6 * pld(joint)
    ones = [(s, 1.0, 10) for s, _, _ in separate]
    assert epsilon_of_history(ones, 1e-5) == pytest.approx(epsilon(sigma, 1.0, 10, 1e-5), rel=1e-9)
