"""The empirical privacy audit (dpbook.audit): its statistics, every method audited, the broken controls caught."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy import stats

from dpbook import accounting
from dpbook.audit import statistics
from dpbook.audit.broken import BROKEN, audit_broken
from dpbook.audit.one_run import WithCanaries, dirac_canaries, one_run_audit
from dpbook.audit.one_step import FAST_TRIALS, audit
from dpbook.methods import METHODS
from dpbook.per_sample import PerSampleGradients

REQUIRED = {"method", "broken", "trials", "delta", "epsilon_claimed", "epsilon_lower", "mu_claimed", "mu_lower"}


# --- statistics -------------------------------------------------------------------------------------------------

def test_clopper_pearson_matches_the_beta_quantile_and_covers():
    assert statistics.clopper_pearson_upper(0, 100, 0.95) == pytest.approx(1 - 0.05 ** (1 / 100))
    rng = np.random.default_rng(0)
    rate, n = 0.1, 200
    bounds = statistics.clopper_pearson_upper(rng.binomial(n, rate, 4000), n, 0.95)
    assert np.mean(bounds < rate) <= 0.05  # an upper bound at 95 % is below the true rate at most 5 % of the time


def test_bounds_from_rates_invert_the_definitions():
    # (epsilon, delta)-DP: FPR + e^eps FNR >= 1 - delta (and symmetrically); equal rates on that line give back eps
    eps, delta = 2.0, 1e-5
    rate = (1 - delta) / (1 + math.exp(eps))
    assert statistics.epsilon_from_rates(rate, rate, delta) == pytest.approx(eps)
    assert statistics.mu_from_rates(stats.norm.sf(0.3), stats.norm.cdf(0.3 - 1.7)) == pytest.approx(1.7)
    assert statistics.epsilon_from_rates(0.5, 0.5, delta) == 0.0 and statistics.mu_from_rates(0.6, 0.6) == 0.0


def test_certified_bounds_stay_below_the_truth_and_reach_near_it():
    rng = np.random.default_rng(1)
    mus = [statistics.certify(rng.normal(0, 1, 4000), rng.normal(1, 1, 4000), delta=1e-5).mu for _ in range(60)]
    assert np.mean(np.array(mus) > 1.0) <= 0.05
    assert np.median(mus) > 0.75


def test_one_run_bound_is_the_binomial_test_without_delta():
    assert statistics.one_run_p_value(100, 50, 40, 0.0, 0.0) == pytest.approx(stats.binom.sf(39, 50, 0.5))
    assert statistics.one_run_epsilon(1000, 100, 55, 1e-5) == 0.0  # 55 of 100 is not significant
    strong = statistics.one_run_epsilon(1000, 100, 95, 1e-5)
    assert strong > statistics.one_run_epsilon(1000, 100, 80, 1e-5) > 0
    # at the bound the p-value is 1 - confidence
    assert statistics.one_run_p_value(1000, 100, 95, strong, 1e-5) == pytest.approx(0.05, abs=1e-6)
    with pytest.raises(ValueError, match="0 <= v <= r <= m"):
        statistics.one_run_epsilon(10, 20, 5, 0.0)


# --- every method, one step ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_leaks_no_more_than_it_is_charged(name):
    result = audit(name, trials=FAST_TRIALS)
    assert not result.flagged, result
    assert result.mu_claimed == pytest.approx(1 / result.noise_multiplier)
    # the canary saturates the declared sensitivity: the audit is run at the worst case the declaration allows
    assert result.shift == pytest.approx(result.sensitivity, rel=1e-6)
    # and it has power: the bound reaches most of the claim (DPDR's release leaks less than it is charged)
    assert result.mu_lower > (0.4 if name == "dpdr" else 0.6) * result.mu_claimed


@pytest.mark.parametrize("name", ["dpsgd", "dcsgd-e", "adaclip", "dpdr", "diff2"])
def test_poisson_step_leaks_no_more_than_its_subsampled_claim(name):
    result = audit(name, trials=FAST_TRIALS, sample_rate=0.5)
    assert not result.flagged
    assert result.epsilon_claimed == pytest.approx(accounting.epsilon(result.noise_multiplier, 0.5, 1, 1e-5))
    assert result.epsilon_claimed < accounting.epsilon(result.noise_multiplier, 1.0, 1, 1e-5)


def test_full_batch_method_is_audited_at_sample_rate_one_only():
    with pytest.raises(ValueError, match="full-batch"):
        audit("psasc-momentum-gd", trials=8, sample_rate=0.5)


# --- the broken controls ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_control_is_flagged(kind):
    result = audit_broken(kind, trials=FAST_TRIALS)
    assert result.flagged and result.mu_lower > result.mu_claimed, result
    assert result.method == BROKEN[kind][0] and result.broken == kind


# --- the command line ------------------------------------------------------------------------------------------

def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "dpbook.audit", *args], capture_output=True, text=True, cwd=cwd)


def test_cli_audits_a_method_as_json_and_exits_zero():
    done = _cli("--method", "dpsgd", "--trials", "400", "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert REQUIRED <= set(record) and record["method"] == "dpsgd" and record["broken"] is None


def test_cli_flags_a_broken_control_with_exit_one():
    done = _cli("--broken", "no-clipping", "--trials", "400", "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["flagged"]


@pytest.mark.parametrize("args, message", [
    (["--method", "dpsg"], "did you mean 'dpsgd'"),
    (["--method", "dpdr", "--broken", "half-noise"], "--broken half-noise breaks dpsgd, not 'dpdr'"),
    (["--method", "dpsgd", "--broken", "all"], "breaks adaclip, dpsgd, not 'dpsgd'"),
    (["--method", "psasc-momentum-gd", "--sample-rate", "0.5"], "full-batch"),
    (["--method", "dpsgd", "--accountant", "rpd"], "accountant"),
    (["--method", "dpsgd", "--delta", "7"], "delta"),
    (["--method", "dpsgd", "--trials", "2"], "trials"),
    ([], "give --method"),
])
def test_cli_refuses_mistakes_with_exit_two(args, message):
    done = _cli(*args)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_cli_output_resumes_and_bounds_hold_jointly(tmp_path):
    out = tmp_path / "audit.json"
    args = ("--broken", "half-noise", "--trials", "200", "--output", str(out))
    first = _cli("--method", "all", "--trials", "200", "--sample-rate", "0.5", "--output", str(out), "--json")
    assert first.returncode == 0, first.stderr
    record = json.loads(out.read_text())
    assert len(record["results"]) == len(METHODS) - 1  # the full-batch method runs at q = 1 only
    assert {r["confidence"] for r in record["results"]} == {1 - 0.05 / (len(METHODS) - 1)}
    again = _cli("--method", "all", "--trials", "200", "--sample-rate", "0.5", "--output", str(out), "--json")
    assert again.returncode == 0 and "audited" not in again.stderr  # nothing re-run
    assert json.loads(again.stdout) == record["results"]
    other = _cli(*args)  # another audit's file is not replaced ...
    assert other.returncode == 2 and "recorded with other audits" in other.stderr
    assert json.loads(out.read_text()) == record
    forced = _cli(*args, "--force")  # ... unless asked
    assert forced.returncode == 1 and len(json.loads(out.read_text())["results"]) == 1


# --- one training run ------------------------------------------------------------------------------------------

def test_gradient_canaries_replace_only_the_canary_rows():
    model = torch.nn.Linear(3, 2)
    inner = PerSampleGradients(model, torch.nn.functional.cross_entropy)
    canaries = dirac_canaries(inner.params, torch.tensor([0, 7]))
    with_canaries = WithCanaries(inner, canaries)
    x, y = torch.randn(3, 3), torch.tensor([1, -2, 0])
    out = with_canaries(x, y)
    real = inner(x[[0, 2]], y[[0, 2]])
    assert torch.equal(out[0][[0, 2]], real[0]) and torch.equal(out[1][[0, 2]], real[1])
    assert out[1][1].tolist() == [0.0, 1e6] and out[0][1].abs().sum() == 0  # canary 1: coordinate 7, bias[1]


def test_one_run_audit_certifies_no_more_than_the_run_is_charged():
    result = one_run_audit("dpsgd", dict(C=1.0), epsilon=8.0, canaries=300, epochs=3, seed=0)
    assert 0 <= result.epsilon_lower <= result.epsilon_claimed <= 8.0
    assert result.canaries == 300 and 0 < result.included < 300 and result.guesses > 0
