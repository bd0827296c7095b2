"""Datasets of the three papers, loaded through torchvision, plus two offline tasks for CPU runs and tests.

Real data (MNIST, FashionMNIST, CIFAR10, SVHN) come from ``torchvision.datasets``: :func:`load_dataset` gives the
torchvision ``Dataset`` with a normalising transform, and :func:`load_tensors` gives the whole train and test sets
as normalised in-memory tensors, which is what the training engine wants (it samples Poisson batches by index).
Nothing can be downloaded on the development machines; a missing dataset raises :class:`DatasetNotFoundError`,
which says where the files must lie and how to get them (``download=True`` on a machine with internet, e.g. Colab).

Offline alternatives that need no download:

- :func:`load_digits`: scikit-learn's 1,797 real 8x8 handwritten digits with a fixed, stratified split;
- :func:`synthetic_classification`: Gaussian clusters, deterministic given a seed.

All loaders return a :class:`DataSplits` ``(x_train, y_train, x_test, y_test)``: images float32 of shape
``(n, C, H, W)``, labels int64 of shape ``(n,)``.

Normalisation constants (:data:`NORMALIZATION`) are the per-channel mean and standard deviation of the training
images with pixels scaled to [0, 1], as commonly published:

==============  ============================  ============================
dataset         mean                          std
==============  ============================  ============================
MNIST           0.1307                        0.3081
FashionMNIST    0.2860                        0.3530
CIFAR10         (0.4914, 0.4822, 0.4465)      (0.2470, 0.2435, 0.2616)
SVHN            (0.4377, 0.4438, 0.4728)      (0.1980, 0.2010, 0.1970)
==============  ============================  ============================

The CIFAR10 std is the per-pixel std over the whole training set; the often-copied (0.2023, 0.1994, 0.2010), used
e.g. by the Opacus CIFAR10 example, is the mean of per-image stds. The papers state no normalisation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np
import sklearn.datasets
import torch
import torchvision
from sklearn.model_selection import train_test_split
from torch.utils.data import Dataset
from torchvision import transforms

DEFAULT_ROOT = "data/downloads"


class DataSplits(NamedTuple):
    """Train and test tensors; unpacks as ``x_train, y_train, x_test, y_test = splits``."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


class DatasetNotFoundError(FileNotFoundError):
    """A torchvision dataset is not on disk (or is corrupted) and could not be downloaded.

    Attributes ``dataset`` (its display name) and ``root`` (the directory searched) are set.
    """

    def __init__(self, message: str, *, dataset: str, root: str | os.PathLike):
        super().__init__(message)
        self.dataset = dataset
        self.root = str(root)


@dataclass(frozen=True)
class _Spec:
    """How one torchvision dataset is built, where its files lie, and how to read its arrays."""

    title: str  # torchvision's class name, also the display name
    mean: tuple[float, ...]
    std: tuple[float, ...]
    folder: str  # relative to root: where the files below must be
    files: tuple[str, ...]
    origin: str  # where the files come from
    layout: str  # layout of the torchvision ``.data`` array: "NHW", "NHWC" or "NCHW"
    labels_attr: str  # "targets" or "labels"
    checksummed: bool  # torchvision verifies the files' md5 against the published archive


_MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

_MNIST_LIKE = dict(files=_MNIST_FILES, origin="the unzipped *.gz files", layout="NHW", labels_attr="targets")

_SPECS = {
    "mnist": _Spec(
        title="MNIST", mean=(0.1307,), std=(0.3081,), folder="MNIST/raw", checksummed=False, **_MNIST_LIKE
    ),
    "fashionmnist": _Spec(
        title="FashionMNIST", mean=(0.2860,), std=(0.3530,), folder="FashionMNIST/raw", checksummed=False, **_MNIST_LIKE
    ),
    "cifar10": _Spec(
        title="CIFAR10",
        mean=(0.4914, 0.4822, 0.4465),
        std=(0.2470, 0.2435, 0.2616),
        folder="cifar-10-batches-py",
        files=tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta"),
        origin="extracted from cifar-10-python.tar.gz",
        layout="NHWC",
        labels_attr="targets",
        checksummed=True,
    ),
    "svhn": _Spec(
        title="SVHN",
        mean=(0.4377, 0.4438, 0.4728),
        std=(0.1980, 0.2010, 0.1970),
        folder="SVHN",
        files=("train_32x32.mat", "test_32x32.mat"),
        origin="from http://ufldl.stanford.edu/housenumbers",
        layout="NCHW",
        labels_attr="labels",
        checksummed=True,
    ),
}

DATASETS: tuple[str, ...] = tuple(_SPECS)
"""Names accepted by :func:`load_dataset` and :func:`load_tensors` (case-insensitive; '-' and '_' ignored)."""

NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {k: (s.mean, s.std) for k, s in _SPECS.items()}
"""``name -> (mean, std)`` per channel, for pixels in [0, 1]."""


def _spec(name: str) -> _Spec:
    key = name.lower().replace("-", "").replace("_", "")
    if key not in _SPECS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    return _SPECS[key]


def _not_found(spec: _Spec, root: Path, cause: Exception, *, download: bool) -> DatasetNotFoundError:
    where = os.path.abspath(root / spec.folder)
    what = "could not be downloaded" if download else "not found or corrupted"
    checksum = " torchvision checks their md5 sums, so they must be the original files." if spec.checksummed else ""
    message = (
        f"{spec.title} {what} under root directory '{root}' (torchvision said: {cause}).\n"
        f"To get it, either\n"
        f"  - run load_dataset('{spec.title.lower()}', root='{root}', download=True) on a machine with internet "
        f"access (e.g. Colab), or\n"
        f"  - copy the {spec.title} files {', '.join(spec.files)} ({spec.origin}) into '{where}'.{checksum}"
    )
    return DatasetNotFoundError(message, dataset=spec.title, root=root)


def _torchvision_dataset(spec: _Spec, root: Path, *, train: bool, download: bool, transform) -> Dataset:
    try:
        if spec.title == "SVHN":  # SVHN keeps its files directly in its root: give it a folder of its own
            split = "train" if train else "test"
            return torchvision.datasets.SVHN(root / spec.folder, split=split, download=download, transform=transform)
        cls = getattr(torchvision.datasets, spec.title)
        return cls(root, train=train, download=download, transform=transform)
    except (RuntimeError, OSError) as err:  # not found / checksum mismatch / download failed (URLError is an OSError)
        raise _not_found(spec, root, err, download=download) from err


def load_dataset(
    name: str,
    *,
    root: str | os.PathLike = DEFAULT_ROOT,
    train: bool = True,
    download: bool = False,
    normalize: bool = True,
) -> Dataset:
    """The torchvision dataset ``name`` (train or test split) yielding ``(image tensor, int label)``.

    Images are float tensors ``(C, H, W)`` in [0, 1], normalised by :data:`NORMALIZATION` when ``normalize``.
    Files are expected under ``root`` as torchvision lays them out (``MNIST/raw``, ``FashionMNIST/raw``,
    ``cifar-10-batches-py``), except SVHN, which lives in ``<root>/SVHN``.

    Raises:
        ValueError: unknown ``name``.
        DatasetNotFoundError: files missing or corrupted, or the download failed.

    Example:
        >>> try:
        ...     train_set = load_dataset("mnist", root="/nonexistent")
        ... except DatasetNotFoundError as err:
        ...     print(err.dataset)
        MNIST
    """
    spec = _spec(name)
    steps = [transforms.ToTensor()] + ([transforms.Normalize(spec.mean, spec.std)] if normalize else [])
    return _torchvision_dataset(
        spec, Path(root), train=train, download=download, transform=transforms.Compose(steps)
    )


def _images_nchw(spec: _Spec, dataset: Dataset) -> torch.Tensor:
    """The dataset's raw uint8 images as one ``(n, C, H, W)`` tensor, without going through PIL."""
    data = torch.as_tensor(np.asarray(dataset.data))
    if spec.layout == "NHW":
        return data.unsqueeze(1)
    if spec.layout == "NHWC":
        return data.permute(0, 3, 1, 2)
    return data


def _to_float(images: torch.Tensor, mean: Sequence[float] | None, std: Sequence[float] | None) -> torch.Tensor:
    x = images.to(torch.float32) / 255.0
    if mean is None:
        return x.contiguous()
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return ((x - m) / s).contiguous()


def load_tensors(
    name: str,
    *,
    root: str | os.PathLike = DEFAULT_ROOT,
    download: bool = False,
    normalize: bool = True,
) -> DataSplits:
    """The whole train and test sets of ``name`` as in-memory tensors.

    The values equal those of :func:`load_dataset` (pixel/255, then per-channel normalisation), computed on the
    raw arrays at once instead of image by image. Memory in float32: MNIST 0.2 GB, CIFAR10 0.7 GB, SVHN 1.2 GB.

    Example:
        >>> try:
        ...     x_train, y_train, x_test, y_test = load_tensors("cifar10", root="/nonexistent")
        ... except DatasetNotFoundError as err:
        ...     print(err.root)
        /nonexistent
    """
    spec = _spec(name)
    mean, std = (spec.mean, spec.std) if normalize else (None, None)
    splits = []
    for train in (True, False):
        ds = _torchvision_dataset(spec, Path(root), train=train, download=download, transform=None)
        labels = torch.as_tensor(np.asarray(getattr(ds, spec.labels_attr)), dtype=torch.int64)
        splits += [_to_float(_images_nchw(spec, ds), mean, std), labels]
    return DataSplits(*splits)


def load_digits(*, test_size: float = 0.2, seed: int = 0, standardize: bool = False) -> DataSplits:
    """scikit-learn's 1,797 real 8x8 digit images (10 classes, shipped offline) with a fixed stratified split.

    Pixels (integers 0..16) are divided by 16, so images lie in [0, 1], shape ``(n, 1, 8, 8)``. With the defaults
    the split is always the same 1,437 train / 360 test examples (``sklearn.model_selection.train_test_split``,
    ``stratify=labels``, ``random_state=seed``). ``standardize`` subtracts the training mean pixel value and
    divides by the training std (one scalar each; the test set uses the training statistics).

    Example:
        >>> x_train, y_train, x_test, y_test = load_digits()
        >>> tuple(x_train.shape), tuple(x_test.shape), y_train.dtype
        ((1437, 1, 8, 8), (360, 1, 8, 8), torch.int64)
    """
    digits = sklearn.datasets.load_digits()
    x = digits.images.astype(np.float32)[:, None] / 16.0
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, digits.target, test_size=test_size, stratify=digits.target, random_state=seed
    )
    x_tr, x_te = torch.from_numpy(x_tr), torch.from_numpy(x_te)
    if standardize:
        mean, std = x_tr.mean(), x_tr.std()
        x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
    return DataSplits(x_tr, torch.from_numpy(y_tr).long(), x_te, torch.from_numpy(y_te).long())


def synthetic_classification(
    *,
    n_train: int = 1000,
    n_test: int = 200,
    shape: int | tuple[int, ...] = (1, 8, 8),
    num_classes: int = 10,
    separation: float = 0.3,
    seed: int = 0,
) -> DataSplits:
    """Gaussian clusters: class centres ``mu_k ~ N(0, separation^2 I)``, examples ``x = mu_y + N(0, I)``.

    Labels are uniform on ``{0, ..., num_classes - 1}``; ``shape`` is the shape of one example (an int ``d`` for
    vectors). The result depends only on the arguments (a private ``torch.Generator`` seeded with ``seed``).
    Larger ``separation`` makes the task easier; the Bayes accuracy grows with ``separation * sqrt(d)``.

    Example:
        >>> x_train, y_train, x_test, y_test = synthetic_classification(n_train=6, n_test=2, shape=4, num_classes=3)
        >>> tuple(x_train.shape), tuple(y_test.shape)
        ((6, 4), (2,))
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    gen = torch.Generator().manual_seed(seed)
    centres = separation * torch.randn(num_classes, *shape, generator=gen)
    n = n_train + n_test
    y = torch.randint(num_classes, (n,), generator=gen)
    x = centres[y] + torch.randn(n, *shape, generator=gen)
    return DataSplits(x[:n_train], y[:n_train], x[n_train:], y[n_train:])
