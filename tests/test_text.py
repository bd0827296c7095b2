"""NAMES and QNLI loaders on files the tests write; the vmap-compatible character LSTM and the partly frozen BERT
wrapper: exact per-sample gradients (noise-off oracle against a one-example loop) and short private training runs."""

from __future__ import annotations

import string
import sys
import warnings

import pytest
import torch
from torch import nn

from dpbook.data import (
    NAMES_LANGUAGES,
    NAMES_VOCAB_SIZE,
    QNLI_LABELS,
    DatasetNotFoundError,
    decode_names,
    encode_names,
    load_names,
    load_qnli,
    to_ascii,
    tokenize_pairs,
)
from dpbook.data.hub import PretrainedNotFoundError
from dpbook.methods import DPSGD
from dpbook.models import BertClassifier, LSTMLayer, bert_classifier, bert_trainable_count, char_lstm, count_parameters
from dpbook.per_sample import PerSampleGradients
from dpbook.train import Trainer
from tests.reference import NoNoise, clipped_step, per_example_gradients

transformers = pytest.importorskip("transformers")

# ---------------------------------------------------------------------------------------------------------------
# NAMES
# ---------------------------------------------------------------------------------------------------------------

# Five or six names per language; the Polish, German, Irish and Vietnamese ones are not ASCII.
EXTRA = {"Polish": ["Ślusarski"], "German": ["Müller"], "Irish": ["Ó Briain"], "Vietnamese": ["Nguyễn"]}


def write_names(root, languages=NAMES_LANGUAGES, per_language: int = 5) -> dict[str, list[str]]:
    folder = root / "names"
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for k, lang in enumerate(languages):
        names = [f"{lang[:3]}{string.ascii_lowercase[j]}{'x' * (k % 4)}" for j in range(per_language)]
        names += EXTRA.get(lang, [])
        # a blank line and a name with no Latin letter (dropped), trailing spaces and no final newline
        text = "\n".join(names[:2]) + "\n\n李\n" + "\n".join(f"{n}  " for n in names[2:])
        (folder / f"{lang}.txt").write_text(text, encoding="utf-8")
        written[lang] = names
    return written


def test_load_names_reads_converts_and_splits_stratified(tmp_path):
    written = write_names(tmp_path)
    x_tr, y_tr, x_te, y_te = load_names(tmp_path)
    longest = max(len(to_ascii(n)) for names in written.values() for n in names)
    assert x_tr.dtype == x_te.dtype == y_tr.dtype == torch.int64
    assert x_tr.shape[1] == x_te.shape[1] == longest == 9  # "Slusarski"
    names = decode_names(torch.cat([x_tr, x_te]))
    labels = torch.cat([y_tr, y_te]).tolist()
    expected = sorted((to_ascii(n), k) for k, lang in enumerate(NAMES_LANGUAGES) for n in written[lang])
    assert sorted(zip(names, labels)) == expected
    assert ("Slusarski", NAMES_LANGUAGES.index("Polish")) in expected
    assert ("Muller", NAMES_LANGUAGES.index("German")) in expected and ("O Briain", 8) in expected
    for k, lang in enumerate(NAMES_LANGUAGES):  # per language: round(0.2 n_k) test names
        assert int((y_te == k).sum()) == round(0.2 * len(written[lang]))
    # fixed given the seed, different with another seed
    again = load_names(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(again, (x_tr, y_tr, x_te, y_te)))
    other = load_names(tmp_path, seed=1)
    assert not torch.equal(other.x_test, x_te)
    assert tuple(load_names(tmp_path, max_length=4).x_train.shape[1:]) == (4,)


def test_load_names_subset_of_languages_and_bad_arguments(tmp_path):
    write_names(tmp_path, languages=("Czech", "Dutch"), per_language=10)
    x_tr, y_tr, x_te, y_te = load_names(tmp_path, languages=("Dutch", "Czech"), test_fraction=0.3)
    assert (len(y_tr), len(y_te)) == (14, 6)
    assert set(decode_names(x_te[y_te == 0])) <= {f"Dut{c}x" for c in "abcdefghij"}  # label 0 is now Dutch
    with pytest.raises(ValueError, match="test_fraction"):
        load_names(tmp_path, languages=("Czech",), test_fraction=1.0)
    with pytest.raises(ValueError, match="distinct"):
        load_names(tmp_path, languages=("Czech", "Czech"))


def test_missing_names_files_say_where_to_get_them(tmp_path):
    write_names(tmp_path, languages=("Czech",))
    with pytest.raises(DatasetNotFoundError) as err:
        load_names(tmp_path)
    message = str(err.value)
    assert "https://download.pytorch.org/tutorial/data.zip" in message and "data/names" in message
    assert "Arabic.txt" in message and str(tmp_path / "names") in message
    assert err.value.dataset == "NAMES"


def test_encode_names():
    x = encode_names(["Abe", "Nguyễn", "Longname"], max_length=5)
    assert x.tolist() == [[27, 2, 5, 0, 0], [40, 7, 21, 25, 5], [38, 15, 14, 7, 14]]
    assert decode_names(x) == ["Abe", "Nguye", "Longn"]
    with pytest.raises(ValueError, match="no character"):
        encode_names(["Ann", "李"], max_length=5)
    with pytest.raises(ValueError, match="max_length"):
        encode_names(["Ann"], max_length=0)


# ---------------------------------------------------------------------------------------------------------------
# The character LSTM
# ---------------------------------------------------------------------------------------------------------------

NAMES = ["Adam", "Li", "Nguyen", "Schmidt", "O'Neill", "Ko", "Abe", "Dvorak"]


def small_lstm(seed: int = 0, num_classes: int = 5) -> nn.Module:
    torch.manual_seed(seed)
    return char_lstm(NAMES_VOCAB_SIZE, num_classes, embedding_dim=6, hidden_size=7)


def test_lstm_layers_equal_torch_lstm():
    model = small_lstm()
    torch.manual_seed(1)
    reference = nn.LSTM(6, 7, num_layers=2, batch_first=True)
    model.load_lstm_weights(reference)
    emb = torch.randn(3, 9, 6)
    out = emb
    for layer in model.layers:
        out = layer(out)
    torch.testing.assert_close(out, reference(emb)[0], atol=1e-6, rtol=1e-5)


def test_lstm_default_size_and_init():
    model = char_lstm()
    assert count_parameters(model) == 237_458
    layer = LSTMLayer(3, 16)
    assert all(p.abs().max() <= 0.25 for p in layer.parameters())  # U(-1/sqrt(H), 1/sqrt(H)), as nn.LSTM


def test_lstm_output_does_not_depend_on_padding():
    model = small_lstm()
    short, long = encode_names(NAMES, max_length=8), encode_names(NAMES, max_length=20)
    torch.testing.assert_close(model(short), model(long), atol=1e-6, rtol=1e-6)
    # the classifier reads the state at each name's own last character: prefixes give other outputs
    assert not torch.allclose(model(encode_names(["Adam"], max_length=8)), model(encode_names(["Ada"], max_length=8)))
    with pytest.raises(ValueError, match=r"\(n, L\)"):
        model(short.float())


def test_lstm_per_sample_gradients_equal_a_loop_without_vmap_fallback():
    model = small_lstm()
    x, y = encode_names(NAMES, max_length=10), torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*performance drop.*")  # vmap's per-example fallback
        grads = PerSampleGradients(model, nn.functional.cross_entropy)(x, y)
    reference = per_example_gradients(model, x, y)
    assert len(grads) == len([p for p in model.parameters() if p.requires_grad])
    for j, g in enumerate(grads):
        torch.testing.assert_close(g, torch.stack([r[j] for r in reference]), atol=1e-5, rtol=1e-4)


def test_lstm_noise_off_private_steps_equal_clipped_loop():
    from dpbook.optim import DPOptimizer

    x, y = encode_names(NAMES, max_length=10), torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    batches = [(x[:5], y[:5]), (x[3:], y[3:])]
    ref = small_lstm()
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    for xb, yb in batches:
        norms = clipped_step(ref, ref_opt, xb, yb, C=0.3, B=4.0)
    assert max(norms) > 0.3  # some examples are clipped
    model = small_lstm()
    engine = DPOptimizer(model, torch.optim.Adam(model.parameters(), lr=0.01), DPSGD(C=0.3, sigma=1.0),
                         sample_rate=0.1, expected_batch_size=4.0, micro_batch_size=3)
    engine.noise = NoNoise()
    for xb, yb in batches:
        engine.step(xb, yb)
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_lstm_trains_privately_on_names(tmp_path):
    write_names(tmp_path, languages=NAMES_LANGUAGES[:3], per_language=15)
    data = load_names(tmp_path, languages=NAMES_LANGUAGES[:3])
    model = small_lstm(num_classes=3)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model, DPSGD(C=1.0, sigma=0.5), torch.optim.Adam(model.parameters(), lr=0.01), data,
                      expected_batch_size=9, epochs=1, delta=1e-5, seed=0, progress=False)
    log = trainer.run()
    assert trainer.step == trainer.T == 4
    row = log.epochs[-1]
    assert 0 < row["epsilon"] < float("inf") and torch.isfinite(torch.tensor(row["test_loss"]))
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ---------------------------------------------------------------------------------------------------------------
# QNLI and BERT
# ---------------------------------------------------------------------------------------------------------------

WORDS = "what is the capital of france paris a city in europe who wrote it he she was born where when".split()
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=100,
            max_position_embeddings=64)


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    """A local tokenizer folder, as ``save_pretrained`` writes it: a WordPiece vocabulary and its config."""
    folder = tmp_path_factory.mktemp("tokenizer")
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "?", "."]
    (folder / "vocab.txt").write_text("\n".join(special + WORDS) + "\n")
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer", "do_lower_case": true}')
    return folder


@pytest.fixture(scope="module")
def tokenizer(tokenizer_folder):
    """A real BERT WordPiece tokenizer, loaded offline from the folder written above."""
    return transformers.AutoTokenizer.from_pretrained(str(tokenizer_folder), local_files_only=True)


QNLI_ROWS = [
    ("What is the capital of France?", "Paris is the capital of France.", "entailment"),
    ("Who wrote it?", "She was born in Paris, a city in Europe.", "not_entailment"),
    ("Where was he born?", "He was born in a city in Europe where it is cold.", "entailment"),
    ("When was she born?", "Paris is a city.", "not_entailment"),
]


def write_qnli(root, train_rows, dev_rows, *, header="index\tquestion\tsentence\tlabel"):
    folder = root / "QNLI"
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.tsv", train_rows), ("dev.tsv", dev_rows)):
        lines = [header] + [f"{i}\t{q}\t{s}\t{label}" for i, (q, s, label) in enumerate(rows)]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_load_qnli_tokenises_and_packs_pairs(tmp_path, tokenizer, tokenizer_folder):
    quoted = ('Who said "it"?', '"Paris" is a city.', "entailment")  # GLUE's TSVs are not quoted: kept as text
    write_qnli(tmp_path, QNLI_ROWS * 3, QNLI_ROWS[:3] + [quoted])
    x_tr, y_tr, x_te, y_te = load_qnli(tmp_path, tokenizer=tokenizer, max_length=16)
    assert x_tr.shape == (12, 3, 16) and x_te.shape == (4, 3, 16) and x_tr.dtype == torch.int64
    assert y_tr.tolist() == [0, 1, 0, 1] * 3 and y_te.tolist() == [0, 1, 0, 0]
    assert tokenizer.decode(x_te[3, 0], skip_special_tokens=True).count('[UNK]') == 0
    enc = tokenizer(QNLI_ROWS[0][0], QNLI_ROWS[0][1], max_length=16, truncation=True, padding="max_length")
    assert x_tr[0, 0].tolist() == enc["input_ids"] and x_tr[0, 1].tolist() == enc["token_type_ids"]
    assert x_tr[0, 2].tolist() == enc["attention_mask"]
    assert tokenizer.convert_ids_to_tokens(x_tr[3, 0].tolist()) == (  # a pair of 13 tokens, padded to 16
        "[CLS] when was she born ? [SEP] paris is a city . [SEP] [PAD] [PAD] [PAD]".split())
    assert x_tr[3, 1].tolist() == [0] * 7 + [1] * 6 + [0] * 3 and x_tr[3, 2].tolist() == [1] * 13 + [0] * 3
    # the second sentence has token type 1; truncated pairs (row 2 is longer than 16 tokens) end with [SEP]
    assert x_tr[0, 1].max() == 1 and x_tr[2, 2].sum() == 16 and x_tr[2, 0, -1] == tokenizer.sep_token_id
    # a tokenizer given by its folder gives the same tensors
    assert torch.equal(load_qnli(tmp_path, tokenizer=tokenizer_folder, max_length=16).x_test, x_te)
    # the `datasets` library's integer labels are read too
    write_qnli(tmp_path, [(q, s, str(QNLI_LABELS.index(lab))) for q, s, lab in QNLI_ROWS], QNLI_ROWS)
    assert load_qnli(tmp_path, tokenizer=tokenizer, max_length=16).y_train.tolist() == [0, 1, 0, 1]


def test_qnli_bad_files_and_missing_files(tmp_path, tokenizer):
    with pytest.raises(DatasetNotFoundError) as err:
        load_qnli(tmp_path, tokenizer=tokenizer)
    message = str(err.value)
    assert "QNLIv2.zip" in message and "glue" in message and "train.tsv" in message and err.value.dataset == "QNLI"
    write_qnli(tmp_path, [("Who?", "He.", "contradiction")], QNLI_ROWS)
    with pytest.raises(ValueError, match="line 2: label 'contradiction'"):
        load_qnli(tmp_path, tokenizer=tokenizer)
    write_qnli(tmp_path, QNLI_ROWS, QNLI_ROWS, header="index\tq\ts\tlabel")
    with pytest.raises(ValueError, match="header"):
        load_qnli(tmp_path, tokenizer=tokenizer)
    write_qnli(tmp_path, QNLI_ROWS, QNLI_ROWS)
    with pytest.raises(PretrainedNotFoundError, match="save_pretrained"):  # no bert-base-uncased in the cache
        load_qnli(tmp_path, local_files_only=True)


def test_bert_trainable_parameters():
    model = bert_classifier(config=transformers.BertConfig(**TINY))
    assert isinstance(model, BertClassifier) and model.model.config._attn_implementation == "eager"
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith(("model.bert.encoder.layer.1.", "model.bert.pooler.", "model.classifier."))
                             for n in trainable)
    assert {n for n in dict(model.named_parameters()) if n.startswith("model.bert.encoder.layer.1.")} <= trainable
    layer = sum(p.numel() for p in model.model.bert.encoder.layer[1].parameters())
    assert layer == 6_789  # 4 (32^2 + 32) + 2 * 32 * 37 + 37 + 32 + 4 * 32
    assert count_parameters(model) == bert_trainable_count(model.model.config) == 6_789 + 1_056 + 66
    config = transformers.BertConfig(**TINY)
    assert count_parameters(bert_classifier(config=config, train_last_layers=0, num_labels=3)) == 1_056 + 99
    assert bert_trainable_count(config, train_last_layers=0, num_labels=3) == 1_056 + 99
    assert count_parameters(bert_classifier(config=config, train_last_layers=2)) == 2 * 6_789 + 1_056 + 66
    with pytest.raises(ValueError, match="at most"):
        bert_classifier(config=config, train_last_layers=3)


def test_bert_base_has_the_papers_7680002_trainable_parameters():
    with torch.device("meta"):  # the real BERT-base module structure, without allocating its 110M weights
        model = bert_classifier(config=transformers.BertConfig())
    assert count_parameters(model) == 7_680_002 == bert_trainable_count(transformers.BertConfig())
    assert sum(p.numel() for p in model.parameters()) == 109_483_778


def test_bert_errors_without_weights_or_transformers(monkeypatch):
    with pytest.raises(PretrainedNotFoundError, match="bert-base-uncased"):
        bert_classifier(local_files_only=True)
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    with pytest.raises(ImportError, match=r'pip install "dpbook\[text\]"'):
        bert_classifier(config=None)


def tiny_bert(seed: int = 0, **kw) -> BertClassifier:
    torch.manual_seed(seed)
    return bert_classifier(config=transformers.BertConfig(**TINY, **kw))


def qnli_batch(tokenizer, n: int = 6):
    rows = (QNLI_ROWS * n)[:n]
    x = tokenize_pairs(tokenizer, [r[0] for r in rows], [r[1] for r in rows], max_length=20)
    return x, torch.tensor([QNLI_LABELS.index(r[2]) for r in rows])


def test_bert_attention_mask_hides_padding(tokenizer):
    model = tiny_bert().eval()
    x, _ = qnli_batch(tokenizer)
    assert (x[:, 2] == 0).any()
    scrambled = x.clone()
    scrambled[:, 0] = torch.where(x[:, 2] == 1, x[:, 0], torch.randint(5, 30, x[:, 0].shape))
    torch.testing.assert_close(model(x), model(scrambled))


def test_bert_per_sample_gradients_equal_a_loop(tokenizer):
    model = tiny_bert().eval()  # dropout off, for a deterministic comparison
    x, y = qnli_batch(tokenizer)
    grads = PerSampleGradients(model, nn.functional.cross_entropy)(x, y)
    reference = per_example_gradients(model, x, y)
    assert len(grads) == 20  # 16 tensors of the last encoder layer, 2 of the pooler, 2 of the classifier
    for j, g in enumerate(grads):
        torch.testing.assert_close(g, torch.stack([r[j] for r in reference]), atol=1e-5, rtol=1e-4)


def test_bert_noise_off_private_step_equals_clipped_loop(tokenizer):
    from dpbook.optim import DPOptimizer

    x, y = qnli_batch(tokenizer)
    ref = tiny_bert().eval()
    ref_opt = torch.optim.SGD([p for p in ref.parameters() if p.requires_grad], lr=0.5)
    norms = clipped_step(ref, ref_opt, x, y, C=0.05, B=4.0)
    assert min(norms) > 0
    model = tiny_bert().eval()
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    engine = DPOptimizer(model, torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5),
                         DPSGD(C=0.05, sigma=1.0), sample_rate=0.1, expected_batch_size=4.0, micro_batch_size=4)
    engine.noise = NoNoise()
    engine.step(x, y)
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)


def test_bert_trains_privately_on_qnli_files(tmp_path, tokenizer):
    write_qnli(tmp_path, QNLI_ROWS * 4, QNLI_ROWS)
    data = load_qnli(tmp_path, tokenizer=tokenizer, max_length=24)
    model = tiny_bert()  # dropout on (train mode): vmap draws a mask per example
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainer = Trainer(model, DPSGD(C=1.0, sigma=0.5), torch.optim.Adam(trainable, lr=1e-3), data,
                      expected_batch_size=4, epochs=1, delta=1e-5, seed=0, progress=False)
    log = trainer.run()
    assert trainer.step == trainer.T == 4 and 0 <= log.epochs[-1]["test_accuracy"] <= 1
    for n, p in model.named_parameters():
        assert torch.equal(p, params[n]) != p.requires_grad, n  # trainable ones moved, frozen ones did not
