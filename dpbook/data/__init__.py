"""The data the book trains on, loaded from files on disk (downloaded only where asked, e.g. on Colab):

- :mod:`dpbook.data.vision`: the papers' image datasets through torchvision, CIFAR10 features, and the offline
  digits, MNIST-5k and synthetic tasks;
- :mod:`dpbook.data.text`: DC-SGD's text data, NAMES and QNLI (their models are in :mod:`dpbook.models.text`);
- :mod:`dpbook.data.splits`: what every loader returns (:class:`DataSplits`) and raises (:class:`DatasetNotFoundError`);
- :mod:`dpbook.data.hub`: pretrained files from the Hugging Face hub, offline.

The private-step core (engine, methods, accounting) never imports this package: data come in as arguments.
"""

from __future__ import annotations

__all__ = [
    "DataSplits", "DatasetNotFoundError", "DEFAULT_ROOT", "IMAGENET_MEAN", "IMAGENET_STD", "CELEBA_LABEL",
    "IMAGENETTE_SIZE", "IMAGENETTE_WNIDS", "SIMCLR_FEATURES", "DATASETS", "NORMALIZATION", "load_dataset",
    "load_tensors", "load_features", "load_digits", "synthetic_classification", "MNIST5K_FILE", "MNIST5K_SHA256",
    "MNIST5K_SPLIT", "load_mnist5k", "NAMES_URL", "NAMES_LANGUAGES", "NAMES_ALPHABET", "NAMES_PAD",
    "NAMES_VOCAB_SIZE", "to_ascii", "encode_names", "decode_names", "load_names", "QNLI_URL", "QNLI_LABELS",
    "tokenize_pairs", "load_qnli"
]

from dpbook.data.splits import (
    DatasetNotFoundError,
    DataSplits,
)
from dpbook.data.text import (
    NAMES_ALPHABET,
    NAMES_LANGUAGES,
    NAMES_PAD,
    NAMES_URL,
    NAMES_VOCAB_SIZE,
    QNLI_LABELS,
    QNLI_URL,
    decode_names,
    encode_names,
    load_names,
    load_qnli,
    to_ascii,
    tokenize_pairs,
)
from dpbook.data.vision import (
    CELEBA_LABEL,
    DATASETS,
    DEFAULT_ROOT,
    IMAGENET_MEAN,
    IMAGENET_STD,
    IMAGENETTE_SIZE,
    IMAGENETTE_WNIDS,
    MNIST5K_FILE,
    MNIST5K_SHA256,
    MNIST5K_SPLIT,
    NORMALIZATION,
    SIMCLR_FEATURES,
    load_dataset,
    load_digits,
    load_features,
    load_mnist5k,
    load_tensors,
    synthetic_classification,
)
