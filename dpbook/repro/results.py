"""Result files and the papers' tables: what the book renders "paper vs reproduced" from.

Every training run of a reproduction (:func:`dpbook.repro.experiment.run_experiment`) writes one JSON file under
``data/results/<study>/<method>/`` (atomically: the old file or the complete new one, never half). A record
holds the run's parameters, the plan that set its noise (sigma, what the run and the whole search are charged),
per-epoch metrics, the final accuracy, the epsilon the run actually spent, wall time, device, library versions,
git commit and seed. The papers' tables are transcribed once into ``data/paper/<paper>_table<id>.json`` (numbers
only, with table id and units). Pages compare the two with :func:`compare`, which never invents a number: a cell
without results says "not run yet".

    >>> mean_std([0.9, 0.92, 0.94])
    (0.92, 0.02, 3)
    >>> format_mean_std(*mean_std([90.0, 92.0, 94.0]))
    '92.00 ± 2.00 (n=3)'
"""

from __future__ import annotations

__all__ = [
    "REPO_ROOT", "RESULTS_DIR", "PAPER_DIR", "SCHEMA_VERSION", "git", "device_name", "versions",
    "provenance", "write_result", "nonprivate_keys", "REQUIRED_KEYS", "CorruptResultError", "ANALYSIS_DIR",
    "is_analysis", "read_result", "recorded", "repo_path", "shown_path", "load_results", "load_paper_table",
    "paper_rows",
    "mean_std", "format_mean_std", "mean_std_text", "final_metric", "compare", "difference", "markdown_table",
    "unbroken", "power_of_ten",
]

import datetime as _dt
import functools
import json
import math
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from dpbook.io import atomic_write_json
from dpbook.methods.base import is_nonprivate

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository root (results and paper tables are found relative to it, whatever the working directory).

:meta hide-value:
"""
RESULTS_DIR = REPO_ROOT / "data" / "results"
"""``data/results/`` of the repository: one folder per study.

:meta hide-value:
"""
PAPER_DIR = REPO_ROOT / "data" / "paper"
"""``data/paper/`` of the repository: the papers' tables, transcribed once.

:meta hide-value:
"""
SCHEMA_VERSION = 1


# ----------------------------------------------------------------------------------------------------------------
# Provenance
# ----------------------------------------------------------------------------------------------------------------

def git(*args: str) -> str | None:
    """``git ARGS`` in the repository this code runs from: its output, or None (no git, not a clone, an error)."""
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def _git_commit() -> dict:
    """The commit of the checkout that runs the code and whether tracked files differ from it (None outside git).

    Looked up once per process: a sweep's runs share it.
    """
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def device_name(device: torch.device | str) -> str:
    """A human-readable name of the device a run used, e.g. ``"cuda: NVIDIA H100 80GB HBM3"`` or
    ``"cpu: x86_64 (2 threads)"`` (``"(1 thread)"`` for one).

    >>> import re; bool(re.fullmatch(r"cpu: .+ \\((1 thread|\\d+ threads)\\)", device_name("cpu")))
    True
    """
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    threads = torch.get_num_threads()
    return f"{device.type}: {platform.machine() or 'unknown'} ({threads} thread{'' if threads == 1 else 's'})"


def versions() -> dict:
    """Versions of Python and of the libraries a result depends on (those that are imported)."""
    import dpbook

    found = {"python": platform.python_version(), "dpbook": dpbook.__version__, "torch": torch.__version__}
    for name in ("torchvision", "opacus", "numpy", "transformers"):
        module = sys.modules.get(name)
        if module is None and name != "transformers":
            module = __import__(name)
        if module is not None:
            found[name] = getattr(module, "__version__", "unknown")
    return found


def provenance(device: torch.device | str) -> dict:
    """Where and with what a run was made: device, versions, git commit, UTC time."""
    return {"device": device_name(device), "versions": versions(), "git": _git_commit(),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


# ----------------------------------------------------------------------------------------------------------------
# Result files
# ----------------------------------------------------------------------------------------------------------------

def write_result(record: Mapping[str, Any], path: str | Path) -> Path:
    """Write one run's record atomically as one compact JSON line (see :func:`dpbook.io.atomic_write_json`).

    A record holding a non-private statistic (:func:`nonprivate_keys`) is refused: result files hold only what the
    privacy guarantee covers (privacy hygiene rule 8).
    """
    leaked = nonprivate_keys(record)
    if leaked:
        raise ValueError(f"refusing to write {path}: the record holds the non-private statistic(s) {leaked[:5]}, "
                         f"which no DP guarantee covers; record only test-set metrics, released quantities and "
                         f"public configuration (a Trainer without nonprivate_diagnostics=True logs nothing else)")
    return atomic_write_json({"schema": SCHEMA_VERSION, **record}, path, indent=None)


def nonprivate_keys(record: Any, where: str = "") -> list[str]:
    """Where ``record`` (nested dicts and lists) has a key naming a non-private statistic
    (:func:`dpbook.methods.base.is_nonprivate`: training-set metrics, ``"nonprivate/..."`` keys).

    >>> nonprivate_keys({"final": {"test_accuracy": 0.9, "train_loss": 0.1}, "epochs": {"nonprivate/norm": [1.0]}})
    ['final.train_loss', 'epochs.nonprivate/norm']
    """
    if isinstance(record, Mapping):
        found = [f"{where}{k}" for k in record if is_nonprivate(str(k))]
        return found + [hit for k, v in record.items() for hit in nonprivate_keys(v, f"{where}{k}.")]
    if isinstance(record, (list, tuple)):
        return [hit for v in record for hit in nonprivate_keys(v, where)]
    return []


#: What every result file holds; a file without them is not a run's record.
REQUIRED_KEYS = ("experiment", "key", "final", "epsilon_spent", "sigma")


class CorruptResultError(RuntimeError):
    """A result file that is not a complete record (truncated, edited, not JSON). ``path`` names it."""

    def __init__(self, path: Path, reason: str):
        self.path = Path(path)
        super().__init__(f"{path}: corrupted result file ({reason}). It is not counted as a run: rerun its sweep or "
                         f"chapter in run mode, which moves it aside to {self.path.name}.corrupt and trains the run "
                         f"again (or move it away yourself)")


#: Where a study keeps records that are not runs (a chapter's analyses, e.g. the curves of a figure, or the
#: privacy audits of ``data/results/audit/analysis/``): each holds its ``parameters``.
ANALYSIS_DIR = "analysis"


def is_analysis(path: str | Path, root: str | Path = RESULTS_DIR) -> bool:
    """Is ``path`` (under ``root``) an analysis record, ``<study>/analysis/...``, rather than a run's result file?

    >>> is_analysis(RESULTS_DIR / "audit" / "analysis" / "white_box.json"), is_analysis(RESULTS_DIR / "s" / "r.json")
    (True, False)
    """
    parts = Path(path).relative_to(root).parts
    return len(parts) > 2 and parts[1] == ANALYSIS_DIR


def read_result(path: str | Path, required: Sequence[str] = REQUIRED_KEYS) -> dict:
    """One run's record (or, with ``required=("parameters",)``, an analysis record); a :class:`CorruptResultError`
    naming the file when it is not complete."""
    try:
        with open(path) as f:
            record = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CorruptResultError(path, f"not valid JSON: {err}") from None
    missing = [k for k in required if not isinstance(record, dict) or k not in record]
    if missing:
        raise CorruptResultError(path, f"no {', '.join(missing)}")
    return record


def recorded(path: str | Path) -> dict | None:
    """The record of the run of ``path`` if it is done (its result file exists and is complete), else None. A
    corrupted file is moved aside (``<name>.corrupt``, never deleted), reported on stderr, and the run is not done.

    >>> recorded(Path("no-such-result.json")) is None
    True
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        return read_result(path)
    except CorruptResultError as err:
        aside = path.with_name(path.name + ".corrupt")
        for n in range(1, 1000):
            if not aside.exists():
                break
            aside = path.with_name(f"{path.name}.corrupt{n}")
        path.replace(aside)
        print(f"{err}\nmoved aside to {aside}; the run will be trained again", file=sys.stderr)
        return None


def repo_path(path: str | Path | None, default: Path = RESULTS_DIR) -> Path:
    """A notebook parameter's path: None is ``default``; a relative path is relative to the repository root.

    Notebooks run with their own folder as the working directory (papermill, the book build, Colab's setup
    cell); this keeps ``results_dir="tests/_executed/results"`` meaning the same folder everywhere.

    >>> repo_path("data/results") == RESULTS_DIR, repo_path(None) == RESULTS_DIR
    (True, True)
    """
    if path is None:
        return default
    path = Path(path)
    return path if path.is_absolute() else REPO_ROOT / path


def shown_path(path: str | Path) -> str:
    """``path`` as a page shows it: relative to the repository root when it is inside it (the same on every
    machine), else as given.

    >>> shown_path(RESULTS_DIR / "dcsgd"), shown_path("/elsewhere/results")
    ('data/results/dcsgd', '/elsewhere/results')
    """
    path = Path(path)
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def load_results(study: str, *, root: str | Path = RESULTS_DIR, smoke: bool = False, **match) -> list[dict]:
    """All records of ``study`` whose experiment fields equal ``match`` (e.g. ``method="dpsgd", epsilon=4.0``).

    Smoke-mode records are skipped unless ``smoke=True``: a page never mixes them with real runs.
    """
    folder = Path(root) / study
    records = []
    for path in sorted(folder.rglob("*.json")):
        if is_analysis(path, root):
            continue
        record = read_result(path)
        exp = record.get("experiment", {})
        if bool(exp.get("smoke", False)) != smoke:
            continue
        if all(_equal(exp.get(k), v) for k, v in match.items()):
            records.append(record)
    return records


def _equal(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b


# ----------------------------------------------------------------------------------------------------------------
# Paper tables
# ----------------------------------------------------------------------------------------------------------------

def load_paper_table(name: str, *, root: str | Path = PAPER_DIR) -> dict:
    """A transcribed table, e.g. ``load_paper_table("dcsgd_table4")`` (see ``data/paper/``)."""
    path = Path(root) / f"{name}.json"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in Path(root).glob("*.json"))) or "none"
        raise FileNotFoundError(f"no transcribed table {name!r} in {root} (known: {known})")
    with open(path) as f:
        return json.load(f)


def paper_rows(table: Mapping, **match) -> list[dict]:
    """The rows of a transcribed table whose keys equal ``match`` (e.g. ``dataset="mnist", method="dpsgd"``)."""
    return [row for row in table["rows"] if all(_equal(row.get(k), v) for k, v in match.items())]


# ----------------------------------------------------------------------------------------------------------------
# Summaries
# ----------------------------------------------------------------------------------------------------------------

def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """Mean, sample standard deviation (n - 1; NaN for one value) and count, rounded to 12 digits."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, 0
    mean = sum(xs) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else math.nan
    return round(mean, 12), round(std, 12), n


def format_mean_std(mean: float, std: float, n: int, *, digits: int = 2, spec: str | None = None) -> str:
    """``"92.00 ± 2.00 (n=3)"``; ``"not run yet"`` when n = 0; no ± for a single value. ``spec`` (e.g. ``".3g"``)
    formats both numbers instead of ``digits`` decimals.

    >>> format_mean_std(*mean_std([91.0, 93.0, 92.0])), format_mean_std(*mean_std([0.0127, 0.0131]), spec=".2g")
    ('92.00 ± 1.00 (n=3)', '0.013 ± 0.00028 (n=2)')
    """
    spec = spec or f".{digits}f"
    if n == 0:
        return "not run yet"
    if n == 1 or math.isnan(std):
        return f"{mean:{spec}} (n=1)"
    return f"{mean:{spec}} ± {std:{spec}} (n={n})"


def mean_std_text(values: Iterable[float], *, scale: float = 1.0, digits: int = 2, spec: str | None = None,
                  seeds: int | None = None) -> str:
    """:func:`format_mean_std` of :func:`mean_std` of the values times ``scale`` (e.g. 100 for accuracies in %);
    without the count when it is ``seeds``, the count a table states once for all its cells.

    >>> mean_std_text([0.91, 0.93], scale=100), mean_std_text([0.91, 0.93], scale=100, seeds=2)
    ('92.00 ± 1.41 (n=2)', '92.00 ± 1.41')
    """
    text = format_mean_std(*mean_std([scale * float(v) for v in values]), digits=digits, spec=spec)
    return text.removesuffix(f" (n={seeds})") if seeds else text


def final_metric(record: Mapping, metric: str = "test_accuracy") -> float:
    """The metric at the end of the run (the last epoch's row)."""
    return float(record["final"][metric])


def compare(cells: Sequence[Mapping[str, Any]], *, reproduced: Callable[[Mapping], Sequence[float]],
            paper: Callable[[Mapping], Mapping | None], scale: float = 100.0) -> list[dict]:
    """One "paper vs reproduced" row per cell.

    ``cells`` are the table's cells (dicts of keys such as dataset, epsilon, method); ``reproduced(cell)`` returns
    the values measured for it (one per seed or per search; fractions, multiplied by ``scale``) and
    ``paper(cell)`` the transcribed row (or None). Each row holds the cell's keys, ``paper`` (value, and std if
    printed), ``reproduced`` (mean ± std (n), or "not run yet"), and ``difference`` (reproduced mean minus paper
    value, in the table's units) when both exist.
    """
    rows = []
    for cell in cells:
        values = [scale * v for v in reproduced(cell)]
        mean, std, n = mean_std(values)
        ref = paper(cell)
        ref_text = "not in the paper" if ref is None else (
            f"{ref['value']:.2f}" + (f" ± {ref['std']:.2f}" if ref.get("std") is not None else ""))
        difference = "" if ref is None or n == 0 else f"{mean - ref['value']:+.2f}"
        rows.append({**cell, "paper": ref_text, "reproduced": format_mean_std(mean, std, n),
                     "difference": difference, "n": n, "mean": mean, "std": std})
    return rows


def difference(a: Sequence[float], b: Sequence[float], *, z: float = 2.0) -> dict:
    """Mean of ``a`` minus mean of ``b``, its standard error, and whether it is beyond ``z`` standard errors.

    The standard error is Welch's, sqrt(s_a^2/n_a + s_b^2/n_b) (sample stds; each side needs two values).
    ``sign`` is +1 (a above b by more than z SE), -1 (below by more than z SE) or 0 (within noise).

    >>> d = difference([0.90, 0.92, 0.94], [0.80, 0.82, 0.84])
    >>> round(d["diff"], 6), round(d["se"], 6), d["sign"]
    (0.1, 0.01633, 1)
    >>> difference([0.90, 0.92], [0.91, 0.93])["sign"]
    0
    """
    ma, sa, na = mean_std(a)
    mb, sb, nb = mean_std(b)
    if na < 2 or nb < 2:
        raise ValueError(f"difference needs at least two values on each side, got {na} and {nb}")
    se = math.sqrt(sa ** 2 / na + sb ** 2 / nb)
    diff = ma - mb
    sign = 0 if abs(diff) <= z * se else (1 if diff > 0 else -1)
    return {"diff": diff, "se": se, "sign": sign}


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str],
                   headers: Sequence[str] | None = None) -> str:
    """A Markdown table of ``rows`` (dicts) restricted to ``columns`` (for ``IPython.display.Markdown``)."""
    headers = list(columns if headers is None else headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell_text(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def unbroken(text: str) -> str:
    """``text`` with its spaces, and its hyphens between two letters or digits, made no-break (U+00A0, U+2011): a
    table cell that a browser wraps only between such pieces, e.g. ``"7 ms, " + unbroken("1.72x (1.57 to 1.84)")``
    breaks after the comma alone. A minus sign stays a minus sign.

    >>> unbroken("1.000 / -0.952") == "1.000\u00a0/\u00a0-0.952", unbroken("DC-SGD-E") == "DC\u2011SGD\u2011E"
    (True, True)
    """
    return re.sub(r"(?<=\w)-(?=\w)", "\u2011", text.replace(" ", "\u00a0"))


def power_of_ten(x: float) -> str:
    r"""``x`` as TeX (without the dollars) in powers of ten, as the book writes a small :math:`\delta`.

    >>> power_of_ten(1e-5), power_of_ten(0.00025)
    ('10^{-5}', '2.5\\times10^{-4}')
    """
    mantissa, exponent = f"{x:.1e}".split("e")
    return ("" if float(mantissa) == 1 else rf"{float(mantissa):g}\times") + f"10^{{{int(exponent)}}}"


def _cell_text(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
