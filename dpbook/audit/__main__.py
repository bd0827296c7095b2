r"""``python -m dpbook.audit``: the white-box audit of registered methods and of the broken controls.

For example::

    python -m dpbook.audit --method dpsgd                      # one method, one and two steps, a table
    python -m dpbook.audit --method all --json                 # every registered method, a JSON list
    python -m dpbook.audit --broken all                        # every broken control, each on the method it breaks
    python -m dpbook.audit --method all --broken all --trials 50000 --sample-rate 1 0.5 \
        --output data/results/audit/analysis/white_box.json           # the book's full audit (resumes)

Each method is audited over one step and over ``--steps`` consecutive steps of one instance (default 1 and 2: a method
that reuses or correlates its noise across steps passes every one-step audit), at the worst canary of the sweep over
norms and directions (:mod:`dpbook.audit.sweep`). ``--broken KIND`` audits that control on the method it breaks,
whatever ``--method`` names. Each audit prints ``method``, ``broken``, ``steps``, ``trials``, ``epsilon_claimed``,
``epsilon_lower``, ``mu_claimed``, ``mu_lower`` and more (:class:`~dpbook.audit.white_box.AuditResult`), and a second
table gives every release of each audit on its own: its declared sensitivity and the sweep's largest effect on it, its
declared noise std and the measured upper bound, its own claim and lower bound
(:class:`~dpbook.audit.white_box.ReleaseAudit`). The lower bounds of one invocation hold *together* at 95 % confidence:
with k audits each gets ``1 - 0.05 / k``. The exit status is 1 when any lower bound exceeds its claim (or a canary's
effect exceeds a declared sensitivity, or a release's noise is below its declared std), which is the expected outcome
for a broken control, 2 for bad arguments, 0 otherwise. With ``--output`` every finished audit is written to the file at
once (atomically); a rerun with the same arguments skips the audits already there, and a file of another audit is
refused (``--force`` replaces it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tabulate import tabulate

from dpbook import accounting, checks, io
from dpbook.audit.broken import BROKEN
from dpbook.audit.parallel import records
from dpbook.audit.statistics import CONFIDENCE
from dpbook.audit.sweep import RANDOM_NORMS, band_probability
from dpbook.audit.white_box import DELTA, FAST_TRIALS
from dpbook.io import resumable
from dpbook.methods import METHODS

COLUMNS = ("method", "broken", "sample_rate", "steps", "trials", "canary", "signs", "epsilon_claimed", "epsilon_lower",
           "mu_claimed", "mu_lower", "failures", "seconds")
RELEASE_COLUMNS = ("method", "broken", "sample_rate", "steps", "release", "sensitivity", "shift", "noise_std",
                   "noise_std_upper", "mu_claimed", "mu_lower", "failures")
"""The second table: every release of every audit on its own (:class:`~dpbook.audit.white_box.ReleaseAudit`)."""


def _cell(record: dict, column: str):
    """A record's value in a table: its failures as words ("none" when it refutes nothing)."""
    return ", ".join(record[column]) or "none" if column == "failures" else record[column]


def release_rows(results: list[dict]) -> list[list]:
    """One row of :data:`RELEASE_COLUMNS` per release of each result record."""
    return [[r[c] for c in RELEASE_COLUMNS[:4]] + [a["name"]] + [_cell(a, c) for c in RELEASE_COLUMNS[5:]]
            for r in results for a in r["releases"]]


def parser() -> argparse.ArgumentParser:
    """The command line, every option's domain declared (:mod:`dpbook.checks`)."""
    parser = argparse.ArgumentParser(prog="python -m dpbook.audit", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", type=checks.choice([*METHODS, "all"], "method"),
                        help="a registered method, or 'all'")
    parser.add_argument("--broken", type=checks.choice([*BROKEN, "all"], "broken control"),
                        help=f"a broken control ({', '.join(BROKEN)}), or 'all'")
    parser.add_argument("--trials", type=checks.integers(4, "plays per world"), default=FAST_TRIALS,
                        help="plays per world (default %(default)s)")
    parser.add_argument("--steps", type=checks.integers(1, "consecutive steps per play"), nargs="+", default=[1, 2],
                        help="consecutive steps of one method instance per play (default 1 2)")
    parser.add_argument("--sample-rate", type=checks.numbers(above=0, at_most=1, fix="a sampling probability q"),
                        nargs="+", default=[1.0],
                        help="sample rate(s) q of the audited step (default 1; full-batch methods run at 1 only)")
    parser.add_argument("--delta", type=checks.numbers(above=0, below=1, fix="the delta of the claim"), default=DELTA)
    parser.add_argument("--accountant", type=checks.choice(accounting.ACCOUNTANTS, "accountant"), default="rdp",
                        help="the accountant of the epsilon claimed (rdp or prv)")
    parser.add_argument("--seed", type=checks.integers(0, "the audit's seed"), default=0,
                        help="the seed of the noise, the sampler, the random canary norms and the random sign pattern")
    parser.add_argument("--random-norms", type=checks.integers(0, "random canary norms of the sweep"),
                        default=RANDOM_NORMS, help="canary norms the sweep draws at random between its grid's "
                        "points (default %(default)s: then one falls in a band of norms 0.076 decades wide with "
                        f"probability {band_probability(0.076):.3f})")
    parser.add_argument("--jobs", type=checks.integers(1, "audits at once"), default=max(1, os.cpu_count() or 1),
                        help="audits at once, one process each (default: the CPU count); the results do not depend "
                             "on it")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--output", type=io.output_file(), help="also write the results to this JSON file "
                        "(resumes)")
    parser.add_argument("--force", action="store_true", help="replace an --output file of another audit")
    return parser


def parse(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the checked arguments (a mistake exits 2 with a message naming it)."""
    parser_ = parser()
    args = parser_.parse_args(argv)
    try:
        if args.method is None and args.broken is None:
            raise ValueError("give --method NAME (or all) and/or --broken KIND (or all)")
        args.steps = list(dict.fromkeys(args.steps))
        args.sample_rate = list(dict.fromkeys(args.sample_rate))
        if not plan(args):
            raise ValueError(f"nothing to audit: {args.method!r} is full-batch, audited at --sample-rate 1 only")
    except ValueError as error:
        parser_.error(str(error))
    return parser_, args


def plan(args: argparse.Namespace) -> list[tuple[str, str | None, float, int]]:
    """The (method, broken control, sample rate, steps) of every audit asked for: the methods of ``--method``, then
    the controls of ``--broken``, each on the method it breaks."""
    names = [] if args.method is None else list(METHODS) if args.method == "all" else [args.method]
    kinds = [] if args.broken is None else list(BROKEN) if args.broken == "all" else [args.broken]
    jobs = []
    for q in args.sample_rate:
        for T in args.steps:
            jobs += [(name, None, q, T) for name in names if q == 1 or not METHODS[name].full_batch]
            jobs += [(BROKEN[kind][0], kind, q, T) for kind in kinds]
    return jobs


def run_parameters(args: argparse.Namespace, jobs) -> dict:
    """What makes two invocations the same audit (a rerun with equal parameters resumes)."""
    return {"trials": args.trials, "delta": args.delta, "accountant": args.accountant, "seed": args.seed,
            "random_norms": args.random_norms, "audits": [list(job) for job in jobs], "confidence": CONFIDENCE}


def main(argv=None) -> int:
    parser, args = parse(argv)
    jobs = plan(args)
    expected = run_parameters(args, jobs)
    results = [] if args.output is None else resumable(args.output, expected, "results", force=args.force,
                                                       parser=parser)
    finished = {(r["method"], r["broken"], r["sample_rate"], r["steps"]) for r in results}
    each = 1 - (1 - CONFIDENCE) / len(jobs)
    options = dict(trials=args.trials, delta=args.delta, accountant=args.accountant, seed=args.seed,
                   random_norms=args.random_norms, confidence=each)
    others = sorted({kind for _, kind, _, _ in jobs if kind and args.method not in (None, "all", BROKEN[kind][0])})
    if others:
        broken = ", ".join(f"{kind} (breaks {BROKEN[kind][0]})" for kind in others)
        print(f"note: --broken {args.broken} includes {broken}, not {args.method}: each control is audited on the "
              "method it breaks (the 'method' column)", file=sys.stderr)
    todo = [job for job in jobs if job not in finished]
    for (method, broken, q, T), record in zip(todo, records(todo, options, args.jobs)):
        results.append(record)
        if args.output is not None:
            io.atomic_write_json({"parameters": expected, "results": results}, args.output)
        print(f"audited {method}{f' ({broken})' if broken else ''} at q = {q}, {T} step{'s' * (T > 1)}: mu >= "
              f"{record['mu_lower']:.3f} (claimed {record['mu_claimed']:.3f}), {record['seconds']:.1f} s",
              file=sys.stderr)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    else:
        print(tabulate([[_cell(r, c) for c in COLUMNS] for r in results], headers=COLUMNS, floatfmt=".3f"))
        print("\nEvery release on its own:")
        print(tabulate(release_rows(results), headers=RELEASE_COLUMNS, floatfmt=".3f"))
    return 1 if any(r["flagged"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
