"""The models the book trains: the papers' vision models (:mod:`dpbook.models.vision`) and text models
(:mod:`dpbook.models.text`), and the one registry that builds any of them by name (:data:`MODELS`,
:func:`build_model`).
"""

from __future__ import annotations

__all__ = [
    "group_norm", "replace_batchnorm", "count_parameters", "mnist_cnn", "cifar10_cnn", "mnist_cnn_gn", "cifar10_cnn_gn",
    "digits_cnn", "digits_mlp", "BasicBlock", "ResNetGN", "resnet18_gn", "resnet34_gn", "Residual", "resnet9",
    "Standardize", "linear_classifier", "LSTMLayer", "CharLSTM", "char_lstm", "BertClassifier", "BertHead",
    "bert_trainable_count", "tiny_bert_config", "bert_classifier", "MODELS", "build_model"
]

import inspect
from typing import Callable

from torch import nn

from dpbook import checks
from dpbook.models.text import (
    BertClassifier,
    BertHead,
    CharLSTM,
    LSTMLayer,
    bert_classifier,
    bert_trainable_count,
    char_lstm,
    tiny_bert_config,
)
from dpbook.models.vision import (
    BasicBlock,
    Residual,
    ResNetGN,
    Standardize,
    cifar10_cnn,
    cifar10_cnn_gn,
    count_parameters,
    digits_cnn,
    digits_mlp,
    group_norm,
    linear_classifier,
    mnist_cnn,
    mnist_cnn_gn,
    replace_batchnorm,
    resnet9,
    resnet18_gn,
    resnet34_gn,
)

MODELS: dict[str, Callable[..., nn.Module]] = {
    "mnist_cnn": mnist_cnn,
    "cifar10_cnn": cifar10_cnn,
    "resnet18_gn": resnet18_gn,
    "resnet34_gn": resnet34_gn,
    "resnet9": resnet9,
    "linear_classifier": linear_classifier,
    "digits_cnn": digits_cnn,
    "digits_mlp": digits_mlp,
    "mnist_cnn_gn": mnist_cnn_gn,
    "cifar10_cnn_gn": cifar10_cnn_gn,
    "char_lstm": char_lstm,
    "bert_base": bert_classifier,
}
"""Name -> builder, for :func:`build_model`: the one model registry of the library."""


def build_model(name: str, *, sized_for=None, **kwargs) -> nn.Module:
    """Build the model registered as ``name`` (case-insensitive) with the builder's keyword options.

    ``sized_for`` (a :class:`dpbook.tasks.Task`) sizes it for a task: of the number of classes (``num_classes``,
    ``num_labels``), the input channels or features (``in_channels``, ``in_features``: the first dimension of one
    example) and, for character tasks, the vocabulary (``vocab_size``), the builder gets those it takes.

    Example:
        >>> count_parameters(build_model("digits_cnn", num_classes=3))
        5187
        >>> import torch
        >>> from dpbook.tasks import TASKS
        >>> build_model("resnet9", sized_for=TASKS["celeba"])(torch.zeros(1, 3, 32, 32)).shape
        torch.Size([1, 2])
        >>> build_model("resnet-9")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: unknown model 'resnet-9' (did you mean 'resnet9'?); valid: mnist_cnn, ...
    """
    key = name.lower()
    checks.one_of("model", key, MODELS)
    builder = MODELS[key]
    if sized_for is not None:
        offered = {"num_classes": sized_for.classes, "num_labels": sized_for.classes,
                   "in_channels": sized_for.shape[0], "in_features": sized_for.shape[0]}
        if sized_for.kind == "tokens":
            offered["vocab_size"] = sized_for.vocab
        accepted = inspect.signature(builder).parameters
        kwargs = {k: v for k, v in offered.items() if k in accepted} | kwargs
    return builder(**kwargs)
