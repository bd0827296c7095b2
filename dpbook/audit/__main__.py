r"""``python -m dpbook.audit``: the one-step audit of registered methods and of the broken controls.

For example::

    python -m dpbook.audit --method dpsgd                      # one method, a table
    python -m dpbook.audit --method all --json                 # every registered method, a JSON list
    python -m dpbook.audit --broken half-noise --json          # a broken control (its method is implied)
    python -m dpbook.audit --method all --broken all --trials 50000 --sample-rate 1 0.5 \
        --output data/results/audit/analysis/one_step.json             # the book's full audit (resumes)

Each audit prints ``method``, ``broken``, ``trials``, ``delta``, ``epsilon_claimed``, ``epsilon_lower``,
``mu_claimed``, ``mu_lower`` and more (:class:`~dpbook.audit.one_step.AuditResult`). The lower bounds of one
invocation hold *together* at 95 % confidence: with k audits each gets ``1 - 0.05 / k``. The exit status is 1 when
any lower bound exceeds its claim (or a canary's effect exceeds the declared sensitivity), which is the expected
outcome for a broken control, 2 for bad arguments, 0 otherwise. With ``--output`` every finished audit is written
to the file at once (atomically); a rerun with the same arguments skips the audits already there, and a file of
another audit is refused (``--force`` replaces it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tabulate import tabulate

from dpbook import accounting, checks, io
from dpbook.audit.broken import BROKEN, audit_broken
from dpbook.audit.one_step import DELTA, FAST_TRIALS, audit
from dpbook.audit.statistics import CONFIDENCE
from dpbook.io import resumable
from dpbook.methods import METHODS

COLUMNS = ("method", "broken", "sample_rate", "trials", "epsilon_claimed", "epsilon_lower", "mu_claimed", "mu_lower",
           "flagged", "seconds")


def parse(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the checked arguments (a mistake exits 2 with a message naming it)."""
    parser = argparse.ArgumentParser(prog="python -m dpbook.audit", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", help="a registered method, or 'all'")
    parser.add_argument("--broken", help=f"a broken control ({', '.join(BROKEN)}), or 'all'")
    parser.add_argument("--trials", type=int, default=FAST_TRIALS, help="releases per world (default %(default)s)")
    parser.add_argument("--sample-rate", type=float, nargs="+", default=[1.0],
                        help="sample rate(s) q of the audited step (default 1; full-batch methods run at 1 only)")
    parser.add_argument("--delta", type=float, default=DELTA)
    parser.add_argument("--accountant", default="rdp", help="the accountant of the epsilon claimed (rdp or prv)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--output", type=Path, help="also write the results to this JSON file (resumes)")
    parser.add_argument("--force", action="store_true", help="replace an --output file of another audit")
    args = parser.parse_args(argv)
    try:
        if args.method is None and args.broken is None:
            raise ValueError("give --method NAME (or all) and/or --broken KIND (or all)")
        if args.method not in (None, "all"):
            checks.one_of("method", args.method, METHODS)
        if args.broken not in (None, "all"):
            checks.one_of("broken control", args.broken, BROKEN)
        if args.broken is not None and args.method not in (None, "all"):
            implied = {BROKEN[kind][0] for kind in (BROKEN if args.broken == "all" else [args.broken])}
            if implied != {args.method}:
                raise ValueError(f"--broken {args.broken} breaks {', '.join(sorted(implied))}, not {args.method!r}: "
                                 "leave --method out, or give --method all to audit every method as well")
        checks.integer("--trials", args.trials, minimum=4)
        args.sample_rate = list(dict.fromkeys(checks.rate("--sample-rate", q) for q in args.sample_rate))
        checks.open_unit("--delta", args.delta)
        accounting.check_accountant(args.accountant)
        if not plan(args):
            raise ValueError(f"nothing to audit: {args.method!r} is full-batch, audited at --sample-rate 1 only")
    except ValueError as error:
        parser.error(str(error))
    return parser, args


def plan(args: argparse.Namespace) -> list[tuple[str, str | None, float]]:
    """The (method, broken control, sample rate) of every audit asked for. With ``--broken``, ``--method NAME``
    only names the method it breaks; ``--method all`` adds every registered method."""
    audits_methods = args.method == "all" or (args.method is not None and args.broken is None)
    names = (list(METHODS) if args.method == "all" else [args.method]) if audits_methods else []
    kinds = [] if args.broken is None else list(BROKEN) if args.broken == "all" else [args.broken]
    jobs = []
    for q in args.sample_rate:
        jobs += [(name, None, q) for name in names if q == 1 or not METHODS[name].full_batch]
        jobs += [(BROKEN[kind][0], kind, q) for kind in kinds]
    return jobs


def run_parameters(args: argparse.Namespace, jobs) -> dict:
    """What makes two invocations the same audit (a rerun with equal parameters resumes)."""
    return {"trials": args.trials, "delta": args.delta, "accountant": args.accountant, "seed": args.seed,
            "audits": [list(job) for job in jobs], "confidence": CONFIDENCE}


def main(argv=None) -> int:
    parser, args = parse(argv)
    jobs = plan(args)
    expected = run_parameters(args, jobs)
    results = [] if args.output is None else resumable(args.output, expected, "results", force=args.force,
                                                       parser=parser)
    finished = {(r["method"], r["broken"], r["sample_rate"]) for r in results}
    each = 1 - (1 - CONFIDENCE) / len(jobs)
    options = dict(trials=args.trials, delta=args.delta, accountant=args.accountant, seed=args.seed, confidence=each)
    for method, broken, q in jobs:
        if (method, broken, q) in finished:
            continue
        result = audit_broken(broken, sample_rate=q, **options) if broken else audit(method, sample_rate=q, **options)
        results.append(result.to_dict())
        if args.output is not None:
            io.atomic_write_json({"parameters": expected, "results": results}, args.output)
        print(f"audited {method}{f' ({broken})' if broken else ''} at q = {q}: mu >= {result.mu_lower:.3f} "
              f"(claimed {result.mu_claimed:.3f}), {result.seconds:.1f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    else:
        print(tabulate([[r[c] for c in COLUMNS] for r in results], headers=COLUMNS, floatfmt=".3f"))
    return 1 if any(r["flagged"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
