r"""The task registry: every dataset the book trains on, with the facts the rest of the library asks about it.

One :class:`Task` per dataset: its title, one example's shape, the number of classes, the training-set size N of
its standard split (which sets the sample rate q = B/N, hence the noise, before any data is loaded), its loader
and the model the book trains on it by default. The harness (:mod:`dpbook.repro.experiment`), the planners
(:mod:`dpbook.repro.reproduce`) and the papers' settings (:data:`dpbook.repro.papers.dcsgd.DCSGD_SETTINGS`) read it;
nothing else restates these facts.

    >>> TASKS["mnist"].train_size, TASKS["mnist"].classes, TASKS["mnist"].model
    (60000, 10, 'mnist_cnn')
    >>> TASKS["mnist5k"].train_size, TASKS["names"].train_size   # NAMES: whatever its files hold
    (4000, None)
"""

from __future__ import annotations

__all__ = ["Loader", "Task", "TASKS"]

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dpbook import data

Loader = Callable[[Path, bool], data.DataSplits]  # (root, download) -> the train/test tensors


@dataclass(frozen=True)
class Task:
    """What a dataset looks like and where it comes from.

    ``kind`` is ``"image"``, ``"features"`` (a vector), ``"tokens"`` (int64 character ids below ``vocab``) or
    ``"pairs"`` (a sentence pair as (3, L) int64: token ids below ``vocab``, token types, attention mask).
    ``train_size`` is N of the standard training split, None where it depends on the files (NAMES: a split of
    whatever names the files hold). ``load(root, download)`` returns the train/test tensors (shapes as ``shape``).
    ``smoke_sizes`` are the train/test sizes of the generated stand-in used when ``smoke=True``, which has
    ``smoke_shape`` (default: ``shape``) and, for text, ids below ``smoke_vocab`` (the tiny BERT's vocabulary).
    """

    title: str
    shape: tuple[int, ...]
    classes: int
    train_size: int | None
    load: Loader
    model: str
    kind: str = "image"
    vocab: int = 0
    smoke_sizes: tuple[int, int] = (96, 48)
    smoke_shape: tuple[int, ...] | None = None
    smoke_vocab: int | None = None


def _tensors(name: str) -> Loader:
    return lambda root, download: data.load_tensors(name, root=root, download=download)


TASKS: dict[str, Task] = {
    "digits": Task("digits", (1, 8, 8), 10, 1437, lambda root, download: data.load_digits(), "digits_cnn"),
    "mnist5k": Task("MNIST-5k", (1, 28, 28), 10, data.MNIST5K_SPLIT[0],
                    lambda root, download: data.load_mnist5k(), "mnist_cnn"),
    "mnist": Task("MNIST", (1, 28, 28), 10, 60_000, _tensors("mnist"), "mnist_cnn"),
    "fashionmnist": Task("FashionMNIST", (1, 28, 28), 10, 60_000, _tensors("fashionmnist"), "mnist_cnn"),
    "cifar10": Task("CIFAR10", (3, 32, 32), 10, 50_000, _tensors("cifar10"), "cifar10_cnn", smoke_sizes=(32, 16)),
    "svhn": Task("SVHN", (3, 32, 32), 10, 73_257, _tensors("svhn"), "cifar10_cnn", smoke_sizes=(32, 16)),
    "celeba": Task("CelebA [Male]", (3, 32, 32), 2, 162_770, _tensors("celeba"), "resnet9", smoke_sizes=(32, 16)),
    "imagenette": Task("Imagenette", (3, 64, 64), 10, 9_469, _tensors("imagenette"), "resnet9",
                       smoke_sizes=(16, 8), smoke_shape=(3, 32, 32)),
    "cifar10-simclr": Task("CIFAR10 (SimCLRv2 features)", (4096,), 10, 50_000, _tensors("cifar10simclr"),
                           "linear_classifier", kind="features"),
    "names": Task("NAMES", (19,), 18, None, lambda root, download: data.load_names(root), "char_lstm",
                  kind="tokens", vocab=data.NAMES_VOCAB_SIZE),
    "qnli": Task("QNLI", (3, 128), 2, 104_743, lambda root, download: data.load_qnli(root), "bert_base",
                 kind="pairs", vocab=30522, smoke_sizes=(32, 16), smoke_shape=(3, 16), smoke_vocab=100),
}
"""The datasets a run can name. Shapes are those of the loaders' tensors (:mod:`dpbook.data`)."""

