"""Tests of dpbook.models: exact sizes, shapes, no BatchNorm, and per-sample gradients equal to a per-example loop."""

from __future__ import annotations

import copy
import re
from collections import OrderedDict

import pytest
import torch
import torchvision
from opacus import GradSampleModule
from opacus.validators import ModuleValidator
from torch import nn
from torch.func import functional_call, grad, vmap

from dpbook.models import (
    MODELS,
    build_model,
    cifar10_cnn,
    cifar10_cnn_gn,
    count_parameters,
    digits_cnn,
    linear_classifier,
    mnist_cnn,
    mnist_cnn_gn,
    replace_batchnorm,
    resnet9,
    resnet18_gn,
    resnet34_gn,
)
from dpbook.models.pooling import MaxPool2d
from dpbook.per_sample import check_no_batchnorm

PARAMETERS = {
    "mnist_cnn": 26_010,
    "cifar10_cnn": 550_570,
    "resnet18_gn": 11_181_642,
    "resnet34_gn": 21_289_802,
    "resnet9": 6_573_130,
    "linear_classifier": 40_970,
    "digits_cnn": 6_090,
    "digits_mlp": 2_410,
    "mnist_cnn_gn": 26_010 + 2 * (16 + 32),  # 26,106: a scale and a shift per channel of each conv
    "cifar10_cnn_gn": 550_570 + 2 * 2 * (32 + 64 + 128),  # 551,466
}

INPUT_SHAPE = {
    "mnist_cnn": (1, 28, 28),
    "cifar10_cnn": (3, 32, 32),
    "resnet18_gn": (3, 32, 32),
    "resnet34_gn": (3, 32, 32),
    "resnet9": (3, 32, 32),
    "linear_classifier": (4096,),
    "digits_cnn": (1, 8, 8),
    "digits_mlp": (1, 8, 8),
    "mnist_cnn_gn": (1, 28, 28),
    "cifar10_cnn_gn": (3, 32, 32),
}


@pytest.fixture(scope="module")
def models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {name: build_model(name) for name in PARAMETERS}


def test_registry_is_complete():
    assert set(MODELS) == set(PARAMETERS) | {"char_lstm", "bert_base"}  # the text models: tests/test_text.py


@pytest.mark.parametrize("name", list(PARAMETERS))
def test_parameter_count_and_forward_shape(models, name):
    model = models[name]
    assert count_parameters(model) == PARAMETERS[name]
    with torch.no_grad():
        assert model(torch.randn(2, *INPUT_SHAPE[name])).shape == (2, 10)


def test_options_change_sizes_as_documented():
    assert count_parameters(resnet18_gn(num_classes=1000)) == 11_689_512
    assert count_parameters(resnet34_gn(num_classes=1000)) == 21_797_672
    assert count_parameters(digits_cnn(num_classes=3)) == 5_187
    # GroupNorm after each conv adds a scale and a shift per channel
    assert count_parameters(mnist_cnn(norm_groups=16)) == 26_010 + 2 * (16 + 32)
    assert count_parameters(cifar10_cnn(norm_groups=16)) == 550_570 + 2 * 2 * (32 + 64 + 128)
    # T&B's padding 2 and Papernot/Opacus's padding 3 give the same sizes
    assert mnist_cnn(conv1_padding=2)(torch.zeros(1, 1, 28, 28)).shape == (1, 10)
    assert resnet9(num_classes=2, in_channels=1)(torch.zeros(1, 1, 64, 64)).shape == (1, 2)


@pytest.mark.parametrize(("gn", "plain", "shape", "groups"), [
    (mnist_cnn_gn, mnist_cnn, (1, 28, 28), [16, 32]),
    (cifar10_cnn_gn, cifar10_cnn, (3, 32, 32), [32] * 6),
])
def test_dpdrs_cnns_are_the_plain_cnns_with_groupnorm_after_each_conv(gn, plain, shape, groups):
    """DPDR's models (reading DPDR-21): GroupNorm(gcd(32, C), C) right after every conv, before its tanh; the other
    layers are the plain network's, so its state dict loads into ours once the GroupNorms are left out."""
    model, reference = gn(), plain()
    layers = list(model.named_children())
    norms = [(i, m) for i, (_, m) in enumerate(layers) if isinstance(m, nn.GroupNorm)]
    assert [m.num_groups for _, m in norms] == groups
    for i, m in norms:
        assert isinstance(layers[i - 1][1], nn.Conv2d) and layers[i - 1][1].out_channels == m.num_channels
        assert isinstance(layers[i + 1][1], nn.Tanh)
    assert count_parameters(model) == count_parameters(reference) + sum(2 * m.num_channels for _, m in norms)
    missing, unexpected = model.load_state_dict(reference.state_dict(), strict=False)
    assert unexpected == [] and {k.split(".")[0] for k in missing} == {layers[i][0] for i, _ in norms}
    assert model(torch.zeros(2, *shape)).shape == (2, 10)
    assert build_model(gn.__name__.upper())(torch.zeros(1, *shape)).shape == (1, 10)


@pytest.mark.parametrize(
    ("ours", "theirs"), [(resnet18_gn, torchvision.models.resnet18), (resnet34_gn, torchvision.models.resnet34)]
)
def test_resnets_are_torchvision_resnets_with_groupnorm(ours, theirs):
    """Our state dict loads into torchvision's ResNet built with ``norm_layer=GroupNorm`` and gives equal outputs."""
    torch.manual_seed(1)
    model = ours(num_classes=10).eval()
    reference = theirs(num_classes=10, norm_layer=lambda c: nn.GroupNorm(min(32, c), c)).eval()
    renamed = OrderedDict((re.sub(r"\bgn(\d)", r"bn\1", k), v) for k, v in model.state_dict().items())
    reference.load_state_dict(renamed, strict=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))


@pytest.mark.parametrize("name", list(PARAMETERS))
def test_no_batchnorm_and_no_inplace_relu(models, name):
    model = models[name]
    check_no_batchnorm(model)
    assert ModuleValidator.validate(model, strict=False) == []  # Opacus's own compatibility check
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert not any(getattr(m, "inplace", False) for m in model.modules())


def _loop_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Reference: one example at a time, ordinary autograd."""
    per_example = []
    for i in range(len(x)):
        model.zero_grad()
        nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        per_example.append([p.grad.clone() for p in model.parameters()])
    return [torch.stack(g) for g in zip(*per_example)]


def _vmap_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        return nn.functional.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return [grads[k] for k in params]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "batch"), [("mnist_cnn", 3), ("digits_cnn", 3), ("digits_mlp", 3), ("resnet18_gn", 2),
                                             ("resnet9", 2), ("linear_classifier", 3), ("mnist_cnn_gn", 3)])
def test_vmap_per_sample_gradients_match_loop(models, name, batch):
    # In float64: in float32 two max-pooled values can be equal to rounding, and the loop and vmap (different conv
    # kernels) may then route a gradient to different maxima, which is not what this test is about (seen on resnet9).
    torch.manual_seed(2)
    model = copy.deepcopy(models[name]).double()
    x, y = torch.randn(batch, *INPUT_SHAPE[name], dtype=torch.float64), torch.randint(10, (batch,))
    for ours, reference in zip(_vmap_gradients(model, x, y), _loop_gradients(model, x, y)):
        torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-4)


# The input image does not require grad, so Opacus's full backward hook on the first conv warns; harmless here.
@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.parametrize("build, shape", [(resnet18_gn, (3, 32, 32)), (mnist_cnn, (1, 28, 28))])
def test_opacus_hooks_per_sample_gradients_match_loop(build, shape):
    """Opacus's GradSampleModule hooks run on the GroupNorm ResNet (out-of-place residual add, no in-place ReLU) and
    on the MNIST CNN, whose convolutions read default-layout activations (Opacus's hooks get channels-last ones
    wrong)."""
    torch.manual_seed(3)
    model = build()
    x, y = torch.randn(2, *shape), torch.randint(10, (2,))
    reference = _loop_gradients(model, x, y)
    hooked = GradSampleModule(model, loss_reduction="sum")
    nn.functional.cross_entropy(hooked(x), y, reduction="sum").backward()
    for p, expected in zip(model.parameters(), reference):
        torch.testing.assert_close(p.grad_sample, expected, atol=1e-5, rtol=1e-4)


def test_linear_classifier_standardisation_is_fixed_and_per_example():
    """Tramer & Boneh's defaults (mean 0, var 1) give x / sqrt(1 + 1e-5); given statistics are fixed buffers."""
    torch.manual_seed(4)
    model = linear_classifier()
    assert [name for name, _ in model.named_parameters()] == ["fc.weight", "fc.bias"]  # only the linear layer trains
    assert {name for name, _ in model.named_buffers()} == {"standardize.mean", "standardize.var"}
    x = torch.randn(3, 4096)
    torch.testing.assert_close(model.standardize(x), x / (1 + 1e-5) ** 0.5)
    mean, var = torch.randn(5), torch.tensor([4.0, 1.0, 0.25, 0.0, 9.0])
    small = linear_classifier(5, 3, mean=mean, var=var)
    assert count_parameters(small) == 18 and {"fc.weight", "standardize.var"} <= set(small.state_dict())
    x = torch.randn(4, 5)
    expected = (x - mean) / torch.sqrt(var + 1e-5)
    expected[:, 3] = 0  # a constant feature (zero variance) is dropped, as in Tramer & Boneh's standardize()
    torch.testing.assert_close(small.standardize(x), expected)
    # per example: the output for one example does not depend on the rest of the batch (no batch statistics)
    torch.testing.assert_close(small(x)[:1], small(x[:1]))
    small.train()
    before = small.standardize.mean.clone()
    small(x * 100)
    assert torch.equal(small.standardize.mean, before)  # nothing is updated in training mode either
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        linear_classifier(5, 3, mean=torch.zeros(4))
    with pytest.raises(ValueError, match="non-negative"):
        linear_classifier(2, 3, var=torch.tensor([1.0, -1.0]))


def test_check_no_batchnorm_names_the_layer_and_the_fix():
    model = nn.Sequential(OrderedDict(features=nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)), head=nn.Flatten()))
    with pytest.raises(ValueError) as info:
        check_no_batchnorm(model)
    message = str(info.value)
    assert "'features.1'" in message and "BatchNorm2d" in message
    assert "GroupNorm" in message and "dpbook.models.replace_batchnorm" in message and "ModuleValidator.fix" in message
    with pytest.raises(ValueError, match="'bn1'"):
        check_no_batchnorm(torchvision.models.resnet18())


def test_replace_batchnorm_on_torchvision_resnet():
    model = replace_batchnorm(torchvision.models.resnet18(num_classes=10))
    check_no_batchnorm(model)
    assert count_parameters(model) == 11_181_642  # GroupNorm has the affine parameters of BatchNorm
    assert {m.num_groups for m in model.modules() if isinstance(m, nn.GroupNorm)} == {32}
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 10)
    odd = replace_batchnorm(nn.Sequential(nn.Linear(4, 48), nn.BatchNorm1d(48, affine=False)))
    assert (odd[1].num_groups, odd[1].affine) == (16, False)  # gcd(32, 48): a valid group count for any width
    assert isinstance(replace_batchnorm(nn.BatchNorm2d(16)), nn.GroupNorm)


def test_build_model_by_name():
    assert count_parameters(build_model("MNIST_CNN")) == 26_010
    assert build_model("resnet9", num_classes=2)(torch.zeros(1, 3, 32, 32)).shape == (1, 2)
    with pytest.raises(ValueError, match="valid: mnist_cnn, cifar10_cnn, resnet18_gn"):
        build_model("vgg16")



# --- max pooling: nn.MaxPool2d bit for bit -------------------------------------------------------------------


def _adversarial(shape, seed):
    """Small integers (ties in most windows), with NaN, +-inf and -0.0 sprinkled in."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, shape, generator=gen).float()
    for value, share in ((float("nan"), 0.05), (float("inf"), 0.05), (-float("inf"), 0.05), (-0.0, 0.2)):
        x[torch.rand(shape, generator=gen) < share] = value
    return x


def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("kernel", "stride", "padding"),
                         [(2, 1, 0), (2, 2, 0), (3, 2, 1), (3, 1, 1), ((2, 3), (1, 2), (0, 1))])
def test_max_pool_is_torchs_bit_for_bit_on_ties_nans_and_signed_zeros(kernel, stride, padding, seed):
    """Values, the gradient of overlapping windows (summed in the same order) and the no-grad path."""
    x = _adversarial((3, 5, 9, 11), seed).requires_grad_()
    fast, usual = MaxPool2d(kernel, stride, padding), nn.MaxPool2d(kernel, stride, padding)
    out, ref = fast(x), usual(x)
    assert torch.equal(_bits(out), _bits(ref))
    assert out.grad_fn is not None and "ChannelsLast" in type(out.grad_fn).__name__  # the fast path was taken
    g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(_bits(torch.autograd.grad(out, x, g)[0]), _bits(torch.autograd.grad(ref, x, g)[0]))
    with torch.no_grad():
        assert torch.equal(_bits(fast(x)), _bits(usual(x)))


def test_max_pool_under_vmap_is_torchs():
    """dpbook's vmap path (torch.func transforms) takes torch's own pooling: the same per-sample gradients."""
    torch.manual_seed(0)
    model = mnist_cnn()
    reference = copy.deepcopy(model)
    for name in ("pool1", "pool2"):
        setattr(reference, name, nn.MaxPool2d(2, stride=1))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = torch.randn(6, 1, 28, 28), torch.randint(0, 10, (6,))

    def per_sample(net):
        def loss(p, xi, yi):
            return nn.functional.cross_entropy(functional_call(net, p, (xi[None],)), yi[None])
        return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)

    ours, theirs = per_sample(model), per_sample(reference)
    assert all(torch.equal(ours[k], theirs[k]) for k in params)


def test_the_models_train_as_with_torchs_pooling_bit_for_bit():
    """Private steps on the MNIST CNN (stride-1 pooling: gradients shared by windows) and the CIFAR-10 CNN give the
    same parameters as the same models with ``nn.MaxPool2d``: committed results stay reproducible."""
    from dpbook.methods import METHODS
    from dpbook.optim import DPOptimizer

    for build, shape in ((mnist_cnn, (1, 28, 28)), (cifar10_cnn, (3, 32, 32))):
        torch.manual_seed(0)
        model = build()
        reference = copy.deepcopy(model)
        for name, module in list(reference.named_children()):
            if isinstance(module, nn.MaxPool2d):
                setattr(reference, name, nn.MaxPool2d(module.kernel_size, module.stride))
        assert sum(type(m) is MaxPool2d for m in model.modules()) == 2 + (build is cifar10_cnn)
        x, y = torch.randn(32, *shape), torch.randint(0, 10, (32,))
        for net in (model, reference):
            engine = DPOptimizer(net, torch.optim.Adam(net.parameters(), lr=0.01),
                                 METHODS["dpsgd"](C=1.0, sigma=1.0), sample_rate=0.1, expected_batch_size=32,
                                 noise_seed=3)
            for _ in range(3):
                engine.step(x, y)
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))
