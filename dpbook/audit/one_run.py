r"""Auditing a whole training run at once (Steinke, Nasr & Jagielski 2023): m gradient canaries, one run.

The white-box audit needs thousands of plays of one or two steps; a training run is released once. Steinke et al. turn
the many trials into many canaries: each of m canaries joins the training set independently with probability 1/2,
the run trains once, and the auditor guesses from the run's releases which canaries were in. The number of correct
guesses of an (epsilon, delta)-DP run is dominated by a binomial (:func:`dpbook.audit.statistics.one_run_p_value`),
so many correct guesses certify a lower bound on epsilon at 95 % confidence.

Here, white-box, with gradient canaries:

- canary :math:`k` is an example whose per-example gradient is, at every step and every parameter value, the Dirac
  vector :math:`10^6e_{j_k}` on its own coordinate :math:`j_k` of the model (:math:`m` distinct coordinates drawn at
  random): after the method's weighting it contributes its full sensitivity whenever Poisson sampling picks it,
  along :math:`e_{j_k}` (DPDR splits it between its base :math:`b` and :math:`b`'s complement);
- the canaries' selection and inclusion, the model's initialisation, the Poisson sampler and the noise draw from
  four independent seeds, and the engine divides by the *expected* size of the training set with half the
  canaries in, so that nothing about the run but its releases depends on which canaries are in;
- the training set is the real one plus the included canaries, sampled at the real run's q; the model, the
  method, the accountant and the engine (:class:`dpbook.optim.DPOptimizer`) are the book's, unchanged;
- the auditor sees every release (the noisy sums the optimizer receives) and reads canary :math:`k`'s coordinate
  :math:`j_k` of each, standardised by the step's declared noise std :math:`s_t` (from
  :meth:`dpbook.methods.base.Method.releases`, before the step): :math:`z_t = \tilde g_t[j_k]/s_t`. It scores the
  canaries in two ways (:data:`SCORES`), both fixed before the run:

  - ``"sum"``: :math:`\sum_t(\Delta_t/s_t)z_t`, with :math:`\Delta_t` the sensitivity of the noisy gradient
    (:func:`~dpbook.methods.base.gradient_sensitivity`): the likelihood-ratio weighting of independent Gaussian
    steps. It guesses "in" for the :math:`k` highest scores and "out" for the :math:`k` lowest;
  - ``"differences"``: :math:`\sum_t(z_t - z_{t-1})^2`, which sees noise that does not change from step to step
    (reused, or strongly correlated: the differences cancel it, and a canary that is in jumps whenever sampling
    picks it or drops it). It guesses "in" for the :math:`k` highest scores only;

- for each score and each :math:`k` of :data:`GUESSES` (fractions of :math:`m`, fixed in advance), the guesses
  certify a bound; each is computed at confidence :math:`1 - 0.05/8` (Bonferroni over the 2 x 4 guess sets), and the
  best is reported.

The number of canaries caps what a run can certify: :math:`r` guesses, all correct, refute no :math:`\varepsilon`
above ``one_run_epsilon(m, r, r, delta)`` (:func:`ceiling`), whatever the mechanism leaks.

    >>> result = one_run_audit("dpsgd", dict(C=1.0), epsilon=8.0, canaries=200, epochs=2, seed=0)
    >>> result.epsilon_lower <= result.epsilon_claimed, result.canaries
    (True, 200)
"""

from __future__ import annotations

__all__ = [
    "CANARY_NORM", "GUESSES", "SCORES", "WithCanaries", "dirac_canaries", "quiet_coordinates", "OneRunResult",
    "one_run_audit", "ceiling", "BOOK_RUNS", "BOOK_CONTROLS", "BOOK_EPSILONS", "BOOK_CANARIES", "parser", "main"
]

import argparse
import math
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from dpbook import checks, io
from dpbook.audit.broken import BROKEN
from dpbook.audit.statistics import CONFIDENCE, one_run_epsilon
from dpbook.data import load_digits
from dpbook.io import resumable
from dpbook.methods import METHODS
from dpbook.methods.base import gradient_sensitivity
from dpbook.models import digits_mlp
from dpbook.optim import DPOptimizer
from dpbook.per_sample import Grads
from dpbook.sampling import PoissonSampler
from dpbook.train import evaluate
from dpbook.tuning import tuning_plan

CANARY_NORM = 1e6
GUESSES = (0.02, 0.05, 0.1, 0.2)
"""Fractions k/m of the m canaries guessed on each side (in / out; "in" only for a one-sided score), fixed before
the run."""

SCORES = {"sum": 2, "differences": 1}
"""The scores of a canary (module docstring) -> the sides guessed: 2 (the k highest in, the k lowest out), 1 (the k
highest in)."""


class WithCanaries:
    """Per-example gradients where examples with label ``-(k + 1)`` are gradient canary k (a fixed vector)."""

    def __init__(self, per_sample, canaries: Grads):
        self.inner, self.canaries = per_sample, canaries
        self.names, self.params = per_sample.names, per_sample.params

    def __call__(self, x: torch.Tensor, y: torch.Tensor, params=None) -> Grads:
        canary = y < 0
        out = [torch.empty((len(y), *p.shape), dtype=p.dtype, device=p.device) for p in self.params]
        if (~canary).any():
            for o, g in zip(out, self.inner(x[~canary], y[~canary], params)):
                o[~canary] = g
        ids = -y[canary] - 1
        for o, c in zip(out, self.canaries):
            o[canary] = c[ids]
        return out


def dirac_canaries(params, coordinates: torch.Tensor) -> Grads:
    """One Dirac gradient ``CANARY_NORM e_j`` per coordinate j of the flattened parameters, shaped like them."""
    d = sum(p.numel() for p in params)
    flat = torch.zeros(len(coordinates), d)
    flat[torch.arange(len(coordinates)), coordinates] = CANARY_NORM
    parts = torch.split(flat, [p.numel() for p in params], dim=1)
    return [part.reshape(len(coordinates), *p.shape) for part, p in zip(parts, params)]


def quiet_coordinates(model: torch.nn.Module, x_train: torch.Tensor, m: int, generator: torch.Generator):
    r"""The m coordinates of the canaries: the quietest first, where the training data's own gradients are smallest.

    The gradient of a first-layer weight :math:`W_{hp}` is the unit's error times input :math:`x_p`, so the auditor,
    who knows the data but not which canaries are in, ranks those weights by the input's second moment
    :math:`\frac1N\sum_ix_{ip}^2` (0 for a pixel blank in every image: the data never moves its weights) and puts
    every other parameter after them; ties are broken at random. The choice depends on the data, never on the
    canaries' inclusion, as Theorem 3.1 requires."""
    first = next(module for module in model.modules() if isinstance(module, torch.nn.Linear))
    moment = x_train.flatten(1).pow(2).mean(0)  # one per input
    rank = torch.full((sum(p.numel() for p in model.parameters()),), math.inf)
    offset = 0
    for p in model.parameters():
        if p is first.weight:
            rank[offset:offset + p.numel()] = moment.repeat(p.shape[0])  # W[h, p], row-major
        offset += p.numel()
    shuffle = torch.randperm(len(rank), generator=generator)
    return shuffle[torch.argsort(rank[shuffle], stable=True)][:m]


def _check_canaries(canaries: int, params) -> int:
    """The number of canaries, refused unless each can have its own coordinate of the model."""
    canaries = checks.integer("canaries", canaries, minimum=2)
    d = sum(p.numel() for p in params)
    if canaries > d:
        raise ValueError(f"each canary needs its own coordinate of the model: at most d = {d} canaries, got {canaries}")
    return canaries


@dataclass(frozen=True)
class OneRunResult:
    method: str
    broken: str | None  # a broken control of dpbook.audit.broken run in place of the method
    hyperparameters: dict
    canaries: int
    included: int
    score: str  # the score of the best bound (SCORES)
    guesses: int  # r of the best bound
    correct: int  # v of the best bound
    epsilon_claimed: float
    epsilon_lower: float
    delta: float
    confidence: float
    sigma: float
    steps: int
    sample_rate: float
    test_accuracy: float
    released: dict  # the method's released diagnostics after the last step (its thresholds: public)
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


def ceiling(m: int, r: int, delta: float = 1e-5) -> float:
    """The largest epsilon that ``r`` guesses about ``m`` canaries can certify, every guess correct, at the
    confidence of one of the run's guess sets.

        >>> round(ceiling(200, 40), 2), round(ceiling(1000, 200), 2)   # 20 % of the canaries guessed "in"
        (1.98, 3.57)
    """
    return one_run_epsilon(m, r, r, delta, confidence=_EACH)


_EACH = 1 - (1 - CONFIDENCE) / (len(GUESSES) * len(SCORES))  # every guess set of every score: Bonferroni


def _guesses(score: str, order: torch.Tensor, inside: torch.Tensor, k: int) -> tuple[int, int]:
    """(r, v): the number of guesses and of correct ones, for the k highest (and, two-sided, the k lowest)."""
    correct = int(inside[order[:k]].sum())
    if SCORES[score] == 1:
        return k, correct
    return 2 * k, correct + int((~inside[order[-k:]]).sum())


def one_run_audit(method: str, hyperparameters: dict, *, epsilon: float, canaries: int = 1000, epochs: int = 10,
                  batch_size: int = 128, lr: float = 0.01, delta: float = 1e-5, seed: int = 0,
                  broken: str | None = None) -> OneRunResult:
    """One private training run on the real digits (the digits benchmark's setting) with ``canaries`` gradient
    canaries, and the epsilon lower bound their guesses certify (module docstring). ``broken`` runs that control of
    :data:`dpbook.audit.broken.BROKEN` in place of ``method``, the method it breaks."""
    checks.one_of("method", method, METHODS)
    cls = METHODS[method]
    if broken is not None:
        checks.one_of("broken control", broken, BROKEN)
        if BROKEN[broken][0] != method:
            raise ValueError(f"{broken!r} breaks {BROKEN[broken][0]!r}, not {method!r}")
        cls = BROKEN[broken][1]
    start = time.perf_counter()
    # Theorem 3.1 needs the canaries' inclusion independent of the run's randomness: four independent streams
    streams = np.random.SeedSequence(seed).generate_state(4)
    init_seed, canary_seed, sampler_seed, noise_seed = (int(s) for s in streams)
    torch.manual_seed(init_seed)
    x_train, y_train, x_test, y_test = load_digits()
    model = digits_mlp()
    params = [p for p in model.parameters() if p.requires_grad]
    canaries = _check_canaries(canaries, params)
    g = torch.Generator().manual_seed(canary_seed)
    coordinates = quiet_coordinates(model, x_train, canaries, g)
    inside = torch.rand(canaries, generator=g) < 0.5
    x_all = torch.cat([x_train, torch.zeros(int(inside.sum()), *x_train.shape[1:])])
    y_all = torch.cat([y_train, -(inside.nonzero().flatten() + 1)])

    q = batch_size / len(x_train)  # the real run's sample rate; the canaries join at the same rate
    steps = epochs * max(1, round(1 / q))
    plan = tuning_plan(epsilon, delta, q, steps)
    dp_method = cls.from_plan(plan, **hyperparameters)
    public_size = len(x_train) + canaries / 2  # the expected training-set size: B must not reveal who is in
    opt = DPOptimizer(model, torch.optim.Adam(params, lr=lr), dp_method, sample_rate=q,
                      expected_batch_size=q * public_size, noise_seed=noise_seed, per_sample="vmap")
    opt.engine.gradients = WithCanaries(opt.engine.gradients, dirac_canaries(params, coordinates))
    z, weights = [], []  # per step: the canaries' standardised coordinates, and the sum score's weight
    release = dp_method.release

    def recorded(acc, noise):
        declared = dp_method.releases()  # before the step: public
        std = declared[0].noise_std
        out = release(acc, noise)
        z.append(torch.cat([o.detach().flatten() for o in out])[coordinates].cpu() / std)
        weights.append(gradient_sensitivity(declared) / std)
        return out

    dp_method.release = recorded
    sampler = PoissonSampler(N=len(x_all), expected_batch_size=q * len(x_all), seed=sampler_seed)
    for _ in range(steps):
        batch = sampler.sample()
        opt.step(x_all[batch], y_all[batch], index=batch)

    trace = torch.stack(z)  # steps x canaries
    scores = {"sum": torch.tensor(weights) @ trace, "differences": trace.diff(dim=0).pow(2).sum(0)}
    best = (0.0, "sum", 0, 0)
    for score, values in scores.items():
        order = torch.argsort(values, descending=True)
        for fraction in GUESSES:
            r, v = _guesses(score, order, inside, max(1, int(fraction * canaries)))
            best = max(best, (one_run_epsilon(canaries, r, v, delta, confidence=_EACH), score, r, v))
    accuracy = evaluate(model, x_test, y_test)["accuracy"]
    return OneRunResult(method, broken, dict(hyperparameters), canaries, int(inside.sum()), best[1], best[2],
                        best[3], opt.epsilon(delta), best[0], delta, CONFIDENCE, plan.sigma, steps, q,
                        float(accuracy), dp_method.diagnostics(), time.perf_counter() - start)


#: The runs of the book's one-run audit: DP-SGD and one adaptive method of each paper, at hyperparameters of the
#: digits benchmark's grids (dpbook.repro.digits_benchmark.GRIDS).
BOOK_RUNS = {
    "dpsgd": dict(C=1.0),
    "dcsgd-e": {},
    "dpdr": dict(C_perp=1.0, C_alpha=0.3, C_g=1.0, s=50),
    "psasc": dict(C=1.0, r=1e-3, s=0.5),
}
#: The broken controls the book's one-run audit runs too, in place of the method they break (at its BOOK_RUNS
#: hyperparameters): noise reused or correlated across steps, which only a score over several steps can see.
BOOK_CONTROLS = ("reused-noise", "correlated-noise")
BOOK_EPSILONS = (1.0, 2.0, 4.0, 8.0)
BOOK_CANARIES = (200, 1000, 2000)  # about 7 %, 35 % and 41 % of the training set once half of them are in


def parser() -> argparse.ArgumentParser:
    """The command line, every option's domain declared (:mod:`dpbook.checks`)."""
    parser = argparse.ArgumentParser(prog="python -m dpbook.audit.one_run", description=main.__doc__)
    parser.add_argument("--methods", nargs="*", default=list(BOOK_RUNS), type=checks.choice(BOOK_RUNS, "method"))
    parser.add_argument("--broken", nargs="*", default=list(BOOK_CONTROLS),
                        type=checks.choice(BOOK_CONTROLS, "control"),
                        help="broken controls, each run in place of the method it breaks")
    parser.add_argument("--epsilons", nargs="+", type=checks.numbers(above=0, fix="privacy budgets"),
                        default=list(BOOK_EPSILONS))
    parser.add_argument("--seeds", type=checks.integers(1, "runs per cell"), default=5)
    parser.add_argument("--canaries", nargs="+", type=checks.integers(2, "canaries per run"),
                        default=list(BOOK_CANARIES))
    parser.add_argument("--output", type=io.output_file(), required=True)
    parser.add_argument("--force", action="store_true", help="replace a file written with other parameters")
    return parser


def main(argv=None) -> int:
    """``python -m dpbook.audit.one_run --output PATH``: the book's one-run audits (every method of
    :data:`BOOK_RUNS` and every control of :data:`BOOK_CONTROLS` x number of canaries x epsilon x seed), each written
    to ``PATH`` as it finishes. A rerun with the same parameters skips the runs done; a file written with other
    parameters is refused (``--force`` starts it afresh)."""
    parser_ = parser()
    args = parser_.parse_args(argv)
    if not args.methods and not args.broken:
        parser_.error("nothing to run: give --methods and/or --broken")
    try:
        for m in args.canaries:
            _check_canaries(m, list(digits_mlp().parameters()))
    except ValueError as error:
        parser_.error(f"argument --canaries: {error}")
    parameters = {"epochs": 10, "batch_size": 128, "lr": 0.01, "delta": 1e-5, "guesses": list(GUESSES),
                  "scores": list(SCORES), "hyperparameters": BOOK_RUNS}
    runs = resumable(args.output, parameters, "runs", force=args.force, parser=parser_)
    done = {(r["method"], r["broken"], r["canaries"], r["epsilon"], r["seed"]) for r in runs}
    mechanisms = [(method, None) for method in args.methods] + [(BROKEN[k][0], k) for k in args.broken]
    cells = [(method, broken, m, epsilon, seed) for method, broken in mechanisms for m in args.canaries
             for epsilon in args.epsilons for seed in range(args.seeds)]
    for method, broken, m, epsilon, seed in cells:
        if (method, broken, m, epsilon, seed) in done:
            continue
        result = one_run_audit(method, BOOK_RUNS[method], epsilon=epsilon, canaries=m, seed=seed, broken=broken)
        runs.append({**result.to_dict(), "epsilon": epsilon, "seed": seed})
        io.atomic_write_json({"parameters": parameters, "runs": runs}, args.output)
        print(f"{method}{f' ({broken})' if broken else ''}, {m} canaries, epsilon {epsilon}, seed {seed}: "
              f"epsilon >= {result.epsilon_lower:.3f} ({result.seconds:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
