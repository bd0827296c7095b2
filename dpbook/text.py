"""The two text tasks of DC-SGD: NAMES with a two-layer character LSTM, and QNLI with BERT-base.

DC-SGD (Section V, Appendices D and G) trains

- a **two-layer LSTM** on **NAMES**, the dataset of the PyTorch ``char_rnn_classification`` tutorial
  (a surname -> one of 18 languages; Table VIII only). The paper gives neither the architecture's sizes nor a
  train/test split; :func:`char_lstm` and :func:`load_names` document the choices made here.
- **BERT-base** on **QNLI** (GLUE), fine-tuning only the last encoder layer, the pooler and the classifier:
  7,087,872 + 590,592 + 1,538 = **7,680,002** trainable parameters ("about 8M"). The paper's 5,463-example
  "test" set is GLUE's dev split [DCSGD-36]. The paper states neither the sequence length nor the tokenizer's casing;
  :func:`load_qnli` uses ``bert-base-uncased`` and 128 tokens, both arguments.

Both models take ONE tensor per batch (the engine indexes ``x_train[idx]``) and are compatible with the
``torch.func.vmap`` per-sample gradients of :mod:`dpbook.per_sample`:

- ``torch.nn.LSTM`` is not: under ``vmap`` it falls back to a slow per-example loop (warning "we have not yet
  implemented the batching rule for aten::mkldnn_rnn_layer"), and on GPU it calls cuDNN. :class:`LSTMLayer` writes
  the recurrence with two ``nn.Linear`` maps per layer (like Opacus's ``DPLSTM``), with ``nn.LSTM``'s gate order,
  biases and initialisation, so its weights can be copied from an ``nn.LSTM`` (:meth:`CharLSTM.load_lstm_weights`).
- Hugging Face BERT builds its attention mask with a data-dependent branch (``padding_mask.all()`` in
  ``transformers.masking_utils``), which ``vmap`` rejects. :class:`BertClassifier` passes a ready additive 4D mask
  ``(1 - attention_mask)[:, None, None, :] * finfo.min``, which ``transformers`` uses as it is, and uses the
  ``"eager"`` attention implementation (plain matmul + softmax). Tested with ``transformers`` 5.23.

Nothing here downloads anything: the data files must be on disk (a missing file raises
:class:`~dpbook.data.DatasetNotFoundError` saying where to get it), and pretrained weights and tokenizers must be in
the Hugging Face cache or a local folder (else :class:`PretrainedNotFoundError`). A tiny random ``BertConfig``
gives an offline model for tests and CPU smoke runs:

    >>> import torch
    >>> from dpbook.models import count_parameters
    >>> encode_names(["Adam", "Müller"], max_length=8)
    tensor([[27,  4,  1, 13,  0,  0,  0,  0],
            [39, 21, 12, 12,  5, 18,  0,  0]])
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
    "NAMES_URL", "NAMES_LANGUAGES", "NAMES_ALPHABET", "NAMES_PAD", "NAMES_VOCAB_SIZE", "to_ascii", "encode_names",
    "decode_names", "load_names", "LSTMLayer", "CharLSTM", "char_lstm", "QNLI_URL", "QNLI_LABELS",
    "PretrainedNotFoundError", "tokenize_pairs", "load_qnli", "BertClassifier", "BertHead", "bert_trainable_count",
    "tiny_bert_config", "bert_classifier"
]

import copy
import csv
import math
import os
import string
import unicodedata
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from dpbook import checks
from dpbook.data import DatasetNotFoundError, DataSplits

# ---------------------------------------------------------------------------------------------------------------
# NAMES (PyTorch char_rnn_classification tutorial)
# ---------------------------------------------------------------------------------------------------------------

NAMES_URL = "https://download.pytorch.org/tutorial/data.zip"

NAMES_LANGUAGES: tuple[str, ...] = (
    "Arabic", "Chinese", "Czech", "Dutch", "English", "French", "German", "Greek", "Irish", "Italian",
    "Japanese", "Korean", "Polish", "Portuguese", "Russian", "Scottish", "Spanish", "Vietnamese",
)
"""The 18 languages of the tutorial (its files ``data/names/<Language>.txt``); label ``k`` is the k-th one."""

NAMES_ALPHABET = string.ascii_letters + " .,;'"
"""The tutorial's 57 characters (``all_letters``). A name keeps only these, after Unicode NFD decomposition
with combining marks removed (the tutorial's ``unicodeToAscii``: "Müller" -> "Muller", "Ślusarski" -> "Slusarski");
any other character is dropped."""

NAMES_PAD = 0
"""The padding index. Character ``NAMES_ALPHABET[j]`` has index ``j + 1``: a..z 1-26, A..Z 27-52, then
space 53, '.' 54, ',' 55, ';' 56, "'" 57."""

NAMES_VOCAB_SIZE = len(NAMES_ALPHABET) + 1
"""58: the padding index and the 57 characters."""

_CHAR_INDEX = {c: j + 1 for j, c in enumerate(NAMES_ALPHABET)}


def to_ascii(name: str) -> str:
    """The tutorial's ``unicodeToAscii``: NFD-decompose, drop combining marks and characters outside
    :data:`NAMES_ALPHABET`.

        >>> to_ascii("Ślusarski"), to_ascii("O'Néill"), to_ascii("Nguyễn")
        ('Slusarski', "O'Neill", 'Nguyen')
    """
    return "".join(
        c for c in unicodedata.normalize("NFD", name) if unicodedata.category(c) != "Mn" and c in _CHAR_INDEX
    )


def encode_names(names: Sequence[str], *, max_length: int) -> torch.Tensor:
    """Names as an int64 tensor ``(n, max_length)`` of character indices, right-padded with :data:`NAMES_PAD`.

    Each name goes through :func:`to_ascii` first; a longer name keeps its first ``max_length`` characters.

    Raises:
        ValueError: a name with no character left after :func:`to_ascii` (it would have no last character).
    """
    max_length = checks.integer("max_length", max_length)
    out = torch.full((len(names), max_length), NAMES_PAD, dtype=torch.int64)
    for i, name in enumerate(names):
        ascii_name = to_ascii(name)
        if not ascii_name:
            raise ValueError(f"name {i} ({name!r}) has no character of NAMES_ALPHABET; drop it before encoding")
        codes = [_CHAR_INDEX[c] for c in ascii_name[:max_length]]
        out[i, : len(codes)] = torch.tensor(codes, dtype=torch.int64)
    return out


def decode_names(x: torch.Tensor) -> list[str]:
    """The inverse of :func:`encode_names` (for the ASCII names it produced).

        >>> decode_names(encode_names(["Ó Briain", "Li"], max_length=10))
        ['O Briain', 'Li']
    """
    return ["".join(NAMES_ALPHABET[int(j) - 1] for j in row if int(j) != NAMES_PAD) for row in x]


def _stratified_split(labels: torch.Tensor, test_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per class: a seeded permutation, the first ``round(test_fraction * n_k)`` indices go to the test set."""
    gen = torch.Generator().manual_seed(seed)
    train, test = [], []
    for k in torch.unique(labels).tolist():
        members = (labels == k).nonzero().flatten()
        members = members[torch.randperm(len(members), generator=gen)]
        n_test = round(test_fraction * len(members))
        test.append(members[:n_test])
        train.append(members[n_test:])
    return torch.cat(train).sort().values, torch.cat(test).sort().values


def load_names(
    root: str | os.PathLike,
    *,
    test_fraction: float = 0.2,
    seed: int = 0,
    max_length: int | None = None,
    languages: Sequence[str] = NAMES_LANGUAGES,
) -> DataSplits:
    """NAMES from ``<root>/names/<Language>.txt`` (UTF-8, one name per line) as encoded tensors.

    Files are read in the order of ``languages`` (default the tutorial's 18, alphabetical): label ``k`` is
    ``languages[k]``. Each name is stripped, converted by :func:`to_ascii` and encoded by :func:`encode_names`;
    blank lines and names with no character left are dropped. Duplicates are kept, as in the tutorial (the same
    surname can occur in several languages). ``max_length`` None means the longest name's length.

    Split (the paper gives none): a fixed stratified split. Within each language, a permutation drawn from a
    ``torch.Generator`` seeded with ``seed`` sends ``round(test_fraction * n_k)`` names to the test set and the rest
    to the training set; both sets keep file order. With the tutorial's 20,074 names and the defaults this is
    about 16,060 training and 4,014 test names.

    Returns:
        :class:`~dpbook.data.DataSplits`: ``x`` int64 ``(n, max_length)`` (see :data:`NAMES_PAD`), ``y`` int64 ``(n,)``.

    Raises:
        DatasetNotFoundError: a language file is missing (the message says where to put it and where to get it).
        ValueError: bad arguments.

    Example:
        >>> try:
        ...     load_names("/nonexistent")
        ... except DatasetNotFoundError as err:
        ...     print(err.dataset)
        NAMES
    """
    if not 0 <= checks.real("test_fraction", test_fraction) < 1:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    if max_length is not None:
        checks.integer("max_length", max_length)
    if len(languages) == 0 or len(set(languages)) != len(languages):
        raise ValueError(f"languages must be distinct names of files <root>/names/<Language>.txt, got {languages!r}")
    folder = Path(root) / "names"
    missing = [lang for lang in languages if not (folder / f"{lang}.txt").is_file()]
    if missing:
        raise DatasetNotFoundError(
            f"NAMES not found: missing {', '.join(f'{m}.txt' for m in missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''} in '{os.path.abspath(folder)}'.\n"
            f"The files are those of the PyTorch char_rnn_classification tutorial: download {NAMES_URL} "
            f"on a machine with internet access, unzip it and copy its folder data/names (one UTF-8 file "
            f"<Language>.txt per language, one name per line) to '{os.path.abspath(folder)}'.",
            dataset="NAMES", root=root,
        )
    names, labels = [], []
    for k, lang in enumerate(languages):
        with open(folder / f"{lang}.txt", encoding="utf-8") as f:
            for line in f:
                name = to_ascii(line.strip())
                if name:
                    names.append(name)
                    labels.append(k)
    if not names:
        raise ValueError(f"the NAMES files in '{folder}' hold no name")
    length = max(len(n) for n in names) if max_length is None else max_length
    x = encode_names(names, max_length=length)
    y = torch.tensor(labels, dtype=torch.int64)
    train, test = _stratified_split(y, float(test_fraction), seed)
    return DataSplits(x[train], y[train], x[test], y[test])


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
    """The NAMES classifier: "two LSTM layers, like the tutorial" (DC-SGD, Appendix G).

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
# QNLI and BERT
# ---------------------------------------------------------------------------------------------------------------

QNLI_URL = "https://dl.fbaipublicfiles.com/glue/data/QNLIv2.zip"
QNLI_LABELS: tuple[str, ...] = ("entailment", "not_entailment")
"""Label ``k`` is ``QNLI_LABELS[k]`` (the order of GLUE's processors and of the ``datasets`` glue/qnli features)."""

_INSTALL_HINT = 'the text models need Hugging Face transformers: pip install "dpbook[text]"'


class PretrainedNotFoundError(FileNotFoundError):
    """Pretrained weights or a tokenizer are neither in the Hugging Face cache nor downloadable."""


def _transformers():
    try:
        import transformers
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    return transformers


def _pretrained_hint(what: str, name: str, cause: Exception) -> str:
    return (
        f"could not load the {what} {name!r} (transformers said: {str(cause).splitlines()[0]}).\n"
        f"It must be in the Hugging Face cache or a local folder. Either\n"
        f"  - run it once on a machine with internet access (e.g. Colab); the files are cached under "
        f"~/.cache/huggingface (or $HF_HOME), or\n"
        f"  - on such a machine, call .save_pretrained(folder) on it, copy the folder here and pass its path "
        f"instead of {name!r}.\n"
        f"Set HF_HUB_OFFLINE=1 to fail at once instead of retrying the network."
    )


def tokenize_pairs(tokenizer: Any, first: Sequence[str], second: Sequence[str], *,
                   max_length: int) -> torch.Tensor:
    """Tokenise sentence pairs into ONE int64 tensor ``(n, 3, max_length)``: ``input_ids``, ``token_type_ids``,
    ``attention_mask`` stacked on dim 1 (what :class:`BertClassifier` takes).

    ``[CLS] first [SEP] second [SEP]``, padded to ``max_length``; longer pairs are cut by the tokenizer's
    ``truncation=True`` ("longest_first": tokens are removed from the longer of the two texts first).
    """
    max_length = checks.integer("max_length", max_length, minimum=3)
    if len(first) != len(second):
        raise ValueError(f"first and second must have the same length, got {len(first)} and {len(second)}")
    if len(first) == 0:
        return torch.zeros(0, 3, max_length, dtype=torch.int64)
    enc = tokenizer(list(first), list(second), max_length=max_length, truncation=True, padding="max_length",
                    return_token_type_ids=True, return_attention_mask=True, return_tensors="pt")
    return torch.stack([enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]], dim=1).to(torch.int64)


def _read_qnli_tsv(path: Path) -> tuple[list[str], list[str], list[int]]:
    """GLUE's QNLI TSV: a header ``index question sentence label``, tab-separated, no quoting."""
    questions, sentences, labels = [], [], []
    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if header is None or not {"question", "sentence", "label"} <= set(header):
            raise ValueError(f"{path}: expected a header with columns index, question, sentence, label; got {header}")
        col = {name: header.index(name) for name in ("question", "sentence", "label")}
        for line, row in enumerate(rows, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}, line {line}: {len(row)} tab-separated fields, expected {len(header)}")
            label = row[col["label"]]
            if label in QNLI_LABELS:
                labels.append(QNLI_LABELS.index(label))
            elif label in ("0", "1"):  # the `datasets` library's integer labels, same order
                labels.append(int(label))
            else:
                raise ValueError(f"{path}, line {line}: label {label!r} is none of {QNLI_LABELS} (or 0/1)")
            questions.append(row[col["question"]])
            sentences.append(row[col["sentence"]])
    return questions, sentences, labels


def load_qnli(root: str | os.PathLike, *, tokenizer: Any = None, max_length: int = 128,
              local_files_only: bool = False) -> DataSplits:
    """GLUE QNLI from ``<root>/QNLI/train.tsv`` (104,743 pairs) and ``<root>/QNLI/dev.tsv`` (5,463 pairs).

    The dev split is the test set, as in the paper (GLUE's test labels are hidden) [DCSGD-36]. Each (question,
    sentence) pair is tokenised by :func:`tokenize_pairs`; labels are ``entailment`` 0, ``not_entailment`` 1.

    Args:
        tokenizer: a Hugging Face tokenizer, a model name or local folder for ``AutoTokenizer.from_pretrained``,
            or None for ``"bert-base-uncased"`` (needs the Hugging Face cache or internet access).
        max_length: tokens per pair (the paper does not say; 128 is the usual GLUE choice).
        local_files_only: passed to ``from_pretrained`` (True: never try the network).

    Returns:
        :class:`~dpbook.data.DataSplits` with ``x`` int64 ``(n, 3, max_length)`` and ``y`` int64 ``(n,)``.
        Memory: 3 x 128 x 8 bytes per pair, 0.32 GB for the training set.

    Raises:
        DatasetNotFoundError: a TSV file is missing (the message says where to get QNLI).
        PretrainedNotFoundError: the tokenizer is not available offline.
        ImportError: ``transformers`` is not installed and ``tokenizer`` is not a tokenizer object.

    Example:
        >>> try:
        ...     load_qnli("/nonexistent")
        ... except DatasetNotFoundError as err:
        ...     print(err.dataset)
        QNLI
    """
    max_length = checks.integer("max_length", max_length, minimum=3)
    folder = Path(root) / "QNLI"
    files = {"train": folder / "train.tsv", "dev": folder / "dev.tsv"}
    missing = [p.name for p in files.values() if not p.is_file()]
    if missing:
        raise DatasetNotFoundError(
            f"QNLI not found: missing {', '.join(missing)} in '{os.path.abspath(folder)}'.\n"
            f"To get it, either\n"
            f"  - download {QNLI_URL} on a machine with internet access and unzip it so that train.tsv and "
            f"dev.tsv lie in '{os.path.abspath(folder)}', or\n"
            f"  - with the `datasets` library, load_dataset('glue', 'qnli') and write its 'train' and "
            f"'validation' splits there as train.tsv and dev.tsv (tab-separated, header "
            f"index/question/sentence/label, labels entailment/not_entailment or 0/1).",
            dataset="QNLI", root=root,
        )
    if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
        name = "bert-base-uncased" if tokenizer is None else str(tokenizer)
        transformers = _transformers()
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(name, local_files_only=local_files_only)
        except (OSError, ValueError) as err:
            raise PretrainedNotFoundError(_pretrained_hint("tokenizer", name, err)) from err
    splits = []
    for path in files.values():
        questions, sentences, labels = _read_qnli_tsv(path)
        splits += [tokenize_pairs(tokenizer, questions, sentences, max_length=max_length),
                   torch.tensor(labels, dtype=torch.int64)]
    return DataSplits(*splits)


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
    return _transformers().BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
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
    transformers = _transformers()
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
            raise PretrainedNotFoundError(_pretrained_hint("model", str(pretrained), err)) from err
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
