"""The empirical privacy audit (dpbook.audit): its statistics, every method audited, the broken controls caught."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from dpbook import accounting
from dpbook.audit import statistics, white_box
from dpbook.audit.__main__ import main as audit_main
from dpbook.audit.broken import BROKEN, SAMPLERS, audit_broken
from dpbook.audit.one_run import WithCanaries, ceiling, dirac_canaries, one_run_audit, quiet_coordinates
from dpbook.audit.parallel import records
from dpbook.audit.sampling import poisson_test
from dpbook.audit.scenarios import SCENARIOS
from dpbook.audit.sweep import GRADIENT, RANDOM_NORMS, band_probability, canary_effects, sweep, sweeps
from dpbook.audit.white_box import FAST_RANDOM_NORMS, FAST_TRIALS, audit
from dpbook.data import load_digits
from dpbook.methods import METHODS
from dpbook.methods.dpsgd import DPSGD
from dpbook.methods.scenario import DTYPE, SHAPES
from dpbook.models import digits_mlp
from dpbook.per_sample import PerSampleGradients
from dpbook.sampling import PoissonSampler
from dpbook.train import Trainer

REQUIRED = {"method", "broken", "steps", "trials", "delta", "epsilon_claimed", "epsilon_lower", "mu_claimed",
            "mu_lower"}
# the controls that only an audit of several steps can see
ACROSS_STEPS = {"reused-noise", "correlated-noise", "anti-correlated-noise"}
BETWEEN_NORMS = {"narrow-band"}  # the controls that only the sweep's random norms can see
ALONE = {"histogram-half-noise": "histogram", "alpha-without-noise": "alpha"}  # control -> the release that shows it


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


# --- every method, one and two steps ---------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_leaks_no_more_than_it_is_charged(name):
    result = audit(name, trials=FAST_TRIALS, random_norms=FAST_RANDOM_NORMS)
    assert not result.flagged, result
    assert result.mu_claimed == pytest.approx(1 / result.noise_multiplier)
    # the canary saturates the declared sensitivity: the audit is run at the worst case the declaration allows
    assert result.shift == pytest.approx(result.sensitivity, rel=1e-6)
    # and it has power: the bound reaches most of the claim (loosest for DPDR: two releases at multiplier 1.5)
    assert result.mu_lower > (0.4 if name == "dpdr" else 0.6) * result.mu_claimed


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(METHODS))
def test_two_steps_of_one_instance_leak_no_more_than_they_are_charged(name):
    # the recorded audit has the power: 50,000 plays
    result = audit(name, trials=FAST_TRIALS // 4, steps=2, random_norms=FAST_RANDOM_NORMS)
    assert not result.flagged, result
    assert result.steps == 2 and "projection@1*projection@2" in result.features
    assert result.signs in ((1, 1), (1, -1))  # the worst of the constant and the alternating canary
    one = audit(name, trials=8, random_norms=FAST_RANDOM_NORMS)
    assert result.epsilon_claimed > one.epsilon_claimed and result.mu_claimed > one.mu_claimed
    if name != "dpdr":  # DPDR's second step is a GDR step at its own multiplier; the others repeat the first
        assert result.mu_claimed == pytest.approx(math.sqrt(2) / result.noise_multiplier)
        assert result.epsilon_claimed == pytest.approx(accounting.epsilon(result.noise_multiplier, 1.0, 2, 1e-5))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dpsgd", "dcsgd-e", "adaclip", "dpdr", "diff2"])
def test_poisson_step_leaks_no_more_than_its_subsampled_claim(name):
    result = audit(name, trials=FAST_TRIALS // 4, sample_rate=0.5, random_norms=FAST_RANDOM_NORMS)
    assert not result.flagged
    assert result.epsilon_claimed == pytest.approx(accounting.epsilon(result.noise_multiplier, 0.5, 1, 1e-5))
    assert result.epsilon_claimed < accounting.epsilon(result.noise_multiplier, 1.0, 1, 1e-5)


def test_full_batch_method_is_audited_at_sample_rate_one_only():
    with pytest.raises(ValueError, match="full-batch"):
        audit("psasc-momentum-gd", trials=8, sample_rate=0.5)


# --- the sweep over canary norms and directions ----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(METHODS))
def test_no_canary_of_the_sweep_exceeds_the_declared_sensitivity(name):
    swept = sweeps(METHODS[name], METHODS[name].declaration.audit)
    assert list(swept)[0] == GRADIENT and len(swept) >= 2  # the noisy gradient, then each release
    for target, result in swept.items():  # the noisy gradient, and every release on its own
        assert not result.exceeds and result.worst_shift == pytest.approx(result.sensitivity, rel=1e-6), target
        # the scenario's own canary is already the worst, and it moves every release as far as it may move: no
        # release of a scenario is left (nearly) constant
        assert result.worst_direction == "scenario" and result.own_shift == pytest.approx(result.sensitivity), target
        assert {"declared", "along", "against"} <= set(result.shifts) and len(result.norms) > 100


@pytest.mark.parametrize("kind, own, direction, norms", [("band-weights", 1.0, "declared", (0.1, 10)),
                                                          ("clipped-sum", math.sqrt(2), "against", (1, 1e7))])
def test_the_sweep_finds_what_a_fixed_canary_misses(kind, own, direction, norms):
    method, cls, scenario = BROKEN[kind]
    result = sweep(cls, scenario)
    # the scenario's canary (norm 10^6, orthogonal to the background) sees nothing wrong, or less than the worst
    assert result.own_shift == pytest.approx(own * result.sensitivity, rel=1e-3)
    assert result.exceeds and result.worst_shift == pytest.approx(2 * result.sensitivity, rel=1e-3)
    assert result.worst_direction == direction and norms[0] <= result.worst_norm <= norms[1]


class _Peak(DPSGD):
    """DP-SGD whose contribution rises to 2C at norm 1.4 and falls back within 0.15 decades: a peak whose top lies
    between two norms of the grid."""

    def weights(self, norms):
        tent = (1 - (norms / 1.4).log10().abs() / 0.15).clamp(min=0)
        return super().weights(norms) * (1 + tent)


def test_the_random_norms_find_a_band_between_the_grids_norms():
    _, narrow, dpsgd = BROKEN["narrow-band"]
    assert not sweep(narrow, dpsgd, random_norms=0).exceeds  # the grid alone steps over the band
    result = sweep(narrow, dpsgd)
    assert result.exceeds and result.worst_direction == "declared" and 1.3 <= result.worst_norm <= 1.55
    assert band_probability(math.log10(1.55 / 1.3)) > 0.99  # what the chapter says of such a band


def test_the_sweep_looks_between_the_grids_norms_around_a_peak():
    result = sweep(_Peak, SCENARIOS["dpsgd"], random_norms=0)
    on_grid = max(float(v.max()) for v in result.shifts.values())
    assert on_grid < 1.75 * result.sensitivity  # the grid's norms 1.26 and 1.58 sit on the peak's flanks
    assert result.worst_shift > 1.95 * result.sensitivity and abs(math.log10(result.worst_norm / 1.4)) < 0.01


@pytest.mark.parametrize("name", sorted(METHODS))
@settings(max_examples=30, deadline=None)
@given(exponent=st.floats(-6, 7), direction=st.lists(st.floats(-1, 1), min_size=10, max_size=10))
def test_no_canary_of_any_norm_or_direction_exceeds_the_declared_sensitivity(name, exponent, direction):
    u = torch.tensor(direction, dtype=DTYPE)
    assume(float(u.norm()) > 1e-3)
    flat = 10 ** exponent * u / u.norm()
    canary = [flat[:6].reshape(SHAPES[0]), flat[6:].reshape(SHAPES[1])]
    for target, (effect, sensitivity) in canary_effects(METHODS[name], SCENARIOS[name], canary).items():
        assert effect <= sensitivity * (1 + 1e-9), target


# --- the broken controls ---------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_control_is_flagged(kind):
    result = audit_broken(kind, trials=FAST_TRIALS // 2, steps=2, random_norms=_norms(kind))
    if kind in BETWEEN_NORMS:  # its noise is DP-SGD's: the effect above the declared sensitivity flags it
        assert result.flagged and result.shift > result.sensitivity and "declared" in result.canary, result
    elif kind in ALONE:  # one release's noise below its declaration: that release's own audit shows it
        release = {r.name: r for r in result.releases}[ALONE[kind]]
        assert release.flagged and release.noise_std_upper < 0.6 * release.noise_std, result
        assert f"{ALONE[kind]}: noise" in result.failures and "noise" in release.failures
        assert not any(r.flagged for r in result.releases if r.name != ALONE[kind]), result
    else:
        assert result.flagged and result.mu_lower > result.mu_claimed, result
    assert result.method == BROKEN[kind][0] and result.broken == kind


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_one_step_audit_is_blind_to_noise_across_steps_only(kind):
    result = audit_broken(kind, trials=FAST_TRIALS // 2, random_norms=_norms(kind))
    assert result.flagged == (kind not in ACROSS_STEPS), result


def _norms(kind: str) -> int:
    """The sweep's random norms for a control: all of them where only they see it, a few elsewhere."""
    return RANDOM_NORMS if kind in BETWEEN_NORMS else FAST_RANDOM_NORMS


@pytest.mark.parametrize("name, releases", [
    ("dpsgd", {"gradient": 1.0}), ("dcsgd-p", {"gradient": 0.98, "histogram": 0.2}),
    ("adaclip", {"gradient": 0.866, "unclipped count": 0.5}), ("dpdr", {"orthogonal": 1 / 1.5, "alpha": 1 / 1.5})])
def test_every_release_is_audited_on_its_own_at_its_own_multiplier(name, releases):
    result = audit(name, trials=400, random_norms=0)
    assert {r.name: round(r.mu_claimed, 3) for r in result.releases} == {k: round(v, 3) for k, v in releases.items()}
    for r in result.releases:
        assert r.noise_std_upper >= r.noise_std and r.shift == pytest.approx(r.sensitivity) and not r.flagged, r
        assert r.epsilon_claimed == pytest.approx(accounting.epsilon(r.noise_multiplier, 1.0, 1, 1e-5))
    # the composition of the releases is the step's claim: 1/mu^2 adds up
    assert sum(r.mu_claimed ** 2 for r in result.releases) == pytest.approx(result.mu_claimed ** 2)
    # the step's audit reads every release that is not the noisy gradient itself
    assert {r for r in releases if r != "gradient"} <= set(result.features)
    if len(releases) == 1:  # one release: its audit is the step's
        assert (result.releases[0].mu_lower, result.releases[0].epsilon_lower) == (result.mu_lower,
                                                                                     result.epsilon_lower)


class _NoiseOutsideTheRelease(DPSGD):
    """DP-SGD drawing its noise with ``noise.like`` and adding it itself: right noise, but a release the audit cannot
    read on its own."""

    def release(self, acc, noise):
        return [s + noise.like(s, acc["releases"][0].noise_std) for s in acc["sum"]]


def test_a_release_that_escapes_the_one_call_is_refused():
    with pytest.raises(ValueError, match=r"declared the releases \['gradient'\] but released \[\] through noise.add_"):
        white_box.run(_NoiseOutsideTheRelease, SCENARIOS["dpsgd"], name="dpsgd", trials=8, random_norms=0)


def test_every_sign_pattern_is_audited_and_the_worst_reported():
    anti = audit_broken("anti-correlated-noise", trials=FAST_TRIALS // 2, steps=2, random_norms=FAST_RANDOM_NORMS)
    assert anti.flagged and anti.signs == (1, 1)  # the alternating canary cancels with the noise; the constant not
    reused = audit_broken("reused-noise", trials=FAST_TRIALS // 2, steps=2, random_norms=FAST_RANDOM_NORMS)
    assert reused.flagged and reused.signs == (1, -1)
    assert audit("dpsgd", trials=8, random_norms=0).signs == (1,)


class _Counted(PoissonSampler):
    draws = 0

    def sample(self):
        type(self).draws += 1
        return super().sample()


def test_the_canary_joins_a_batch_as_the_engines_sampler_draws_it():
    result = white_box.run(METHODS["dpsgd"], SCENARIOS["dpsgd"], name="dpsgd", trials=40, steps=2, sample_rate=0.5,
                           sampler=_Counted, random_norms=0)
    assert _Counted.draws == 40 * 2 and result.sample_rate == 0.5


# --- the sampler ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("N, B", [(20, 4), (9, 4.5), (50, 1)])
def test_the_engines_sampler_is_poisson(N, B):
    for seed in range(3):
        result = poisson_test(PoissonSampler(N=N, expected_batch_size=B, seed=seed))
        assert not result.flagged, result


def test_the_trainers_batches_are_poisson():
    """The sampler the Trainer (and every reproduction, through it) draws its batches from."""
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(30, 4, generator=g), torch.randint(0, 2, (30,), generator=g), torch.randn(4, 4),
            torch.tensor([0, 1, 0, 1]))
    model = torch.nn.Linear(4, 2)
    trainer = Trainer(model, DPSGD(C=1.0, sigma=1.0), torch.optim.SGD(model.parameters(), lr=0.1), data,
                      expected_batch_size=6, epochs=1, delta=1e-3, progress=False)
    result = poisson_test(trainer.sampler)
    assert not result.flagged and (result.N, result.q) == (30, 0.2), result


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_a_broken_sampler_is_flagged(kind):
    result = poisson_test(SAMPLERS[kind](N=20, expected_batch_size=4, seed=0))
    assert result.flagged and "batch sizes" in result.failed, result


# --- the command line ------------------------------------------------------------------------------------------

def _cli(*args, cwd=None):
    """The command line in a process of its own, one audit at a time (the suite already fills the cores)."""
    return subprocess.run([sys.executable, "-m", "dpbook.audit", *args, "--jobs", "1"], capture_output=True, text=True,
                          cwd=cwd)


FEW_NORMS = ["--random-norms", str(FAST_RANDOM_NORMS)]  # the sweep's random canary norms, where no band is audited


def test_cli_audits_a_method_over_one_and_two_steps_and_exits_zero(capsys):
    assert audit_main(["--method", "dpsgd", "--trials", "400", "--json", "--jobs", "1", *FEW_NORMS]) == 0
    records = json.loads(capsys.readouterr().out)
    assert all(REQUIRED <= set(r) for r in records)
    assert [(r["method"], r["broken"], r["steps"]) for r in records] == [("dpsgd", None, 1), ("dpsgd", None, 2)]


def test_cli_flags_a_control_of_noise_across_steps_from_the_first_command(capsys):
    assert audit_main(["--broken", "reused-noise", "--trials", "400", "--json", "--jobs", "1", *FEW_NORMS]) == 1
    records = json.loads(capsys.readouterr().out)
    assert [(r["steps"], r["flagged"]) for r in records] == [(1, False), (2, True)]


def test_cli_audits_every_control_on_the_method_it_breaks(capsys):
    args = ["--method", "dpsgd", "--broken", "all", "--trials", "200", "--steps", "2", "--json", "--jobs", "1"]
    assert audit_main(args) == 1
    captured = capsys.readouterr()
    records = json.loads(captured.out)
    assert [(r["method"], r["broken"]) for r in records] == [("dpsgd", None)] + [(BROKEN[k][0], k) for k in BROKEN]
    assert not records[0]["flagged"] and all(r["flagged"] for r in records[1:])
    assert ("note: --broken all includes alpha-without-noise (breaks dpdr), band-weights (breaks psasc), "
            "histogram-half-noise (breaks dcsgd-p), realised-batch-adaclip (breaks adaclip), not dpsgd: each control "
            "is audited on the method it breaks") in captured.err


@pytest.mark.parametrize("args, message", [
    (["--method", "dpsg"], "did you mean 'dpsgd'"),
    (["--broken", "half-nois"], "did you mean 'half-noise'"),
    (["--method", "psasc-momentum-gd", "--sample-rate", "0.5"], "full-batch"),
    (["--method", "dpsgd", "--accountant", "rpd"], "accountant"),
    (["--method", "dpsgd", "--delta", "7"], "delta"),
    (["--method", "dpsgd", "--trials", "2"], "trials"),
    (["--method", "dpsgd", "--steps", "0"], "--steps"),
    ([], "give --method"),
])
def test_cli_refuses_mistakes_with_exit_two(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        audit_main(args)
    error = capsys.readouterr().err
    assert exit_.value.code == 2 and message in error, error


@pytest.mark.slow
def test_cli_output_resumes_and_bounds_hold_jointly(tmp_path, capsys):
    """The command in a process of its own (as typed), then again, with another audit and forced, in this one."""
    out = tmp_path / "audit.json"
    args = ["--broken", "half-noise", "--trials", "200", "--output", str(out), "--jobs", "1", *FEW_NORMS]
    every = ["--method", "all", "--trials", "200", "--sample-rate", "0.5", "--steps", "1", "--output", str(out),
             "--json", *FEW_NORMS]
    first = _cli(*every)
    assert first.returncode == 0, first.stderr
    record = json.loads(out.read_text())
    assert len(record["results"]) == len(METHODS) - 1  # the full-batch method runs at q = 1 only
    assert {r["confidence"] for r in record["results"]} == {1 - 0.05 / (len(METHODS) - 1)}
    assert audit_main([*every, "--jobs", "1"]) == 0
    again = capsys.readouterr()
    assert "audited" not in again.err and json.loads(again.out) == record["results"]  # nothing re-run
    with pytest.raises(SystemExit) as other:  # another audit's file is not replaced ...
        audit_main(args)
    assert other.value.code == 2 and "recorded with other audits" in capsys.readouterr().err
    assert json.loads(out.read_text()) == record
    assert audit_main([*args, "--force"]) == 1  # ... unless asked
    assert len(json.loads(out.read_text())["results"]) == 2  # one and two steps


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


def test_canaries_sit_first_where_the_data_never_moves_the_weights():
    x_train = load_digits()[0]
    model = digits_mlp()
    blank = (x_train.flatten(1).abs().sum(0) == 0).nonzero().flatten()
    coordinates = quiet_coordinates(model, x_train, len(blank) * 32, torch.Generator().manual_seed(0))
    hidden, pixel = coordinates // 64, coordinates % 64  # fc1.weight comes first, row-major (32 x 64)
    assert bool((hidden < 32).all()) and set(pixel.tolist()) == set(blank.tolist())
    assert len(set(coordinates.tolist())) == len(coordinates)


def test_one_run_audit_refutes_the_claim_of_noise_reused_across_steps():
    result = one_run_audit("dpsgd", dict(C=1.0), epsilon=2.0, canaries=1000, seed=0, broken="reused-noise")
    assert result.epsilon_lower > result.epsilon_claimed and result.score == "differences"
    assert result.epsilon_lower <= ceiling(1000, result.guesses) + 1e-9  # no more than the canaries allow
    with pytest.raises(ValueError, match="breaks 'dpsgd', not 'psasc'"):
        one_run_audit("psasc", {}, epsilon=2.0, canaries=100, broken="reused-noise")


@pytest.mark.slow
def test_audits_in_parallel_processes_give_the_same_records():
    jobs = [("dpsgd", None, 1.0, 2), ("dpsgd", "reused-noise", 1.0, 2)]
    one, two = (list(records(jobs, dict(trials=200, random_norms=FAST_RANDOM_NORMS), processes=p)) for p in (1, 2))
    drop = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    assert [drop(r) for r in one] == [drop(r) for r in two] and [r["flagged"] for r in two] == [False, True]
