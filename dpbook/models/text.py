"""The text models of DC-SGD: a two-layer character LSTM for NAMES and BERT-base for QNLI, both vmap-compatible.

DC-SGD trains

- a **two-layer LSTM** on NAMES (Table VIII only); the paper gives no architecture sizes: :func:`char_lstm`
  documents the choices made here;
- **BERT-base** on QNLI, fine-tuning only the last encoder layer, the pooler and the classifier:
  7,087,872 + 590,592 + 1,538 = **7,680,002** trainable parameters ("about 8M").

Both take ONE tensor per batch (the data of :mod:`dpbook.data.text`) and are compatible with the
``torch.func.vmap`` per-sample gradients of :mod:`dpbook.per_sample`:

- ``torch.nn.LSTM`` is not: under ``vmap`` it falls back to a slow per-example loop (warning "we have not yet
  implemented the batching rule for aten::mkldnn_rnn_layer"), and on GPU it calls cuDNN. :class:`LSTMLayer` writes
  the recurrence with two ``nn.Linear`` maps per layer (like Opacus's ``DPLSTM``), with ``nn.LSTM``'s gate order,
  biases and initialisation, so its weights can be copied from an ``nn.LSTM`` (:meth:`CharLSTM.load_lstm_weights`).
- Hugging Face BERT builds its attention mask with a data-dependent branch (``padding_mask.all()`` in
  ``transformers.masking_utils``), which ``vmap`` rejects. :class:`BertClassifier` passes a ready additive 4D mask
  ``(1 - attention_mask)[:, None, None, :] * finfo.min``, which ``transformers`` uses as it is, and uses the
  ``"eager"`` attention implementation (plain matmul + softmax). Tested with ``transformers`` 5.23.

Pretrained weights must be in the Hugging Face cache or a local folder (else
:class:`~dpbook.data.hub.PretrainedNotFoundError`). A tiny random ``BertConfig`` gives an offline model for tests and
CPU smoke runs:

    >>> import torch
    >>> from dpbook.data.text import NAMES_VOCAB_SIZE, encode_names
    >>> from dpbook.models import count_parameters
    >>> torch.manual_seed(0) and None
    >>> lstm = char_lstm(NAMES_VOCAB_SIZE)
    >>> count_parameters(lstm), tuple(lstm(encode_names(["Adam", "Müller"], max_length=8)).shape)
    (237458, (2, 18))
    >>> from transformers import BertConfig
    >>> tiny = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
    ...                   vocab_size=100, max_position_embeddings=64)
    >>> bert = bert_classifier(config=tiny)
    >>> count_parameters(bert) == bert_trainable_count(tiny)  # last layer + pooler + classifier
    True
    >>> x = torch.stack([torch.randint(1, 100, (3, 16)), torch.zeros(3, 16, dtype=torch.long),
    ...                  torch.ones(3, 16, dtype=torch.long)], dim=1)  # (n, 3, L): ids, token types, mask
    >>> tuple(bert(x).shape)
    (3, 2)
"""

from __future__ import annotations

__all__ = [
    "LSTMLayer", "CharLSTM", "char_lstm", "BertClassifier", "BertHead", "bert_trainable_count", "tiny_bert_config",
    "bert_classifier"
]

import copy
import math
import os
from typing import Any

import torch
from torch import nn

from dpbook import checks
from dpbook.data.hub import PretrainedNotFoundError, pretrained_hint, transformers_module
from dpbook.data.text import NAMES_PAD, NAMES_VOCAB_SIZE

# ---------------------------------------------------------------------------------------------------------------
# The character LSTM
# ---------------------------------------------------------------------------------------------------------------


class LSTMLayer(nn.Module):
    """One LSTM layer from two ``nn.Linear`` maps, vmap-compatible (``torch.nn.LSTM`` is not, see the module doc).

    Same equations, gate order (input, forget, cell, output), two biases and initialisation
    ``U(-1/sqrt(H), 1/sqrt(H))`` as ``torch.nn.LSTM``::

        i, f, g, o = split(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)
        c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g);   h_t = sigmoid(o) * tanh(c_t)

    ``ih.weight`` is ``nn.LSTM``'s ``weight_ih_l<k>``, ``hh.weight`` its ``weight_hh_l<k>`` (same for biases).
    Input ``(n, L, input_size)``, output the hidden states ``(n, L, hidden_size)``, from zero initial states.
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size)
        bound = 1.0 / math.sqrt(hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, _ = x.shape
        pre = self.ih(x)  # the input part of every step at once: (n, L, 4H)
        h = x.new_zeros(n, self.hidden_size)
        c = x.new_zeros(n, self.hidden_size)
        hs = []
        for t in range(length):  # a loop over time steps (fixed length), never over examples
            i, f, g, o = (pre[:, t] + self.hh(h)).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            hs.append(h)
        return torch.stack(hs, dim=1)


class CharLSTM(nn.Module):
    """Embedding -> stacked :class:`LSTMLayer` -> linear classifier on the hidden state at each name's last
    character.

    Input: int64 ``(n, L)`` character indices, right-padded with ``padding_idx`` (as :func:`encode_names` makes
    them). The last real character of row ``i`` is at ``(number of non-padding entries) - 1``; the top layer's
    hidden state there is gathered (``torch.gather``, no loop over examples), so the output does not depend on how
    much padding follows. A row of only padding reads position 0.
    """

    def __init__(self, vocab_size: int, num_classes: int, *, embedding_dim: int, hidden_size: int,
                 num_layers: int, padding_idx: int = NAMES_PAD):
        super().__init__()
        self.padding_idx = padding_idx
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=padding_idx)
        sizes = [embedding_dim] + [hidden_size] * num_layers
        self.layers = nn.ModuleList(LSTMLayer(a, hidden_size) for a in sizes[:-1])
        self.classifier = nn.Linear(hidden_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"CharLSTM takes integer character indices of shape (n, L), got {x.dtype} "
                             f"{tuple(x.shape)}")
        h = self.embedding(x)
        for layer in self.layers:
            h = layer(h)
        last = ((x != self.padding_idx).sum(dim=1) - 1).clamp(min=0)  # (n,)
        index = last.view(-1, 1, 1).expand(-1, 1, h.shape[-1])
        return self.classifier(h.gather(1, index).squeeze(1))

    @torch.no_grad()
    def load_lstm_weights(self, lstm: nn.LSTM) -> None:
        """Copy the weights of a ``torch.nn.LSTM`` (same sizes, ``bias=True``, unidirectional, no projection)."""
        if lstm.num_layers != len(self.layers) or lstm.bidirectional or lstm.proj_size or not lstm.bias:
            raise ValueError("need an nn.LSTM with the same number of layers, bias=True, unidirectional, no proj_size")
        for k, layer in enumerate(self.layers):
            layer.ih.weight.copy_(getattr(lstm, f"weight_ih_l{k}"))
            layer.ih.bias.copy_(getattr(lstm, f"bias_ih_l{k}"))
            layer.hh.weight.copy_(getattr(lstm, f"weight_hh_l{k}"))
            layer.hh.bias.copy_(getattr(lstm, f"bias_hh_l{k}"))


def char_lstm(vocab_size: int = NAMES_VOCAB_SIZE, num_classes: int = 18, *, embedding_dim: int = 64,
              hidden_size: int = 128, num_layers: int = 2) -> CharLSTM:
    """The NAMES classifier of DC-SGD's Appendix G: "a model with two LSTM layers", like the PyTorch tutorial it links.

    The paper gives no sizes. The tutorial's RNN has 128 hidden units, which we keep; instead of its one-hot
    input we use a 64-dimensional embedding (index 0, the padding, embeds to zeros). Parameter count
    ``V E + sum_l (4H (in_l + H) + 8H) + H K + K``: with the defaults (V = 58, E = 64, H = 128, K = 18)
    3,712 + 99,328 + 132,096 + 2,322 = **237,458**.
    """
    for name, value in [("vocab_size", vocab_size), ("num_classes", num_classes), ("embedding_dim", embedding_dim),
                        ("hidden_size", hidden_size), ("num_layers", num_layers)]:
        checks.integer(name, value)
    return CharLSTM(vocab_size, num_classes, embedding_dim=embedding_dim, hidden_size=hidden_size,
                    num_layers=num_layers)


# ---------------------------------------------------------------------------------------------------------------
# BERT
# ---------------------------------------------------------------------------------------------------------------


class BertClassifier(nn.Module):
    """Wraps ``transformers.BertForSequenceClassification`` (as ``.model``): takes the packed int64 tensor
    ``(n, 3, L)`` of :func:`tokenize_pairs` and returns the logits ``(n, num_labels)``.

    Under ``vmap`` the attention mask is passed as a ready additive 4D mask, which ``transformers`` uses as it is
    (its own mask builder branches on the data); the model must use ``attn_implementation="eager"``
    (:func:`bert_classifier` sets it).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[1] != 3 or x.dtype not in (torch.int64, torch.int32):
            raise ValueError("BertClassifier takes an integer tensor (n, 3, L) of input_ids, token_type_ids, "
                             f"attention_mask (see tokenize_pairs), got {x.dtype} {tuple(x.shape)}")
        dtype = self.model.get_input_embeddings().weight.dtype
        keep = x[:, 2, None, None, :].to(dtype)  # (n, 1, 1, L): 1 = real token, 0 = padding
        mask = (1.0 - keep) * torch.finfo(dtype).min  # added to the attention scores, as BERT's own mask
        return self.model(input_ids=x[:, 0], token_type_ids=x[:, 1], attention_mask=mask).logits


class BertHead(nn.Module):
    """The trainable part of :func:`bert_classifier` with one trained layer: the last encoder layer, the pooler and
    the classifier, applied to the hidden states ``(n, L, h)`` that the frozen layers below give.

    Every step of a run computes the frozen layers' output first, the same for every engine; the benchmark
    (``python -m dpbook.repro.bench``) times this head on given hidden states, which is where the engines differ. Built
    from a ``BertConfig`` with random weights (no download). Sequences without padding (no attention mask).

        >>> head = BertHead(tiny_bert_config())
        >>> n_params = sum(p.numel() for p in head.parameters())
        >>> tuple(head(torch.zeros(3, 16, 32)).shape), n_params == bert_trainable_count(tiny_bert_config())
        ((3, 2), True)
    """

    def __init__(self, config: Any, *, num_labels: int = 2):
        super().__init__()
        config = copy.deepcopy(config)
        config.num_hidden_layers = 1  # the layers below are never run here: build only the last one
        bert = bert_classifier(config=config, num_labels=num_labels, train_last_layers=1).model
        self.layer, self.pooler = bert.bert.encoder.layer[-1], bert.bert.pooler
        self.dropout, self.classifier = bert.dropout, bert.classifier

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(self.pooler(self.layer(hidden))))


def bert_trainable_count(config: Any, *, num_labels: int = 2, train_last_layers: int = 1) -> int:
    """Closed-form trainable-parameter count of :func:`bert_classifier` for a ``BertConfig`` (hidden size h,
    intermediate size i): per encoder layer ``4(h^2 + h)`` (query, key, value, attention output)
    ``+ 2 h i + i + h`` (feed-forward) ``+ 4h`` (two LayerNorms), pooler ``h^2 + h``, classifier ``h K + K``.

        >>> from transformers import BertConfig
        >>> bert_trainable_count(BertConfig())  # BERT-base: 7,087,872 + 590,592 + 1,538
        7680002
    """
    h, i = config.hidden_size, config.intermediate_size
    layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h
    return train_last_layers * layer + (h * h + h) + (h * num_labels + num_labels)


def tiny_bert_config(vocab_size: int = 100, *, max_position_embeddings: int = 64) -> Any:
    """A tiny random ``BertConfig`` (hidden 32, 2 layers, 2 heads): the smoke-test stand-in for BERT-base.

    >>> tiny_bert_config().num_hidden_layers
    2
    """
    return transformers_module().BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=37, vocab_size=vocab_size,
                                      max_position_embeddings=max_position_embeddings)


def bert_classifier(pretrained: str | os.PathLike = "bert-base-uncased", *, config: Any = None,
                    num_labels: int = 2, train_last_layers: int = 1,
                    local_files_only: bool = False) -> BertClassifier:
    """BERT for sequence-pair classification, with only the last encoder layer(s), the pooler and the classifier
    trainable (everything else ``requires_grad=False``), as in DC-SGD: 7,680,002 trainable parameters for BERT-base
    with ``train_last_layers=1`` and 2 labels (:func:`bert_trainable_count`).

    Args:
        pretrained: a Hugging Face model name or local folder (weights from the cache or the folder; the
            classifier is new, randomly initialised). Ignored when ``config`` is given.
        config: a ``transformers.BertConfig``: build from it with random weights, no download (tests, CPU).
        num_labels: classes of the classifier.
        train_last_layers: how many of the last encoder layers to train (0: only pooler and classifier).
        local_files_only: passed to ``from_pretrained`` (True: never try the network).

    Raises:
        ImportError: ``transformers`` is not installed.
        PretrainedNotFoundError: the pretrained weights are not available offline.
    """
    transformers = transformers_module()
    num_labels = checks.integer("num_labels", num_labels, minimum=2)
    if config is not None:
        config = copy.deepcopy(config)
        config.num_labels = num_labels
        config._attn_implementation = "eager"  # the vmap-compatible attention (see the module doc)
        model = transformers.BertForSequenceClassification(config)
    else:
        try:
            model = transformers.BertForSequenceClassification.from_pretrained(
                pretrained, num_labels=num_labels, attn_implementation="eager", local_files_only=local_files_only)
        except (OSError, ValueError) as err:
            raise PretrainedNotFoundError(pretrained_hint("model", str(pretrained), err)) from err
    layers = model.bert.encoder.layer
    train_last_layers = checks.integer("train_last_layers", train_last_layers, minimum=0)
    if train_last_layers > len(layers):
        raise ValueError(f"train_last_layers must be at most the model's {len(layers)} encoder layers, "
                         f"got {train_last_layers}")
    if model.bert.pooler is None:
        raise ValueError("the BERT model has no pooler (add_pooling_layer=False); DC-SGD trains the pooler")
    model.requires_grad_(False)
    for module in [*layers[len(layers) - train_last_layers:], model.bert.pooler, model.classifier]:
        module.requires_grad_(True)
    return BertClassifier(model)
