r"""What a benchmark chapter shows: its cells, tables, figures and verdicts on the papers' claims.

The chapters of :data:`dpbook.repro.digits_benchmark.BENCHMARK` and
:data:`dpbook.repro.mnist5k_benchmark.BENCHMARK` render their result files through these functions, so that both
read their numbers, test the papers' claims and draw
their figures the same way.

A claim is tested with one rule (:func:`judge`): the difference of two cells' means counts only when it exceeds
``z`` Welch standard errors (:func:`dpbook.repro.results.difference`).

The papers' claims are one register, :data:`dpbook.repro.claims.CLAIMS`, which both chapters judge (:func:`judge`).
"""

from __future__ import annotations

__all__ = [
    "Cells", "WORDS", "cells", "status_line", "check_complete", "complete", "values", "accuracy_table",
    "epsilon_header", "unreachable", "varied", "chosen_table", "plot_accuracy", "plot_tuning_cost", "judge",
    "claims_markdown", "difference_text", "versus_baseline",
    "against", "identical_counts", "identical_table", "histogram_noise_table",
    "setting_noise"
]

import collections
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import ticker

from dpbook.methods.dcsgd import run_sigma_H
from dpbook.protocols import protocol_label
from dpbook.repro import results
from dpbook.repro.benchmark import CHARGED, PROTOCOLS, Benchmark
from dpbook.repro.cast import CAST
from dpbook.repro.claims import CLAIMS, WORDS, Claim, disagreements
from dpbook.repro.experiment import Experiment, plan_of
from dpbook.repro.plotting import hyperparameter_label, legend_below, method_colour, method_label

Cells = Mapping[tuple[str, float, str], dict]

def cells(benchmark: Benchmark, results_dir=results.RESULTS_DIR, *, methods: Sequence[str] | None = None,
          epsilons: Sequence[float] | None = None, seeds: int | None = None, epochs: int | None = None) -> dict:
    """Every cell ``(method, epsilon, protocol) -> cell`` (see :func:`dpbook.repro.reproduce.cell`); None means the
    benchmark's own, and the rest is checked first (:meth:`~dpbook.repro.benchmark.Benchmark.plan`)."""
    plan = benchmark.plan(methods=methods, epsilons=epsilons, seeds=seeds, epochs=epochs)
    return {(m, e, p): benchmark.cell(m, e, p, results_dir, seeds=seeds, epochs=epochs)
            for m in plan["methods"] for e in plan["epsilons"] for p in PROTOCOLS}


def status_line(the_cells: Cells) -> str:
    """How many cells have results, in words; the partial, not-run and unreachable ones only when there are any.

    >>> status_line({i: {"status": s} for i, s in enumerate(["ok"] * 9 + ["unreachable"] * 3)})
    '9 of 12 cells have results; 3 are unreachable at their budget'
    >>> status_line({i: {"status": s} for i, s in enumerate(["ok", "partial", "not run yet", "not run yet"])})
    '1 of 4 cells have results; 1 has only some of its runs; 2 are not run yet'
    >>> status_line({0: {"status": "ok"}, 1: {"status": "ok"}})
    'all 2 cells have results'
    """
    n = collections.Counter(c["status"] for c in the_cells.values())
    total = len(the_cells)
    if n["ok"] == total:
        return f"all {total} cells have results"
    parts = [f"{n['ok']} of {total} cells have results"]
    if n["partial"]:
        some = "has only some of its" if n["partial"] == 1 else "have only some of their"
        parts.append(f"{n['partial']} {some} runs")
    if n["not run yet"]:
        parts.append(f"{n['not run yet']} {'is' if n['not run yet'] == 1 else 'are'} not run yet")
    if n["unreachable"]:
        parts.append(f"{n['unreachable']} {'is' if n['unreachable'] == 1 else 'are'} unreachable at their budget")
    return "; ".join(parts)


def check_complete(benchmark: Benchmark, the_cells: Cells, *, seeds: int, epochs: int, command: str) -> None:
    """The committed results are the benchmark's sweep run to the end (``command``): on its whole grid, at its own
    seeds and epochs, every cell is complete or unreachable for a reason its method's row of the cast allows
    (:attr:`dpbook.repro.cast.Role.unreachable_because`: Andrew et al.'s fixed sigma_b = B/20, DPDR's GDR steps
    alone); LT's per-run budget at epsilon = 1 is reachable (the RDP orders grow past 63). A ValueError names the
    other cells. Cells of a smaller
    selection, or at other seeds or epochs, are a reader's subset: nothing is checked.

    >>> from dpbook.repro.digits_benchmark import BENCHMARK as b
    >>> whole = {(m, e, p): {"status": "ok", "values": [0.5] * 5, "sigma": 1.0}
    ...          for m in b.methods for e in b.epsilons for p in PROTOCOLS}
    >>> check_complete(b, whole, seeds=5, epochs=10, command="python -m dpbook.repro.sweep digits")
    >>> check_complete(b, whole | {("dpsgd", 1.0, "lt"): {"status": "partial"}}, seeds=5, epochs=10,
    ...                command="python -m dpbook.repro.sweep digits")
    Traceback (most recent call last):
    ...
    ValueError: rerun `python -m dpbook.repro.sweep digits`: DP-SGD eps=1 lt is partial
    """
    whole = {(m, e, p) for m in benchmark.methods for e in benchmark.epsilons for p in PROTOCOLS}
    if set(the_cells) != whole or seeds != benchmark.seeds or epochs != benchmark.setting["epochs"]:
        return
    wrong = []
    for (m, e, p), c in the_cells.items():
        where = f"{method_label(m)} eps={e:g} {p}"
        if c["status"] == "ok" and not (all(0.0 <= v <= 1.0 for v in c["values"]) and c["sigma"] > 0):
            wrong.append(f"{where} holds accuracies outside [0, 1] or no sigma")
        elif c["status"] == "unreachable" and not any(why in c["reason"] for why in CAST[m].unreachable_because):
            wrong.append(f"{where} is unreachable: {c['reason']}")
        elif c["status"] not in ("ok", "unreachable"):
            wrong.append(f"{where} is {c['status']}")
    if wrong:
        raise ValueError(f"rerun `{command}`: " + "; ".join(wrong))


def complete(the_cells: Cells) -> bool:
    """Whether every cell is done: all its runs recorded, or unreachable. A chapter checks its prose's claims on
    complete cells only (a cell that is still training has no mean).

    >>> complete({("dpsgd", 1.0, "none"): {"status": "ok"}}), complete({("dpsgd", 1.0, "none"): {"status": "partial"}})
    (True, False)
    """
    return all(c["status"] in ("ok", "unreachable") for c in the_cells.values())


def values(the_cells: Cells, method: str, epsilon: float, protocol: str) -> list[float] | None:
    """A complete cell's values (two or more: a difference needs them), else None."""
    c = the_cells.get((method, epsilon, protocol))
    return c["values"] if c is not None and c["status"] == "ok" and len(c["values"]) >= 2 else None


def _cell_text(cell: Mapping, seeds: int | None = None) -> str:
    """``"93.1 ± 0.4 (n=5)"`` in % test accuracy, without the count when it is the table's ``seeds``; or
    ``"unreachable"``."""
    if cell["status"] == "unreachable":
        return "unreachable"
    return results.mean_std_text(cell["values"], scale=100, digits=1, seeds=seeds)


def accuracy_table(the_cells: Cells, methods: Sequence[str], epsilons: Sequence[float], protocol: str) -> str:
    """One protocol's cells as a Markdown table: a row per method, a column per epsilon; the number of seeds is
    said once, under the table (a cell with fewer, still training, says how many it has)."""
    shown = [the_cells[(m, e, protocol)] for m in methods for e in epsilons]
    counts = collections.Counter(len(c["values"]) for c in shown if c["status"] != "unreachable" and c["values"])
    seeds = max(counts) if counts else None
    columns = [f"eps={e:g}" for e in epsilons]
    rows = [{"method": method_label(m),
             **{c: _cell_text(the_cells[(m, e, protocol)], seeds) for c, e in zip(columns, epsilons)}} for m in methods]
    note = "" if seeds is None else (f"\n\nTest accuracy (%), mean ± standard deviation over {seeds} seeds"
                                     + ("; a cell with fewer says how many." if len(counts) > 1 else "."))
    return results.markdown_table(rows, ["method", *columns], ["method", *map(epsilon_header, epsilons)]) + note


def epsilon_header(epsilon: float) -> str:
    """A table's column header for a budget: ``"ε = 2"``."""
    return f"ε = {epsilon:g}"


def unreachable(the_cells: Cells) -> dict[str, list[str]]:
    """The reasons cells are unreachable (first 90 characters) -> the cells, e.g. ``"adaclip eps=1 rdp"``."""
    reasons: dict[str, list[str]] = {}
    for (m, e, p), c in the_cells.items():
        if c["status"] == "unreachable":
            reasons.setdefault(c["reason"].split(":")[0][:90], []).append(f"{method_label(m)} eps={e:g} {p}")
    return reasons


def varied(grid: Sequence[Mapping]) -> list[str]:
    """The hyperparameters a grid varies, in the order of its points (those it holds fixed say nothing about a
    choice).

    >>> varied([{"C": 1, "r": 0.01, "s": 0.3}, {"C": 1, "r": 0.01, "s": 0.8}])
    ['s']
    """
    keys = dict.fromkeys(k for point in grid for k in point)
    return [k for k in keys if len({repr(point.get(k)) for point in grid}) > 1]


def chosen_table(the_cells: Cells, grids: Mapping[str, list], methods: Sequence[str],
                 epsilons: Sequence[float]) -> str:
    """The best grid point of each tuned method at each epsilon under "none" (the point re-trained): a row per
    hyperparameter the method's grid varies (:func:`varied`; the grid holds the others fixed), a column per
    epsilon, so that the table stays narrow however many hyperparameters a method has; a hyperparameter is written as
    the text writes it (:func:`dpbook.repro.plotting.hyperparameter_label`)."""
    columns = [f"eps={e:g}" for e in epsilons]
    rows = []
    for m in (m for m in methods if len(grids[m]) > 1):
        for k in varied(grids[m]):
            row = {"method": method_label(m), "hyperparameter": hyperparameter_label(k, m)}
            for column, e in zip(columns, epsilons):
                c = the_cells[(m, e, "none")]
                row[column] = c["chosen"][0].get(k) if c["chosen"] else c["status"]  # markdown_table formats it
            rows.append(row)
    return results.markdown_table(rows, ["method", "hyperparameter", *columns],
                                  ["method", "hyperparameter", *map(epsilon_header, epsilons)])


# ----------------------------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------------------------

def plot_accuracy(the_cells: Cells, methods: Sequence[str], epsilons: Sequence[float], *, delta: str,
                  title: str):
    """Test accuracy (mean ± std) against epsilon, one panel per protocol (two by two), one colour per method."""
    fig, axs = plt.subplots(2, 2, figsize=(11, 8.4), sharey=True, layout="constrained")
    axs = axs.ravel()
    for ax, protocol in zip(axs, PROTOCOLS):
        for m in methods:
            points = [(e, *results.mean_std([100 * v for v in the_cells[(m, e, protocol)]["values"]])[:2])
                      for e in epsilons if values(the_cells, m, e, protocol)]
            if points:
                xs, ys, es = zip(*points)
                ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, color=method_colour(m), label=method_label(m))
        ax.set_xscale("log", base=2)
        ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
        ax.set_xlabel(f"privacy budget ε ({delta})")
        ax.set_title(protocol_label(protocol))
        ax.grid(alpha=0.3)
    for ax in axs[::2]:
        ax.set_ylabel("test accuracy (%), mean ± std")
    legend_below(fig, axs, ncols=6)
    fig.suptitle(title)
    return fig


def _dodged(grids: Mapping[str, list], methods: Sequence[str]) -> dict[tuple[str, str], float]:
    """(method, protocol) -> its x: its grid size G, moved sideways (in log scale) so that the methods with the same G
    and the three protocols of each stand side by side instead of on one another."""
    spots, by_G = {}, {}
    for m in methods:
        by_G.setdefault(len(grids[m]), []).append(m)
    for G, ms in by_G.items():
        for i, m in enumerate(ms):
            for j, protocol in enumerate(CHARGED):
                spots[m, protocol] = G * 10 ** (0.06 * (i - (len(ms) - 1) / 2) + 0.015 * (j - 1))
    return spots


def plot_tuning_cost(the_cells: Cells, grids: Mapping[str, list], methods: Sequence[str],
                     epsilons: Sequence[float], *, title: str):
    """Left: accuracy lost to charging the search (none - charged) against G; right: the charged runs' sigma. The
    methods that share a G, and the protocols of each, stand side by side around it (:func:`_dodged`)."""
    fig, axs = plt.subplots(1, 2, figsize=(11, 5.8), layout="constrained")
    x = _dodged(grids, methods)
    for protocol, marker in CHARGED.items():
        for m in methods:
            for e in epsilons:
                free, charged = values(the_cells, m, e, "none"), values(the_cells, m, e, protocol)
                if free and charged:
                    drop = 100 * (np.mean(free) - np.mean(charged))
                    axs[0].scatter(x[m, protocol], drop, marker=marker, color=method_colour(m), s=14 + 6 * e,
                                   label=method_label(m) if (protocol, e) == ("rdp", epsilons[-1]) else None)
                sigma = the_cells[(m, e, protocol)]["sigma"]
                if sigma is not None:
                    axs[1].scatter(x[m, protocol], sigma, marker=marker, color=method_colour(m), s=14 + 6 * e)
    for protocol, marker in CHARGED.items():  # the legend's key to the shapes
        axs[0].scatter([], [], marker=marker, color="0.45", label=f"charged by {protocol_label(protocol)}")
    axs[0].set(xscale="log", xlabel="grid size G (log; methods with one G side by side)",
               ylabel="accuracy lost to tuning cost (points)",
               title="free minus charged tuning\n(colour: method; shape: protocol; size grows with ε)")
    axs[1].set(xscale="log", yscale="log", xlabel="grid size G (log; methods with one G side by side)",
               ylabel="noise multiplier σ of each run (log)",
               title="σ of the charged runs\n(colour: method; shape: protocol)")
    axs[0].axhline(0, color="black", lw=0.8)
    legend_below(fig, axs, ncols=5)
    sizes = sorted({len(grids[m]) for m in methods})
    for ax in axs:
        ax.grid(alpha=0.3)
        ax.set_xticks(sizes, [str(G) for G in sizes])  # the grid sizes themselves, not powers of ten
        ax.xaxis.set_minor_locator(ticker.NullLocator())
    axs[1].yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))  # 1, 10: not 10^0, 10^1
    axs[1].yaxis.set_minor_formatter(ticker.FuncFormatter(
        lambda v, _: f"{v:g}" if round(v / 10 ** np.floor(np.log10(v))) in (2, 5) else ""))
    fig.suptitle(title)
    return fig


# ----------------------------------------------------------------------------------------------------------------
# The papers' claims
# ----------------------------------------------------------------------------------------------------------------

def _judged(va: Sequence[float], vb: Sequence[float], expect: str, *, z: float = 2.0) -> dict:
    """The difference of two cells' values in points (``"+1.20 ± 0.40"``) and the verdict on "a is ``expect``
    than b" (:data:`WORDS`)."""
    d = results.difference(va, vb, z=z)
    return {"here (points)": f"{100 * d['diff']:+.2f} ± {100 * d['se']:.2f}", "verdict": WORDS[expect][d["sign"]]}


def judge(the_cells: Cells, epsilons: Sequence[float], claims: Sequence[Claim] = CLAIMS, *,
          z: float = 2.0) -> list[dict]:
    """Each claim of the register at each budget the paper reports it for (its text and its short form
    :attr:`~dpbook.repro.claims.Claim.short`): the paper's difference a - b (points), this benchmark's (± its
    standard error) and the verdict; ``cannot speak`` where this benchmark has no such budget or no complete cell,
    with the reason."""
    rows = []
    for claim in claims:
        for e, (pa, pb) in claim.paper_values().items():
            row = {"paper": claim.where, "claim": claim.text, "a vs b": claim.short, "protocol": claim.protocol,
                   "eps": f"{e:g}", "paper (points)": f"{pa - pb:+.2f}"}
            cell_a, cell_b = (the_cells.get((m, e, claim.protocol)) for m in (claim.a, claim.b))
            if e not in epsilons:
                rows.append(row | {"here (points)": "", "verdict": f"cannot speak (no ε = {e:g} here)"})
            elif "unreachable" in (cell_a and cell_a["status"], cell_b and cell_b["status"]):
                rows.append(row | {"here (points)": "", "verdict": "cannot speak (a cell is unreachable)"})
            else:
                va, vb = values(the_cells, claim.a, e, claim.protocol), values(the_cells, claim.b, e, claim.protocol)
                rows.append(row | (_judged(va, vb, claim.expect, z=z) if va and vb
                                   else {"here (points)": "", "verdict": "not run yet"}))
    return rows


def claims_markdown(rows: Sequence[Mapping]) -> str:
    """:func:`judge`'s rows as a chapter shows them: a table of the claims judged at budgets this benchmark has (the
    paper's table, as "DC-SGD IV", and the claim as "a < b"), a line counting the comparisons at budgets it lacks,
    and a list of the claims whose paper's text words them otherwise than its table
    (:func:`dpbook.repro.claims.disagreements`).

    >>> lines = claims_markdown(judge({}, [2.0])).splitlines()
    >>> print("\\n".join(lines[:3]))
    | table | claim | tuning | ε | paper | here | verdict |
    |---|---|---|---|---|---|---|
    | DC-SGD IV | DC-SGD-E < DP-SGD | none | 2 | -1.43 |  | not run yet |
    >>> next(line for line in lines if line.startswith("And "))
    'And 33 comparisons at ε = 1, 3, 4, 8, which this benchmark lacks: it cannot speak to those.'
    """
    absent = [r for r in rows if r["verdict"].startswith("cannot speak (no ε")]
    shown = [r | {"table": r["paper"].replace(" Table ", " "), "verdict": r["verdict"].removesuffix(" (within noise)")}
             for r in rows if r not in absent]
    text = results.markdown_table(shown, ["table", "a vs b", "protocol", "eps", "paper (points)", "here (points)",
                                          "verdict"], ["table", "claim", "tuning", "ε", "paper", "here", "verdict"])
    if absent:
        budgets = ", ".join(sorted({r["eps"] for r in absent}, key=float))
        text += (f"\n\nAnd {len(absent)} comparisons at ε = {budgets}, which this benchmark lacks: it cannot speak "
                 "to those.")
    text += ("\n\n**Where a paper's text words a claim otherwise than its own MNIST rows show it**, the register tests "
             "the table. The text's words, what the difference is, and the rows' a − b in points:\n")
    for d in disagreements():
        table_rows = d["the table's MNIST rows (a − b, points)"]
        text += f"\n- **{d['where']}**, {d['tested here']}: {d['the text says']} ({d['what it is']}; {table_rows})."
    return text


_MARK = {1: "▲", -1: "▼", 0: "·"}


def difference_text(d: Mapping) -> str:
    """A :func:`dpbook.repro.results.difference` in points, ± its standard error, marked ▲ (above by more than z
    standard errors), ▼ (below) or · (within noise); " ± " does not break, and a zero has no sign.

    >>> difference_text({"diff": -0.0004, "se": 0.012, "sign": 0}).replace(chr(0xA0), " ")
    '0.0 ± 1.2 ·'
    >>> difference_text({"diff": 0.021, "se": 0.004, "sign": 1}).replace(chr(0xA0), " ")
    '+2.1 ± 0.4 ▲'
    """
    diff = f"{100 * d['diff']:+.1f}"
    diff = "0.0" if diff in ("+0.0", "-0.0") else diff
    return f"{diff}{results.unbroken(' ± ')}{100 * d['se']:.1f} {_MARK[d['sign']]}"



def versus_baseline(the_cells: Cells, methods: Sequence[str], epsilons: Sequence[float], protocol: str, *,
                    baseline: str = "dpsgd", z: float = 2.0) -> str:
    """Every method minus the baseline under one protocol, in points ± the standard error, marked ▲ (above by more
    than z standard errors), ▼ (below) or · (within noise): a Markdown table."""
    rows = []
    for m in (m for m in methods if m != baseline):
        row = {"method": method_label(m)}
        for e in epsilons:
            va, vb = values(the_cells, m, e, protocol), values(the_cells, baseline, e, protocol)
            if va is None or vb is None:
                row[f"eps={e:g}"] = the_cells[(m, e, protocol)]["status"] if va is None else "—"
                continue
            row[f"eps={e:g}"] = difference_text(results.difference(va, vb, z=z))
        rows.append(row)
    key = (f"\n\nEach cell: the method's test accuracy minus {method_label(baseline)}'s, in points, ± the standard "
           f"error of the difference; ▲ above by more than {z:g} standard errors, ▼ below by more, · within noise.")
    return results.markdown_table(rows, ["method"] + [f"eps={e:g}" for e in epsilons],
                                  ["method", *map(epsilon_header, epsilons)]) + key


def against(the_cells: Cells, methods: Sequence[str], epsilons: Sequence[float], protocol: str, *,
            baseline: str = "dpsgd", z: float = 2.0) -> dict[str, list[tuple[str, float]]]:
    """Which (method, epsilon) cells are above, below or within noise of the baseline's under one protocol
    (complete cells only): ``{"above": [...], "below": [...], "within": [...]}``."""
    out = {"above": [], "below": [], "within": []}
    for m in (m for m in methods if m != baseline):
        for e in epsilons:
            va, vb = values(the_cells, m, e, protocol), values(the_cells, baseline, e, protocol)
            if va is not None and vb is not None:
                sign = results.difference(va, vb, z=z)["sign"]
                out[{1: "above", -1: "below", 0: "within"}[sign]].append((m, e))
    return out


def identical_counts(the_cells: Cells, group: Sequence[str], epsilons: Sequence[float],
                     seeds: int) -> dict[float, int]:
    """epsilon -> in how many of the seeds the methods of ``group`` give exactly the same test accuracy under
    "none" (DP-SGD, Auto-S, PSAC and PSASC coincide under Adam when every example is clipped); only the epsilons
    where every method of the group has all its seeds; none with fewer than two methods (one method agrees with
    itself)."""
    counts = {}
    for e in epsilons if len(group) > 1 else []:
        per_method = [the_cells[(m, e, "none")]["values"] for m in group]
        if all(len(v) == seeds for v in per_method):
            counts[e] = sum(len({round(v[i], 9) for v in per_method}) == 1 for i in range(seeds))
    return counts


def identical_table(the_cells: Cells, group: Sequence[str], epsilons: Sequence[float], seeds: int) -> str:
    """:func:`identical_counts` as a one-row Markdown table: a column per epsilon, the seeds in which the methods of
    ``group`` give identical test accuracy (a sentence saying so when ``group`` has fewer than two methods).

    >>> same = {(m, 1.0, "none"): {"values": [0.9, v]} for m, v in (("dpsgd", 0.8), ("autos", 0.7))}
    >>> print(identical_table(same, ["dpsgd", "autos"], [1.0], 2))
    | seeds with identical accuracy | ε = 1 |
    |---|---|
    | DP-SGD, Auto-S/NSGD | 1 of 2 |
    >>> identical_table({}, ["dpsgd"], [1.0], 5)
    'The comparison needs two methods or more; this run has DP-SGD only.'
    """
    if len(group) < 2:
        has = f"{', '.join(method_label(m) for m in group)} only" if group else "none of them"
        return f"The comparison needs two methods or more; this run has {has}."
    counts = identical_counts(the_cells, group, epsilons, seeds)
    row = {"group": ", ".join(map(method_label, group)), **{e: f"{n} of {seeds}" for e, n in counts.items()}}
    return results.markdown_table([row], ["group", *counts],
                                  ["seeds with identical accuracy", *map(epsilon_header, counts)])


def histogram_noise_table(the_cells: Cells, epsilons: Sequence[float], batch_size: int, seeds: int,
                          bins: int = 20) -> str:
    r"""DC-SGD-P under the charged protocols, a row per epsilon and three columns per protocol: its runs'
    :math:`\sigma`, the histogram's :math:`\sigma_H` (:func:`dpbook.methods.dcsgd.run_sigma_H`, DC-SGD Secs. V-C and
    VI-B [DCSGD-38]) and its test accuracy over ``seeds``; under the table, the examples a bin holds on average,
    :math:`B/n_{\text{bins}}`. A budget where no charged cell records a :math:`\sigma` has no row.

    >>> runs = {("dcsgd-p", 1.0, "lt"): {"status": "ok", "values": [0.50, 0.56], "sigma": 4.0}}
    >>> lines = histogram_noise_table(runs, [1.0, 2.0], 128, 2).splitlines()
    >>> lines[2]
    '| 1 |  |  |  | 4.00 | 12.00 | 53.0 ± 4.2 |  |  |  |'
    >>> print(lines[-1].split(". ")[-1])
    A bin holds $B/n_{\text{bins}} = 128/20 = 6.4$ examples on average.
    """
    columns, headers = ["eps"], ["ε"]
    for p in CHARGED:
        columns += [f"{p} sigma", f"{p} sigma_H", f"{p} accuracy"]
        headers += [rf"$\sigma$ ({p.upper()})", rf"$\sigma_H$ ({p.upper()})", f"accuracy ({p.upper()})"]
    rows = []
    for e in epsilons:
        row = {"eps": f"{e:g}"}
        for p in CHARGED:
            c = the_cells.get(("dcsgd-p", e, p))
            if c and c["sigma"]:
                row |= {f"{p} sigma": f"{c['sigma']:.2f}", f"{p} sigma_H": f"{run_sigma_H(c['sigma']):.2f}",
                        f"{p} accuracy": _cell_text(c, seeds)}
        rows += [row] if len(row) > 1 else []
    return (results.markdown_table(rows, columns, headers)
            + "\n\n" + "; ".join(f"{p.upper()}: {protocol_label(p)}" for p in CHARGED)
            + f". Test accuracy (%), mean ± standard deviation over {seeds} seeds. A bin holds "
            f"$B/n_{{\\text{{bins}}}} = {batch_size}/{bins} = {batch_size / bins:.1f}$ examples on average.")


# ----------------------------------------------------------------------------------------------------------------
# Settings side by side
# ----------------------------------------------------------------------------------------------------------------

def setting_noise(N: int, batch_size: int, epochs: int, delta: float | None, epsilon: float) -> dict:
    """What a setting's budget buys: q, T, the noise multiplier sigma of one run (no tuning cost), and two ratios
    of noise to signal per coordinate and per unit of the clipping bound (lower is better): one epoch's summed
    noise against the largest clipped sum it could carry, sigma sqrt(N/B) / N = sigma / sqrt(N B) ("epoch
    noise"), and the same over the whole run, sigma sqrt(T) / (T B) = sigma / (B sqrt(T)) ("run noise").

    DPDR's MNIST setting at epsilon = 3 needs the sigma its Table 2 prints for DP-SGD (0.803):

    >>> round(setting_noise(60_000, 256, 20, 1e-5, 3.0)["sigma"], 3)
    0.803
    """
    exp = Experiment(study="setting", dataset="mnist", model="mnist_cnn", method="dpsgd", epsilon=epsilon,
                     delta=delta, epochs=epochs, batch_size=batch_size)
    plan = plan_of(exp, N)
    return {"q": plan.sample_rate, "T": plan.steps, "delta": plan.delta, "sigma": plan.sigma,
            "epoch noise": plan.sigma / np.sqrt(N * batch_size),
            "run noise": plan.sigma / (batch_size * np.sqrt(plan.steps))}
