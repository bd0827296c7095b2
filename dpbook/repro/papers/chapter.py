"""What every reproduction chapter's parameters share: where its runs execute and where its files are."""

from __future__ import annotations

__all__ = ["Chapter"]

from dataclasses import dataclass

from dpbook.repro import results


@dataclass
class Chapter:
    """The parameters common to the reproduction chapters (each chapter's ``Reproduction`` adds its own).

    ``device``: "auto" (CUDA when available), "cpu", "cuda", ...; ``stand_ins``: train the MNIST cells on MNIST-5k
    (:data:`dpbook.repro.reproduce.STAND_INS`); ``data_root`` and ``results_dir`` (None: ``data/results``), relative
    paths being relative to the repository root; ``download``: fetch missing datasets; ``smoke``: generated
    stand-in data of the real shapes (tests only; their result files are named ``smoke_*``).
    """

    device: str = "auto"
    stand_ins: bool = False
    data_root: str = "data/downloads"
    download: bool = False
    results_dir: str | None = None
    smoke: bool = False

    def __post_init__(self):
        self.results = results.repo_path(self.results_dir)
        self.data = results.repo_path(self.data_root)
