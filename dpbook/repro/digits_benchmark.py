r"""The digits benchmark: every method, epsilon in {1, 2, 4, 8}, 5 seeds, with and without the cost of tuning.

The evidence this book can produce without a GPU. Setting (:data:`SETTING`): scikit-learn's real 8x8 digits
(1,437 train / 360 test, :func:`dpbook.data.load_digits`), the 2,410-parameter MLP :func:`dpbook.models.digits_mlp`,
10 epochs at expected batch size B = 128 (q = 0.089, T = 110 steps), delta = 1e-5, RDP accountant, Adam at
learning rate 0.01 for every method (the DC-SGD paper's Adam protocol: eta is not tuned).

Every cell is filled as :mod:`dpbook.repro.benchmark` describes, under DC-SGD's three protocols and Papernot and
Steinke's: ``"none"`` (free tuning, the best grid point re-trained with 5 seeds, as Tables IV-V), ``"rdp"``, ``"lt"``
and ``"ps"`` (the search charged to the budget by RDP composition, Liu–Talwar random stopping as Tables III and II,
or as the best of a random number of runs; 5 independent searches each).
Selection uses the test accuracy, as the papers do ("the test set is treated as public"); with 360 test examples
this favours large grids a little, which only strengthens the point the tuning-cost protocols make.

The grids (:data:`GRIDS`) scale the DC-SGD paper's Adam grids (Table VI/VII: DP-SGD 10, DC-SGD-P 9, DC-SGD-E 1,
Andrew 45, Du 90 points) by about 0.4, keeping their candidates' spread: 4, 4, 1, 18 and 36 points. Methods the
DC-SGD paper does not tune get small grids over what their own papers tune: Auto-S (AutoClip) nothing, as in DC-SGD's
App. G, PSAC r, PSASC s (DP-PSASC keeps C and r fixed), PSASC* s and its momentum constants gamma0 and gamma1
(a stated grid: the paper gives none [PSASC-15]), DPDR its clipping bound and s, DIFF the
difference bound C_d, and DIFF2 C_d, its restart period (5 or 50 steps) and the noise of its restarts relative to
its difference steps (equal, or half: :meth:`dpbook.methods.diff.DIFF2.from_plan`), which no paper fixes [DPDR-25].

One command regenerates every result file (about 5,500 runs of a third of a second each, DIFF2 twice that)::

    python -m dpbook.repro.sweep digits --jobs 2
"""

from __future__ import annotations

__all__ = ["STUDY", "SETTING", "EPSILONS", "GRIDS", "SOURCES", "BENCHMARK", "METHODS", "PROTOCOLS", "SEEDS"]

from dpbook.repro.benchmark import Benchmark, declared_grids
from dpbook.repro.cast import DIGITS
from dpbook.repro.papers.dcsgd import GRID_SIZES
from dpbook.repro.sources import Source

STUDY = DIGITS
SETTING = dict(dataset="digits", model="digits_mlp", epochs=10, batch_size=128, optimizer="adam", lr=0.01,
               delta=1e-5)
EPSILONS = (1.0, 2.0, 4.0, 8.0)

GRIDS: dict[str, list[dict]] = declared_grids(STUDY)
"""Each method's grid, as the book's cast gives it (:mod:`dpbook.repro.cast`): a list of hyperparameter dicts."""

SOURCES = {
    "dataset": Source(reading="DCSGD-47"),
    "model": Source(reading="DCSGD-47"),
    "epochs": Source("DC-SGD Sec. V-C", note="the small CNN's"),
    "batch_size": Source(reading="DCSGD-47"),
    "optimizer": Source("DC-SGD Sec. V-C", note="DC-SGD's Adam protocol"),
    "lr": Source(reading="DCSGD-47"),
    "delta": Source("DPDR App. A.1; DP-PSASC Table II"),
    "epsilons": Source("DC-SGD Sec. V-C"),
    "seeds": Source("DC-SGD Sec. VI-B", note="5 runs, as Tables IV and V"),
    "grids": Source("DC-SGD Table VII", "DCSGD-47", note="scaled by 0.4"),
}
"""Where each setting comes from (:mod:`dpbook.repro.sources`)."""

BENCHMARK = Benchmark(study=STUDY, setting=SETTING, epsilons=EPSILONS, grids=GRIDS, paper_G=GRID_SIZES,
                      sources=SOURCES)
METHODS: tuple[str, ...] = BENCHMARK.methods
PROTOCOLS = BENCHMARK.protocols
SEEDS = BENCHMARK.seeds
base, cell, run = BENCHMARK.base, BENCHMARK.cell, BENCHMARK.run
