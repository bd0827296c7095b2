"""The Book-Keeping engine (``dpbook.per_sample.book_keeping``) against the vmap per-sample gradients and the
one-example-at-a-time loop: every model of ``dpbook.models`` and the text models, every layer rule on random shapes
(both strategies of each), the engine's release for every scaled-sum method with micro-batching, frozen layers and
empty batches, and the fall-backs to vmap that keep an unsupported model exact."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.utils.prune
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dpbook import data, models
from dpbook.audit.scenarios import SCENARIOS
from dpbook.methods import METHODS, make_method
from dpbook.optim import DPOptimizer
from dpbook.per_sample import (
    BookKeeping,
    BookKeepingEngine,
    Pass,
    PerSampleGradients,
    VmapEngine,
    flat_norms,
    layers,
    weighted_sum,
)
from dpbook.per_sample.book_keeping import Unsupported
from tests.reference import NoNoise, batch, flat_norm, per_example_gradients, tiny_cnn

F = nn.functional.cross_entropy
DTYPE = torch.float64  # float64 on both sides: only the algorithms are compared


def compare(model, x, y, *, rtol=1e-9):
    """Book-Keeping's norms and a random re-weighted sum equal vmap's, and so do its vector queries."""
    out = BookKeeping(model, F)(x, y)
    norms, summed = out.norms, out.summed
    grads = PerSampleGradients(model, F)(x, y)
    torch.testing.assert_close(norms, flat_norms(grads), rtol=rtol, atol=1e-12)
    w = torch.rand(len(x), generator=torch.Generator().manual_seed(0), dtype=norms.dtype)
    for got, expected in zip(summed(w), weighted_sum(grads, w)):
        torch.testing.assert_close(got, expected, rtol=rtol, atol=1e-12 * (1 + float(expected.abs().max())))
    check_vector_queries(model, x, y, out, grads, rtol=rtol)


def check_vector_queries(model, x, y, out, grads, *, rtol=1e-9):
    """Each parameter's per-sample squared norms and inner products with random tensors, and the norms and sums of
    linear combinations with passes at perturbed parameters (DPDR's, DIFF's, DIFF2's and DP-PSASC*'s queries),
    equal those of the per-sample gradients ``grads``."""
    g = torch.Generator().manual_seed(1)
    params = [p for p in model.parameters() if p.requires_grad]
    atol = 1e-12 * (1 + float(out.layer_sq_norms().max()))
    expected = torch.stack([gr.flatten(1).square().sum(1) for gr in grads], 1)
    torch.testing.assert_close(out.layer_sq_norms(), expected, rtol=rtol, atol=atol)
    V = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]
    expected = torch.stack([gr.flatten(1) @ v.flatten() for gr, v in zip(grads, V)], 1)
    atol_inner = 1e-12 * (1 + float(expected.abs().max()))
    torch.testing.assert_close(out.inner(V), expected, rtol=rtol, atol=atol_inner)
    passes, references = [out], [grads]
    for scale in (0.001, 0.3):  # two other parameter values, near (a difference that cancels) and far
        values = [p.detach() + scale * torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]
        own = [p.data for p in params]
        for p, v in zip(params, values):  # as the engine's pass at other values (BookKeepingEngine._at)
            p.data = v
        try:
            passes.append(BookKeeping(model, F)(x, y))
        finally:
            for p, v in zip(params, own):
                p.data = v
        references.append(PerSampleGradients(model, F)(x, y, values))
    w = torch.rand(len(x), generator=g, dtype=DTYPE)
    for coefficients in ([1.0, -1.0], [1.0, 0.5, 0.25]):  # DIFF2's difference, DP-PSASC*'s inner momentum
        combined = Pass.combined(list(zip(coefficients, passes)))
        m = [sum(c * r[j] for c, r in zip(coefficients, references)) for j in range(len(grads))]
        expected = torch.stack([mj.flatten(1).square().sum(1) for mj in m], 1)
        torch.testing.assert_close(combined.layer_sq_norms(), expected, rtol=rtol, atol=atol)
        torch.testing.assert_close(combined.norms, flat_norms(m), rtol=rtol, atol=atol ** 0.5)
        for got, want in zip(combined.summed(w), weighted_sum(m, w)):
            torch.testing.assert_close(got, want, rtol=rtol, atol=1e-12 * (1 + float(want.abs().max())))
        expected = torch.stack([mj.flatten(1) @ v.flatten() for mj, v in zip(m, V)], 1)
        atol_inner = 1e-12 * (1 + float(expected.abs().max()))
        torch.testing.assert_close(combined.inner(V), expected, rtol=rtol, atol=atol_inner)


def images(n, shape, classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *shape, generator=g, dtype=DTYPE), torch.randint(0, classes, (n,), generator=g)


# --- every model ------------------------------------------------------------------------------------------------

IMAGE_MODELS = {  # name -> (builder, input shape, examples: over 16 where the grouped conv path is taken in chunks)
    "mnist_cnn": (models.mnist_cnn, (1, 28, 28), 5),
    "mnist_cnn-gn": (lambda: models.mnist_cnn(norm_groups=4), (1, 28, 28), 5),
    "cifar10_cnn": (models.cifar10_cnn, (3, 32, 32), 19),
    "mnist_cnn_gn": (models.mnist_cnn_gn, (1, 28, 28), 5),  # DPDR's: GroupNorm(gcd(32, C), C) after each conv
    "cifar10_cnn_gn": (models.cifar10_cnn_gn, (3, 32, 32), 17),
    "resnet18_gn": (models.resnet18_gn, (3, 32, 32), 3),
    "resnet34_gn": (models.resnet34_gn, (3, 32, 32), 2),
    "resnet9": (models.resnet9, (3, 32, 32), 3),
    "linear_classifier": (models.linear_classifier, (4096,), 5),
    "digits_cnn": (models.digits_cnn, (1, 8, 8), 20),
    "digits_mlp": (models.digits_mlp, (1, 8, 8), 20),
}


def test_every_registered_model_is_covered():
    text_models = {"char_lstm", "bert_base"}  # tests/test_text.py
    assert set(models.MODELS) - text_models <= {name.split("-")[0] for name in IMAGE_MODELS}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(IMAGE_MODELS))
def test_norms_and_sums_equal_vmap_on_every_model(name):
    build, shape, n = IMAGE_MODELS[name]
    torch.manual_seed(0)
    compare(build().to(DTYPE), *images(n, shape))


def test_char_lstm_reuses_its_linear_maps_at_every_time_step():
    """Each LSTM layer applies its two linear maps once per character: one sequence for Book-Keeping."""
    torch.manual_seed(0)
    model = models.char_lstm(data.NAMES_VOCAB_SIZE).to(DTYPE)
    x = data.encode_names(["Adam", "Müller", "Li", "Nakamura", "O'Neil"], max_length=9)
    compare(model, x, torch.tensor([0, 3, 5, 17, 2]))


def test_tiny_bert_head_with_frozen_embeddings():
    torch.manual_seed(0)
    model = models.bert_classifier(config=models.tiny_bert_config()).to(DTYPE).eval()  # eval: dropout off in both
    n, length = 4, 12
    ids = torch.randint(1, 100, (n, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(n, length, dtype=torch.long)
    mask[1, 8:] = 0  # padding
    x = torch.stack([ids, torch.zeros_like(ids), mask], dim=1)
    compare(model, x, torch.tensor([0, 1, 1, 0]))


def test_against_the_one_example_loop():
    """An independent oracle as well: plain autograd, one example at a time."""
    model, (x, y) = tiny_cnn(dtype=DTYPE), batch(6, dtype=DTYPE)
    out = BookKeeping(model, F)(x, y)
    norms, summed = out.norms, out.summed
    loop = per_example_gradients(model, x, y)
    torch.testing.assert_close(norms, torch.tensor([flat_norm(g) for g in loop], dtype=DTYPE), rtol=1e-10, atol=0)
    w = torch.linspace(0.1, 1.0, 6, dtype=DTYPE)
    for j, got in enumerate(summed(w)):
        torch.testing.assert_close(got, sum(wi * g[j] for wi, g in zip(w, loop)), rtol=1e-10, atol=1e-12)


# --- every layer rule, both strategies, random shapes ---------------------------------------------------------


class Head(nn.Module):
    """``layer`` then a fixed random linear read-out of its flattened output: per-sample gradients of the layer."""

    def __init__(self, layer: nn.Module, out_numel: int):
        super().__init__()
        self.layer = layer
        self.readout = nn.Linear(out_numel, 3).requires_grad_(False)

    def forward(self, x):
        return self.readout(torch.tanh(self.layer(x)).flatten(1))


def check_layer(layer, x, monkeypatch, *, ghost=None, grouped=None):
    """The rule's norms and sums against the one-example loop, with the per-layer strategy forced if asked."""
    if ghost is not None:
        monkeypatch.setattr(layers, "ghost_is_cheaper", lambda *dims: ghost)
    if grouped is not None:
        monkeypatch.setattr(layers, "GROUPED_WORK", 0 if grouped else float("inf"))
    layer = layer.to(DTYPE)
    with torch.no_grad():
        out_numel = layer(x[:1]).numel()
    torch.manual_seed(1)
    model = Head(layer, out_numel).to(DTYPE)
    y = torch.arange(len(x)) % 3
    out = BookKeeping(model, F)(x, y)
    norms, summed = out.norms, out.summed
    loop = per_example_gradients(model, x, y)
    torch.testing.assert_close(norms, torch.tensor([flat_norm(g) for g in loop], dtype=DTYPE), rtol=1e-9, atol=1e-12)
    w = torch.rand(len(x), dtype=DTYPE)
    for j, got in enumerate(summed(w)):
        expected = sum(wi * g[j] for wi, g in zip(w, loop))
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12 * (1 + float(expected.abs().max())))
    check_vector_queries(model, x, y, out, PerSampleGradients(model, F)(x, y))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 5), T=st.integers(1, 4), d=st.integers(1, 6), p=st.integers(1, 6), bias=st.booleans(),
       ghost=st.booleans(), seed=st.integers(0, 100))
def test_linear_on_sequences(n, T, d, p, bias, ghost, seed):
    torch.manual_seed(seed)
    with pytest.MonkeyPatch.context() as mp:
        check_layer(nn.Linear(d, p, bias=bias), torch.randn(n, T, d, dtype=DTYPE), mp, ghost=ghost)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 19), c_in=st.integers(1, 3), c_out=st.integers(1, 4), groups=st.sampled_from([1, 2]),
       k=st.integers(1, 3), stride=st.integers(1, 2), padding=st.integers(0, 2), dilation=st.integers(1, 2),
       size=st.integers(5, 8), two_d=st.booleans(), bias=st.booleans(), strategy=st.sampled_from(
           ["ghost", "grouped", "unfold"]), seed=st.integers(0, 100))
def test_convolutions(n, c_in, c_out, groups, k, stride, padding, dilation, size, two_d, bias, strategy, seed):
    torch.manual_seed(seed)
    conv = (nn.Conv2d if two_d else nn.Conv1d)(c_in * groups, c_out * groups, k, stride=stride, padding=padding,
                                               dilation=dilation, groups=groups, bias=bias)
    x = torch.randn(n, c_in * groups, *([size] * (2 if two_d else 1)), dtype=DTYPE)
    with pytest.MonkeyPatch.context() as mp:
        check_layer(conv, x, mp, ghost=strategy == "ghost", grouped=strategy == "grouped")


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5), groups=st.sampled_from([1, 2, 4]), affine_bias=st.booleans(), seed=st.integers(0, 100))
def test_group_norm(n, groups, affine_bias, seed):
    torch.manual_seed(seed)
    layer = nn.GroupNorm(groups, 4)
    layer.bias.requires_grad_(affine_bias)  # a frozen bias: only the weight is the layer's to compute
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
    with pytest.MonkeyPatch.context() as mp:
        check_layer(layer, torch.randn(n, 4, 3, 3, dtype=DTYPE), mp)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5), T=st.integers(1, 4), two_dims=st.booleans(), seed=st.integers(0, 100))
def test_layer_norm(n, T, two_dims, seed):
    torch.manual_seed(seed)
    shape = (2, 3) if two_dims else (5,)
    layer = nn.LayerNorm(shape)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
        layer.bias.uniform_(-1, 1)
    with pytest.MonkeyPatch.context() as mp:
        check_layer(layer, torch.randn(n, T, *shape, dtype=DTYPE), mp)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5), T=st.integers(1, 6), vocab=st.integers(2, 5), padding=st.booleans(),
       seed=st.integers(0, 100))
def test_embedding_with_repeated_ids_and_padding(n, T, vocab, padding, seed):
    torch.manual_seed(seed)
    layer = nn.Embedding(vocab, 3, padding_idx=0 if padding else None)
    ids = torch.randint(0, vocab, (n, T))  # few ids: repeats within an example are the rule's cross terms
    with pytest.MonkeyPatch.context() as mp:
        check_layer(layer, ids, mp)


class Scaled(nn.Module):
    """A layer no rule knows: ``x * weight + shift``, handled by the generic (vmap) rule."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * self.weight + self.shift


def test_a_layer_no_rule_knows_gets_the_generic_rule(monkeypatch):
    check_layer(Scaled(4), torch.randn(5, 2, 4, dtype=DTYPE), monkeypatch)


class SharedConv(nn.Module):
    """One convolution applied twice: its per-sample gradient sums both calls (cross terms in the norm)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x):
        return self.conv(torch.tanh(self.conv(x)))


def test_a_layer_called_twice(monkeypatch):
    check_layer(SharedConv(), torch.randn(4, 2, 5, 5, dtype=DTYPE), monkeypatch)


# --- the engine: every scaled-sum method, micro-batching, frozen layers, empty batches --------------------------

FAST = sorted(name for name, cls in METHODS.items() if not cls.per_sample_vectors)


def test_every_method_but_the_full_batch_momentum_takes_the_fast_path():
    """DP-PSASC*'s full-batch variant keeps an exponential average per training example across steps: N vectors of
    the model's size, a state no pass can recompute."""
    assert FAST == sorted(set(METHODS) - {"psasc-momentum-gd"})


def engine_run(name, per_sample, *, sizes, micro_batch_size=None, freeze=False, q=0.1):
    model = tiny_cnn(dtype=DTYPE)
    if freeze:
        model[0].requires_grad_(False)  # the first convolution: no gradient flows into it
    params = [p for p in model.parameters() if p.requires_grad]
    method = make_method(name, **SCENARIOS[name].hyperparameters)
    engine = DPOptimizer(model, torch.optim.SGD(params, lr=0.5), method, sample_rate=q, expected_batch_size=8,
                         micro_batch_size=micro_batch_size, per_sample=per_sample)
    engine.noise = NoNoise()
    infos = [engine.step(*batch(n, seed=k, dtype=DTYPE)) for k, n in enumerate(sizes)]
    return [p.detach() for p in model.parameters()], infos, engine


@pytest.mark.parametrize("name", FAST)
@pytest.mark.parametrize("micro_batch_size,freeze", [(None, False), (2, False), (3, True)],
                         ids=["whole", "micro-batches", "frozen"])
def test_release_equals_vmap_for_every_fast_method(name, micro_batch_size, freeze):
    sizes = (7, 0, 5, 6)  # an empty batch among them
    runs = [engine_run(name, per_sample, sizes=sizes, micro_batch_size=micro_batch_size, freeze=freeze)
            for per_sample in ("book-keeping", "vmap")]
    (fast, fast_infos, engine), (slow, slow_infos, _) = runs
    assert isinstance(engine.engine, BookKeepingEngine) and engine.engine.passes.checked, "the fast path, no fall-back"
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    for a, b in zip(fast_infos, slow_infos):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("name", sorted(METHODS))
def test_auto_picks_book_keeping_exactly_for_the_fast_methods(name):
    hyperparameters = SCENARIOS[name].hyperparameters
    model = tiny_cnn()
    q = 1.0 if METHODS[name].full_batch else 0.1
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), make_method(name, **hyperparameters),
                         sample_rate=q, expected_batch_size=8)
    assert isinstance(engine.engine, BookKeepingEngine) == (name in FAST)


def test_book_keeping_is_refused_for_a_method_that_reads_the_vectors():
    model = tiny_cnn()
    method = make_method("psasc-momentum-gd", **SCENARIOS["psasc-momentum-gd"].hyperparameters)
    match = r"'psasc-momentum-gd' reads the per-sample gradient vectors.*per_sample='vmap'"
    with pytest.raises(ValueError, match=match):
        DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), method, sample_rate=1.0,
                    expected_batch_size=8, per_sample="book-keeping")


def test_a_misspelt_engine_is_named():
    model = tiny_cnn()
    with pytest.raises(ValueError, match=r"unknown per-sample engine 'bookkeeping' \(did you mean 'book-keeping'"):
        DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), make_method("dpsgd", C=1.0, sigma=1.0),
                    sample_rate=0.1, expected_batch_size=8, per_sample="bookkeeping")


# --- fall-backs: a model outside what Book-Keeping computes exactly gets vmap, with a warning --------------------


class InPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(36, 5), nn.Linear(5, 4)

    def forward(self, x):
        return self.fc2(torch.relu_(self.fc1(x.flatten(1))))  # fc1's output changed in place


class Functional(nn.Module):
    """Reads its child's weight directly: the child's hook never fires (only the self-check can see it)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(36, 4)

    def forward(self, x):
        return nn.functional.linear(x.flatten(1), self.fc.weight) + self.fc.bias


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(6, 2, batch_first=True)
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        x = x.reshape(len(x), 6, 6)
        return self.fc(self.attention(x, x, x)[0].mean(1))


class NoisyScale(Scaled):
    """A layer with its own randomness: run again one example at a time, it gives another output."""

    def forward(self, x):
        return nn.functional.dropout(super().forward(x), 0.5, self.training)


FALLBACKS = {
    "in-place": (InPlace, "modified in place"),
    "functional": (Functional, "'fc.weight' is used inside Functional.forward"),
    "attention": (Attention, "returns several tensors"),
    "randomness": (lambda: nn.Sequential(nn.Flatten(), NoisyScale(36), nn.Linear(36, 4)), "another output"),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_unsupported_models_fall_back_to_vmap_with_a_warning(case):
    build, reason = FALLBACKS[case]
    results = []
    for per_sample in ("auto", "vmap"):
        torch.manual_seed(0)
        model = build().to(DTYPE)
        if case != "randomness":
            model.eval()
        engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.5), make_method("dpsgd", C=1.0, sigma=1.0),
                             sample_rate=0.1, expected_batch_size=8, per_sample=per_sample, noise_seed=3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.manual_seed(5)
            engine.step(*batch(5, dtype=DTYPE))
        messages = [str(w.message) for w in caught if "Book-Keeping" in str(w.message)]
        if per_sample == "auto":
            assert len(messages) == 1 and reason in messages[0] and isinstance(engine.engine, VmapEngine), messages
        else:
            assert messages == []
        results.append([p.detach() for p in model.parameters()])
    if case != "randomness":  # with dropout, both draws differ anyway
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_dropout_in_a_known_layer_keeps_the_fast_path():
    """Dropout between layers is part of the recorded forward: the self-check runs in eval mode, no fall-back."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 8), nn.Dropout(0.5), nn.Tanh(), nn.Linear(8, 4)).train()
    engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.5), make_method("dpsgd", C=1.0, sigma=1.0),
                         sample_rate=0.1, expected_batch_size=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.step(*batch(6))
    assert isinstance(engine.engine, BookKeepingEngine) and engine.engine.passes.checked and model.training


def test_the_plan_names_each_layers_strategy():
    plan = {r["layer"]: r for r in BookKeeping(models.cifar10_cnn(), F).plan(torch.zeros(2, 3, 32, 32))}
    assert plan["fc1"]["strategy"] == layers.NORM_PRODUCT and plan["fc1"]["trainable"] == 2048 * 128 + 128
    assert plan["conv3b"]["strategy"] == layers.GHOST and plan["conv3b"]["positions"] == 8 * 8  # small map, wide
    assert plan["conv1b"]["strategy"] == layers.GROUPED and plan["conv1b"]["positions"] == 32 * 32  # large map
    lstm = {r["layer"]: r for r in BookKeeping(models.char_lstm(data.NAMES_VOCAB_SIZE), F).plan(
        data.encode_names(["Adam"], max_length=9))}
    assert lstm["layers.0.hh"]["positions"] == 9 and lstm["layers.0.hh"]["strategy"] == layers.GHOST  # once per step
    assert lstm["embedding"]["strategy"] == layers.GHOST


def test_a_pass_in_its_two_stages_is_the_pass():
    """``recorded`` (the bench's profile) gives each layer's norms and sum exactly as the engine's call, as often
    as its rules are called, and drops the stored tensors when the block ends; a model the engine refuses is refused
    there too."""
    torch.manual_seed(0)
    model, x, y = models.mnist_cnn(), torch.randn(6, 1, 28, 28), torch.randint(0, 10, (6,))
    engine = BookKeeping(model, F)
    whole, w = engine(x, y), torch.rand(6)
    with engine.recorded(x, y) as rules:
        assert list(rules) == ["conv1", "conv2", "fc1", "fc2"]
        per_layer = {layer: rule() for layer, rule in rules.items()}
        assert torch.equal(rules["conv2"]().sq_norms, per_layer["conv2"].sq_norms)  # again, the same tensors
    assert all(not layer.calls for layer in engine.layers)
    staged = Pass(per_layer, engine._owners, engine.params, 6)
    assert torch.equal(staged.norms, whole.norms)
    assert all(torch.equal(a, b) for a, b in zip(staged.summed(w), whole.summed(w), strict=True))
    with pytest.raises(Unsupported, match="tied weights"):
        with BookKeeping(Tied(), F).recorded(*batch(4)):
            pass


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(IMAGE_MODELS))
def test_engine_step_equals_vmap_on_every_model(name):
    """DP-SGD's released step on every model, in micro-batches of 2: Book-Keeping against vmap."""
    build, shape, _ = IMAGE_MODELS[name]
    x, y = images(5, shape)
    updated = []
    for per_sample in ("book-keeping", "vmap"):
        torch.manual_seed(0)
        model = build().to(DTYPE)
        engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), make_method("dpsgd", C=1.0, sigma=1.0),
                             sample_rate=0.1, expected_batch_size=8, micro_batch_size=2, per_sample=per_sample)
        engine.noise = NoNoise()
        engine.step(x, y)
        updated.append([p.detach() for p in model.parameters()])
    for a, b in zip(*updated):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


VECTOR_METHODS = ("dpdr", "diff", "diff2", "psasc-momentum")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mnist_cnn", "digits_cnn", "cifar10_cnn"])
@pytest.mark.parametrize("method", VECTOR_METHODS)
def test_vector_methods_equal_vmap_on_the_benchmark_cnns(name, method):
    """The vector methods' released steps on the CNNs the benchmarks and the papers train, in micro-batches of 2,
    four steps (DPDR's GDR steps, DIFF2's differences and DP-PSASC*'s full window of K0 = 2 iterates from step 3):
    Book-Keeping against vmap. ``check_vector_queries`` covers their queries on every other model."""
    build, shape, _ = IMAGE_MODELS[name]
    updated = []
    for per_sample in ("book-keeping", "vmap"):
        torch.manual_seed(0)
        model = build().to(DTYPE)
        engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1),
                             make_method(method, **SCENARIOS[method].hyperparameters), sample_rate=0.1,
                             expected_batch_size=8, micro_batch_size=2, per_sample=per_sample)
        engine.noise = NoNoise()
        for k in range(4):
            engine.step(*images(5, shape, seed=k))
        updated.append([p.detach() for p in model.parameters()])
    for a, b in zip(*updated):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


class UnusedBranch(nn.Module):
    """A trainable layer whose output the loss never reads: zero per-sample gradients, as vmap says."""

    def __init__(self):
        super().__init__()
        self.fc, self.aux = nn.Linear(36, 4), nn.Linear(36, 2)

    def forward(self, x):
        x = x.flatten(1)
        self.aux(x)
        return self.fc(x)


def test_a_layer_whose_output_is_unused():
    torch.manual_seed(0)
    compare(UnusedBranch().to(DTYPE), *batch(5, dtype=DTYPE))


class Tied(nn.Module):
    """One weight in two layers (as tied embeddings): Book-Keeping steps aside."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 6), nn.Linear(6, 4)
        self.fc3 = nn.Linear(6, 6)
        self.fc3.weight = self.fc1.weight

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc3(torch.tanh(self.fc1(x.flatten(1)[:, :6])))))


def test_tied_weights_fall_back_to_vmap():
    torch.manual_seed(0)
    model = Tied().to(DTYPE)
    with pytest.warns(UserWarning, match=r"'fc1.weight' is also 'fc3.weight' \(tied weights\)"):
        engine = DPOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1), make_method("dpsgd", C=1.0, sigma=1.0),
                             sample_rate=0.1, expected_batch_size=8)
        engine.step(*batch(4, dtype=DTYPE))
    assert isinstance(engine.engine, VmapEngine)


class FunctionalBeforeZeroHead(Functional):
    """The parameter read outside its layer gets no gradient at first (a zero-initialised head follows it), so
    comparing numbers on the first step could not see the problem; the structure check does."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 4)
        nn.init.zeros_(self.head.weight)

    def forward(self, x):
        return self.head(torch.tanh(super().forward(x)))


def test_a_parameter_read_outside_its_layer_is_seen_even_without_gradient():
    torch.manual_seed(0)
    bk = BookKeeping(FunctionalBeforeZeroHead().to(DTYPE), F)
    with pytest.raises(Exception, match=r"'fc.weight' is used inside FunctionalBeforeZeroHead.forward"):
        bk(*batch(4, dtype=DTYPE))


def test_a_parameter_read_by_the_loss_is_seen():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 4)).to(DTYPE)

    def regularised(out, y):
        return F(out, y) + 1e-3 * model[1].weight.square().sum()

    with pytest.raises(Exception, match=r"'1.weight' is used outside the model"):
        BookKeeping(model, regularised)(*batch(4, dtype=DTYPE))


class LowRank(nn.Linear):
    """A Linear subclass with a parameter of its own (LoRA-like): not the type the linear rule knows."""

    def __init__(self):
        super().__init__(36, 4)
        self.A = nn.Parameter(torch.randn(4, 36) * 0.1)

    def forward(self, x):
        return super().forward(x) + x @ self.A.T


def test_subclasses_and_renamed_parameters_get_the_generic_rule():
    torch.manual_seed(0)
    compare(nn.Sequential(nn.Flatten(), LowRank()).to(DTYPE), *batch(5, dtype=DTYPE))
    pruned = nn.Sequential(nn.Flatten(), nn.Linear(36, 4)).to(DTYPE)
    torch.nn.utils.prune.random_unstructured(pruned[1], "weight", amount=0.5)  # trains weight_orig
    assert layers.rule_for(pruned[1]) is layers.GENERIC
    compare(pruned, *batch(5, dtype=DTYPE))


def test_normalisation_with_nothing_to_sum_over():
    """LayerNorm(d) on (n, d) and GroupNorm on (n, C): the per-sample gradient is the product itself."""
    torch.manual_seed(0)
    compare(nn.Sequential(nn.Flatten(), nn.LayerNorm(36), nn.Linear(36, 4)).to(DTYPE), *batch(5, dtype=DTYPE))
    compare(nn.Sequential(nn.Flatten(), nn.Linear(36, 8), nn.GroupNorm(2, 8), nn.Linear(8, 4)).to(DTYPE),
            *batch(5, dtype=DTYPE))


def test_the_self_check_restores_every_modules_mode():
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 8), nn.Dropout(0.5), nn.Linear(8, 4)).train()
    model[2].eval()  # the user's choice for one submodule
    BookKeeping(model, F)(*batch(4))
    assert model.training and model[1].training and not model[2].training


def test_half_precision_steps_aside():
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 4)).to(torch.bfloat16)
    with pytest.raises(Exception, match=r"torch.bfloat16.*float32, float64"):
        BookKeeping(model, F)(*batch(4, dtype=torch.bfloat16))


def test_an_empty_batch():
    model = tiny_cnn()
    out = BookKeeping(model, F)(*batch(0))
    norms, summed = out.norms, out.summed
    assert norms.shape == (0,) and all(not s.any() for s in summed(torch.zeros(0)))


@pytest.mark.parametrize("grouped", [True, False])
def test_a_wide_convolution_on_a_small_map_sums_from_its_activations(grouped, monkeypatch):
    """Its per-sample gradients (8 x 8 x 3 x 3) outweigh its input and output gradient (8 x 2 x 2 each): they give
    the norms, then are dropped, and the sum is the weight-gradient product of the activations."""
    torch.manual_seed(0)
    conv = nn.Conv2d(8, 8, 3, padding=1)
    assert conv.weight[0].numel() * 8 > 2 * 8 * 2 * 2
    check_layer(conv, torch.randn(5, 8, 2, 2, dtype=DTYPE), monkeypatch, ghost=False, grouped=grouped)
