r"""What a benchmark chapter shows: its cells, tables, figures and verdicts on the papers' claims.

The chapters of :data:`dpbook.digits_benchmark.BENCHMARK` and :data:`dpbook.mnist5k_benchmark.BENCHMARK` render
their result files through these functions, so that both read their numbers, test the papers' claims and draw
their figures the same way.

A claim is tested with one rule (:func:`verdict`): the difference of two cells' means counts only when it exceeds
``z`` Welch standard errors (:func:`dpbook.results.difference`).

>>> WORDS["higher"][1], WORDS["lower"][1], WORDS["on par"][0]
('supports', 'contradicts', 'consistent (both within noise)')
"""

from __future__ import annotations

import statistics
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from dpbook import results
from dpbook.benchmark import PROTOCOLS, Benchmark
from dpbook.experiment import Experiment, plan_of
from dpbook.plotting import legend_below, method_colour

Cells = Mapping[tuple[str, float, str], dict]

#: expectation -> verdict for a difference a - b significantly above (+1), below (-1) or within noise (0).
WORDS = {
    "higher": {1: "supports", -1: "contradicts", 0: "cannot tell"},
    "lower": {1: "contradicts", -1: "supports", 0: "cannot tell"},
    "not lower": {1: "supports", -1: "contradicts", 0: "consistent (within noise)"},
    "on par": {1: "differs (a gap the paper does not show)", -1: "differs (a gap the paper does not show)",
               0: "consistent (both within noise)"},
}


def cells(benchmark: Benchmark, results_dir=results.RESULTS_DIR, *, methods: Sequence[str] | None = None,
          epsilons: Sequence[float] | None = None, seeds: int | None = None, epochs: int | None = None) -> dict:
    """Every cell ``(method, epsilon, protocol) -> cell`` (see :func:`dpbook.reproduce.cell`)."""
    return {(m, e, p): benchmark.cell(m, e, p, results_dir, seeds=seeds, epochs=epochs)
            for m in (methods or benchmark.methods) for e in (epsilons or benchmark.epsilons) for p in PROTOCOLS}


def status_line(the_cells: Cells) -> str:
    """``"cells: ok 9, partial 0, not run yet 0, unreachable 3"``."""
    return "cells: " + ", ".join(f"{s} {sum(c['status'] == s for c in the_cells.values())}"
                                 for s in ("ok", "partial", "not run yet", "unreachable"))


def values(the_cells: Cells, method: str, epsilon: float, protocol: str) -> list[float] | None:
    """A cell's values when it has two or more (a difference needs them), else None."""
    c = the_cells.get((method, epsilon, protocol))
    return c["values"] if c is not None and len(c["values"]) >= 2 else None


def cell_text(cell: Mapping) -> str:
    """``"93.1 ± 0.4 (n=5)"`` in % test accuracy, or ``"unreachable"``."""
    if cell["status"] == "unreachable":
        return "unreachable"
    return results.format_mean_std(*results.mean_std([100 * v for v in cell["values"]]), digits=1)


def accuracy_table(the_cells: Cells, methods: Sequence[str], epsilons: Sequence[float], protocol: str) -> str:
    """One protocol's cells as a Markdown table: a row per method, a column per epsilon."""
    columns = [f"eps={e:g}" for e in epsilons]
    rows = [{"method": m, **{c: cell_text(the_cells[(m, e, protocol)]) for c, e in zip(columns, epsilons)}}
            for m in methods]
    return results.markdown_table(rows, ["method", *columns])


def unreachable(the_cells: Cells) -> dict[str, list[str]]:
    """The reasons cells are unreachable (first 90 characters) -> the cells, e.g. ``"adaclip eps=1 rdp"``."""
    reasons: dict[str, list[str]] = {}
    for (m, e, p), c in the_cells.items():
        if c["status"] == "unreachable":
            reasons.setdefault(c["reason"].split(":")[0][:90], []).append(f"{m} eps={e:g} {p}")
    return reasons


def chosen_table(the_cells: Cells, grids: Mapping[str, list], methods: Sequence[str],
                 epsilons: Sequence[float]) -> str:
    """The best grid point of each tuned method at each epsilon under "none" (the point re-trained)."""
    rows = []
    for m in (m for m in methods if len(grids[m]) > 1):
        row = {"method": m}
        for e in epsilons:
            c = the_cells[(m, e, "none")]
            row[f"eps={e:g}"] = (", ".join(f"{k}={v:g}" for k, v in c["chosen"][0].items()) if c["chosen"]
                                 else c["status"])
        rows.append(row)
    return results.markdown_table(rows, ["method"] + [f"eps={e:g}" for e in epsilons])


# ----------------------------------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------------------------------

def plot_accuracy(the_cells: Cells, methods: Sequence[str], epsilons: Sequence[float], *, delta: str,
                  title: str):
    """Test accuracy (mean ± std) against epsilon, one panel per protocol, one colour per method."""
    fig, axs = plt.subplots(1, 3, figsize=(11, 4.6), sharey=True, layout="constrained")
    for ax, protocol in zip(axs, PROTOCOLS):
        for m in methods:
            points = [(e, *results.mean_std([100 * v for v in the_cells[(m, e, protocol)]["values"]])[:2])
                      for e in epsilons if values(the_cells, m, e, protocol)]
            if points:
                xs, ys, es = zip(*points)
                ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, color=method_colour(m), label=m)
        ax.set_xscale("log", base=2)
        ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
        ax.set_xlabel(f"privacy budget ε ({delta})")
        ax.set_title(f"protocol '{protocol}'")
        ax.grid(alpha=0.3)
    axs[0].set_ylabel("test accuracy (%), mean ± std")
    legend_below(fig, axs, ncols=6)
    fig.suptitle(title)
    return fig


def plot_tuning_cost(the_cells: Cells, grids: Mapping[str, list], methods: Sequence[str],
                     epsilons: Sequence[float], *, title: str):
    """Left: accuracy lost to charging the search (none - charged) against G; right: the charged runs' sigma."""
    fig, axs = plt.subplots(1, 2, figsize=(11, 5), layout="constrained")
    for protocol, marker in (("rdp", "o"), ("lt", "s")):
        for m in methods:
            G = len(grids[m])
            for e in epsilons:
                free, charged = values(the_cells, m, e, "none"), values(the_cells, m, e, protocol)
                if free and charged:
                    drop = 100 * (np.mean(free) - np.mean(charged))
                    axs[0].scatter(G, drop, marker=marker, color=method_colour(m), s=14 + 6 * e,
                                   label=m if (protocol, e) == ("rdp", epsilons[-1]) else None)
                sigma = the_cells[(m, e, protocol)]["sigma"]
                if sigma is not None:
                    axs[1].scatter(G, sigma, marker=marker, color=method_colour(m), s=14 + 6 * e)
    axs[0].set(xscale="log", xlabel="grid size G (log)", ylabel="accuracy lost to tuning cost (points)",
               title="none − charged\n(marker size grows with ε; o: RDP, s: LT)")
    axs[1].set(xscale="log", yscale="log", xlabel="grid size G (log)", ylabel="noise multiplier σ of each run (log)",
               title="σ of the charged runs\n(o: RDP, s: LT)")
    axs[0].axhline(0, color="black", lw=0.8)
    legend_below(fig, axs, ncols=6)
    for ax in axs:
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return fig


# ----------------------------------------------------------------------------------------------------------------
# The papers' claims
# ----------------------------------------------------------------------------------------------------------------

def verdict(the_cells: Cells, claim: str, a: str, b: str, epsilons: Sequence[float], expect: str = "higher",
            protocols: Sequence[str] = ("none",), *, z: float = 2.0) -> list[dict]:
    """The claim "a compared with b as ``expect`` says", one row per (protocol, epsilon) where both cells have
    values: the difference (points, ± its standard error) and the verdict (:data:`WORDS`)."""
    out = []
    for p in protocols:
        for e in epsilons:
            va, vb = values(the_cells, a, e, p), values(the_cells, b, e, p)
            if va is None or vb is None:
                continue
            d = results.difference(va, vb, z=z)
            out.append({"claim": claim, "protocol": p, "eps": f"{e:g}",
                        "difference (points)": f"{100 * d['diff']:+.2f} ± {100 * d['se']:.2f}",
                        "verdict": WORDS[expect][d["sign"]]})
    return out


def paper_run_std(table: Mapping, dataset: str) -> float:
    """The median spread a paper prints for ``dataset`` (its "± std" over 5 runs), in points."""
    return statistics.median(row["std"] for row in results.paper_rows(table, dataset=dataset) if "std" in row)


def paper_claims(the_cells: Cells, table: Mapping, pairs: Sequence[tuple[str, str]], *, dataset: str,
                 epsilons: Sequence[float], run_std: float, z: float = 2.0, **match) -> list[dict]:
    """Each pair ``(a, b)`` of the paper's table at each of its epsilons: what the paper shows and what this
    benchmark says about it.

    The paper's difference a - b shows a direction when it exceeds ``z`` standard errors: from the printed spreads
    (5 runs each) when the table has them, else from ``run_std`` for single runs (sqrt(2) run_std); otherwise
    the paper shows the two "on par". The benchmark's cell at the same epsilon and protocol is then judged by
    :func:`verdict`'s rule; an epsilon or a cell the benchmark does not have "cannot speak" to the claim.
    ``match`` selects rows (e.g. ``optimizer="sgd"``).
    """
    rows = []
    for a, b in pairs:
        for ra in results.paper_rows(table, dataset=dataset, method=a, **match):
            rb = next(iter(results.paper_rows(table, dataset=dataset, method=b, epsilon=ra["epsilon"], **match)), None)
            if rb is None:
                continue
            paper_diff = ra["value"] - rb["value"]
            se = (np.hypot(ra["std"], rb["std"]) / np.sqrt(5) if "std" in ra and "std" in rb
                  else np.sqrt(2) * run_std)
            direction = 0 if abs(paper_diff) <= z * se else int(np.sign(paper_diff))
            expect = {1: "higher", -1: "lower", 0: "on par"}[direction]
            e, protocol = float(ra["epsilon"]), ra.get("protocol", "none")
            row = {"paper": f"{table['paper']} {table['table']}", "claim": f"{a} {_RELATION[expect]} {b}",
                   "protocol": protocol, "eps": f"{e:g}", "paper (points)": f"{paper_diff:+.2f}"}
            va, vb = values(the_cells, a, e, protocol), values(the_cells, b, e, protocol)
            if e not in epsilons:
                rows.append(row | {"here (points)": "", "verdict": f"cannot speak (no ε = {e:g} here)"})
            elif va is None or vb is None:
                rows.append(row | {"here (points)": "", "verdict": "cannot speak (a cell is unreachable or empty)"})
            else:
                d = results.difference(va, vb, z=z)
                rows.append(row | {"here (points)": f"{100 * d['diff']:+.2f} ± {100 * d['se']:.2f}",
                                   "verdict": WORDS[expect][d["sign"]]})
    return rows


_RELATION = {"higher": "beats", "lower": "loses to", "on par": "on par with"}


# ----------------------------------------------------------------------------------------------------------------
# Settings side by side
# ----------------------------------------------------------------------------------------------------------------

def setting_noise(N: int, batch_size: int, epochs: int, delta: float | None, epsilon: float) -> dict:
    """What a setting's budget buys: q, T, the noise multiplier sigma of one run (no tuning cost), and the noise of
    one epoch's summed gradient relative to the largest clipped sum it could carry, sigma sqrt(N/B) / N =
    sigma / sqrt(N B) (per unit of the clipping bound; lower is better).

    DPDR's MNIST setting at epsilon = 3 needs the sigma its Table 2 prints for DP-SGD (0.803):

    >>> round(setting_noise(60_000, 256, 20, 1e-5, 3.0)["sigma"], 3)
    0.803
    """
    exp = Experiment(study="setting", dataset="mnist", model="mnist_cnn", method="dpsgd", epsilon=epsilon,
                     delta=delta, epochs=epochs, batch_size=batch_size)
    plan = plan_of(exp, N)
    return {"q": plan.sample_rate, "T": plan.steps, "delta": plan.delta, "sigma": plan.sigma,
            "epoch noise": plan.sigma / np.sqrt(N * batch_size)}
