"""The text data of DC-SGD: NAMES (surname -> one of 18 languages) and QNLI (GLUE sentence pairs).

DC-SGD (Section V, Appendices D and G) trains a two-layer character LSTM on **NAMES**, the dataset of the PyTorch
``char_rnn_classification`` tutorial (Table VIII only), and BERT-base on **QNLI** (GLUE). The paper gives no
train/test split for NAMES and states neither QNLI's sequence length nor the tokenizer's casing:
:func:`load_names` and :func:`load_qnli` document the choices made here (a stratified 80/20 split [DCSGD-46];
``bert-base-uncased`` and 128 tokens, both arguments). The paper's 5,463-example QNLI "test" set is GLUE's dev
split [DCSGD-36]. The models are in :mod:`dpbook.models.text`.

Each example is ONE tensor (the engine indexes ``x_train[idx]``): a name is its character ids, a QNLI pair the
``(3, L)`` stack of token ids, token types and attention mask (:func:`tokenize_pairs`).

Nothing here downloads anything: the data files must be on disk (a missing file raises
:class:`~dpbook.data.DatasetNotFoundError` saying where to get them), and a tokenizer must be in the Hugging Face
cache or a local folder (else :class:`~dpbook.data.hub.PretrainedNotFoundError`).

    >>> encode_names(["Adam", "Müller"], max_length=8)
    tensor([[27,  4,  1, 13,  0,  0,  0,  0],
            [39, 21, 12, 12,  5, 18,  0,  0]])
"""

from __future__ import annotations

__all__ = [
    "NAMES_URL", "NAMES_LANGUAGES", "NAMES_ALPHABET", "NAMES_PAD", "NAMES_VOCAB_SIZE", "to_ascii", "encode_names",
    "decode_names", "load_names", "QNLI_URL", "QNLI_LABELS", "tokenize_pairs", "load_qnli"
]

import csv
import os
import string
import unicodedata
from pathlib import Path
from typing import Any, Sequence

import torch

from dpbook import checks
from dpbook.data.hub import PretrainedNotFoundError, pretrained_hint, transformers_module
from dpbook.data.splits import DatasetNotFoundError, DataSplits

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
# QNLI (GLUE)
# ---------------------------------------------------------------------------------------------------------------

QNLI_URL = "https://dl.fbaipublicfiles.com/glue/data/QNLIv2.zip"
QNLI_LABELS: tuple[str, ...] = ("entailment", "not_entailment")
"""Label ``k`` is ``QNLI_LABELS[k]`` (the order of GLUE's processors and of the ``datasets`` glue/qnli features)."""

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
        transformers = transformers_module()
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(name, local_files_only=local_files_only)
        except (OSError, ValueError) as err:
            raise PretrainedNotFoundError(pretrained_hint("tokenizer", name, err)) from err
    splits = []
    for path in files.values():
        questions, sentences, labels = _read_qnli_tsv(path)
        splits += [tokenize_pairs(tokenizer, questions, sentences, max_length=max_length),
                   torch.tensor(labels, dtype=torch.int64)]
    return DataSplits(*splits)
