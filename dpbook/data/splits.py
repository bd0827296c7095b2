"""What every loader returns (:class:`DataSplits`), and what it raises when a dataset is not on disk
(:class:`DatasetNotFoundError`, saying where the files must lie and how to get them)."""

from __future__ import annotations

__all__ = ["DataSplits", "DatasetNotFoundError"]

import os
from typing import NamedTuple

import torch


class DataSplits(NamedTuple):
    """Train and test tensors; unpacks as ``x_train, y_train, x_test, y_test = splits``."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is not on disk (or is corrupted) and could not be downloaded.

    Attributes ``dataset`` (its display name) and ``root`` (the directory searched) are set.
    """

    def __init__(self, message: str, *, dataset: str, root: str | os.PathLike):
        super().__init__(message)
        self.dataset = dataset
        self.root = str(root)
