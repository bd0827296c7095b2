"""The vision models of the three papers, all free of BatchNorm so that per-sample gradients are well defined.

BatchNorm mixes the examples of a batch: one example's gradient then depends on the others, and DP-SGD's
per-example sensitivity bound no longer holds. Every model here uses GroupNorm or no normalisation, ReLU with
``inplace=False``, and out-of-place residual additions, so both ``torch.func.vmap`` and Opacus's per-sample hooks
work on them. Max pooling is :class:`dpbook.models.pooling.MaxPool2d`: ``nn.MaxPool2d`` bit for bit, faster on a CPU.

=====================  =============================================  ===========  ==============================
name                   model                                          parameters   used by
=====================  =============================================  ===========  ==============================
``mnist_cnn``          Papernot et al. / Tramer & Boneh MNIST CNN     26,010       DC-SGD (MNIST), DP-PSASC (MNIST,
                                                                                   FashionMNIST), DPDR without GN
``cifar10_cnn``        Tramer & Boneh CIFAR-10 CNN                    550,570      DPDR (CIFAR-10) without GN
``mnist_cnn_gn``       ``mnist_cnn``, GroupNorm after each conv       26,106       DPDR (MNIST)
``cifar10_cnn_gn``     ``cifar10_cnn``, GroupNorm after each conv     551,466      DPDR (CIFAR-10)
``resnet18_gn``        torchvision ResNet18, BatchNorm -> GroupNorm   11,181,642   DC-SGD (CIFAR10, SVHN), DPDR (SVHN)
``resnet34_gn``        torchvision ResNet34, BatchNorm -> GroupNorm   21,289,802   DC-SGD (CIFAR10, SVHN)
``resnet9``            ResNet9 (Page's DAWNBench net) with GroupNorm  6,573,130    DP-PSASC (CelebA, Imagenette)
``linear_classifier``  fixed standardisation + linear (T&B)           40,970       DP-PSASC (CIFAR10 on 4096-d
                                                                                   SimCLRv2 features)
``digits_cnn``         small CNN for 1x8x8 digits (ours)              6,090        CPU experiments on digits
``digits_mlp``         one-hidden-layer MLP for 1x8x8 digits (ours)   2,410        CPU experiments on digits
=====================  =============================================  ===========  ==============================

Counts are for 10 classes and the default options. The text models are in :mod:`dpbook.models.text`; the registry
:data:`dpbook.models.MODELS` holds both, and :func:`dpbook.models.build_model` builds any of them by name, sized for a
task when given one. :func:`dpbook.per_sample.check_no_batchnorm` is the engine's check.
"""

from __future__ import annotations

__all__ = [
    "group_norm", "replace_batchnorm", "count_parameters", "mnist_cnn", "cifar10_cnn", "mnist_cnn_gn", "cifar10_cnn_gn",
    "digits_cnn", "digits_mlp", "BasicBlock", "ResNetGN", "resnet18_gn", "resnet34_gn", "Residual", "resnet9",
    "Standardize", "linear_classifier"
]

import math
from collections import OrderedDict

import torch
from torch import nn

from dpbook.models.pooling import MaxPool2d

# ---------------------------------------------------------------------------------------------------------------
# Normalisation helpers
# ---------------------------------------------------------------------------------------------------------------


def group_norm(num_channels: int, *, max_groups: int = 32, affine: bool = True) -> nn.GroupNorm:
    """``GroupNorm(gcd(max_groups, C), C)``, which is ``GroupNorm(min(32, C), C)`` whenever C is a power of two.

    The gcd keeps the group count a divisor of C for any C; it is the rule of Opacus's ``ModuleValidator.fix``.
    The papers give no group count; 32 groups is Wu & He's default. GroupNorm has the same affine parameters
    as BatchNorm (a scale and a shift per channel), so swapping one for the other keeps the parameter count.

    Example:
        >>> [group_norm(c).num_groups for c in (16, 64, 512, 48)]
        [16, 32, 32, 16]
    """
    return nn.GroupNorm(math.gcd(max_groups, num_channels), num_channels, affine=affine)


def replace_batchnorm(model: nn.Module) -> nn.Module:
    """Swap every BatchNorm of ``model`` for a fresh :func:`group_norm` in place; return the model.

    The ``affine`` flag is kept; learned BatchNorm statistics and affine values are dropped (they have no
    GroupNorm meaning). If ``model`` itself is a BatchNorm, the new GroupNorm is returned.

    Example:
        >>> model = replace_batchnorm(nn.Sequential(nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64)))
        >>> type(model[1]).__name__, model[1].num_groups
        ('GroupNorm', 32)
    """
    if isinstance(model, nn.modules.batchnorm._BatchNorm):
        return group_norm(model.num_features, affine=model.affine)
    for name, child in model.named_children():
        setattr(model, name, replace_batchnorm(child))
    return model


def count_parameters(model: nn.Module) -> int:
    """The number of trainable parameters ``d``.

    Example:
        >>> count_parameters(mnist_cnn())
        26010
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ---------------------------------------------------------------------------------------------------------------
# Small CNNs (tanh, no normalisation unless asked)
# ---------------------------------------------------------------------------------------------------------------


def _conv_tanh(name: str, conv: nn.Conv2d, norm_groups: int | None) -> list[tuple[str, nn.Module]]:
    layers = [(f"conv{name}", conv)]
    if norm_groups is not None:
        layers.append((f"gn{name}", group_norm(conv.out_channels, max_groups=norm_groups)))
    return layers + [(f"tanh{name}", nn.Tanh())]


def mnist_cnn(*, conv1_padding: int = 3, norm_groups: int | None = None) -> nn.Sequential:
    """The standard DP MNIST CNN for 1x28x28 inputs: 2 conv + 2 linear layers, tanh, 26,010 parameters.

    ``conv(16, 8x8, stride 2) - tanh - maxpool(2, stride 1) - conv(32, 4x4, stride 2) - tanh - maxpool(2, stride 1)
    - linear(512, 32) - tanh - linear(32, 10)``, the network of Papernot et al. ("Tempered sigmoid activations"),
    Tramer & Boneh ("Differentially private learning needs better features") and the Opacus MNIST example.

    - ``conv1_padding=3`` is TF "SAME" padding as in Papernot et al. and Opacus; Tramer & Boneh's code uses 2.
      Both give 4x4 maps before the linear layers and the same 26,010 parameters.
    - DC-SGD's MNIST CNN has "two convolution layers" and 28,058 parameters, with no layers given (reading DCSGD-35):
      we use this network instead, and report d = 26,010.
    - DPDR's "4-layer CNN" and DP-PSASC's MNIST/FashionMNIST CNN cite this network (Tramer & Boneh); DP-PSASC's
      text says "four convolutional layers and one fully connected layer" without sizes (reading PSASC-27).
    - ``norm_groups``: insert :func:`group_norm` (``max_groups=norm_groups``) after each convolution, before tanh.
      DPDR says all its models use group normalisation without saying where (reading DPDR-21); this is our reading.

    Example:
        >>> import torch
        >>> mnist_cnn()(torch.zeros(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """
    layers = [
        *_conv_tanh("1", nn.Conv2d(1, 16, 8, stride=2, padding=conv1_padding), norm_groups),
        ("pool1", MaxPool2d(2, stride=1)),
        *_conv_tanh("2", nn.Conv2d(16, 32, 4, stride=2), norm_groups),
        ("pool2", MaxPool2d(2, stride=1)),
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(32 * 4 * 4, 32)),
        ("tanh3", nn.Tanh()),
        ("fc2", nn.Linear(32, 10)),
    ]
    return nn.Sequential(OrderedDict(layers))


def cifar10_cnn(*, norm_groups: int | None = None) -> nn.Sequential:
    """Tramer & Boneh's end-to-end CIFAR-10 CNN for 3x32x32 inputs: 6 conv + 2 linear layers, tanh, 550,570 params.

    Three blocks ``[conv3x3(c) - tanh - conv3x3(c) - tanh - maxpool(2)]`` with c = 32, 64, 128 (padding 1),
    then ``linear(128*4*4, 128) - tanh - linear(128, 10)``. DPDR calls its CIFAR-10 model a "5-layer CNN which
    follows" Tramer & Boneh and Papernot et al.; the cited network has 8 weight layers (reading DPDR-20), and we
    build the cited one. ``norm_groups`` inserts GroupNorm after each convolution as in :func:`mnist_cnn` (reading
    DPDR-21).

    Example:
        >>> import torch
        >>> cifar10_cnn()(torch.zeros(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """
    layers, c_in = [], 3
    for block, c in enumerate((32, 64, 128), start=1):
        for i in "ab":
            layers += _conv_tanh(f"{block}{i}", nn.Conv2d(c_in, c, 3, padding=1), norm_groups)
            c_in = c
        layers.append((f"pool{block}", MaxPool2d(2)))
    layers += [
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(128 * 4 * 4, 128)),
        ("tanh_fc", nn.Tanh()),
        ("fc2", nn.Linear(128, 10)),
    ]
    return nn.Sequential(OrderedDict(layers))


def mnist_cnn_gn(*, conv1_padding: int = 3) -> nn.Sequential:
    """DPDR's MNIST CNN: :func:`mnist_cnn` with GroupNorm after each convolution, before tanh; 26,106 parameters.

    DPDR says all its models use group normalisation, without placement or group count (reading DPDR-21): we put a
    :func:`group_norm` (``max_groups=32``: 16 groups of the 16 channels, 32 of the 32) after each of the two
    convolutions, which adds a scale and a shift per channel, 2 x (16 + 32) = 96 parameters.

    Example:
        >>> import torch
        >>> model = mnist_cnn_gn()
        >>> count_parameters(model), [m.num_groups for m in model if isinstance(m, nn.GroupNorm)]
        (26106, [16, 32])
        >>> model(torch.zeros(2, 1, 28, 28)).shape
        torch.Size([2, 10])
    """
    return mnist_cnn(conv1_padding=conv1_padding, norm_groups=32)


def cifar10_cnn_gn() -> nn.Sequential:
    """DPDR's CIFAR-10 CNN: :func:`cifar10_cnn` with GroupNorm after each convolution, before tanh; 551,466 params.

    As :func:`mnist_cnn_gn` (reading DPDR-21): a :func:`group_norm` with 32 groups after each of the six
    convolutions (32, 32, 64, 64, 128, 128 channels), 2 x 2 x (32 + 64 + 128) = 896 parameters more than the plain
    network. DPDR's SVHN model is ``resnet18_gn``, whose GroupNorms replace ResNet18's BatchNorms.

    Example:
        >>> import torch
        >>> model = cifar10_cnn_gn()
        >>> count_parameters(model), {m.num_groups for m in model if isinstance(m, nn.GroupNorm)}
        (551466, {32})
        >>> model(torch.zeros(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """
    return cifar10_cnn(norm_groups=32)


def digits_cnn(*, num_classes: int = 10) -> nn.Sequential:
    """A small CNN for 1x8x8 images (scikit-learn digits): 6,090 parameters, fast on a CPU. Not from a paper.

    ``conv(16, 3x3, pad 1) - tanh - maxpool(2) - conv(32, 3x3, pad 1) - tanh - maxpool(2) - linear(128, classes)``.

    Example:
        >>> import torch
        >>> digits_cnn()(torch.zeros(2, 1, 8, 8)).shape
        torch.Size([2, 10])
    """
    layers = [
        ("conv1", nn.Conv2d(1, 16, 3, padding=1)),
        ("tanh1", nn.Tanh()),
        ("pool1", MaxPool2d(2)),
        ("conv2", nn.Conv2d(16, 32, 3, padding=1)),
        ("tanh2", nn.Tanh()),
        ("pool2", MaxPool2d(2)),
        ("flatten", nn.Flatten()),
        ("fc", nn.Linear(32 * 2 * 2, num_classes)),
    ]
    return nn.Sequential(OrderedDict(layers))


def digits_mlp(*, num_classes: int = 10, hidden: int = 32) -> nn.Sequential:
    """A one-hidden-layer tanh MLP for 1x8x8 digits: 2,410 parameters (hidden 32). Not from a paper.

    ``flatten(64) - linear(hidden) - tanh - linear(classes)``. A private run of 10 epochs on digits takes about
    0.3 s on one CPU thread (the CNN: about 1.3 s), which is what makes the digits benchmark of every method,
    budget, protocol and seed affordable on a CPU.

    Example:
        >>> import torch
        >>> digits_mlp()(torch.zeros(2, 1, 8, 8)).shape, count_parameters(digits_mlp())
        (torch.Size([2, 10]), 2410)
    """
    return nn.Sequential(OrderedDict([
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(64, hidden)),
        ("tanh", nn.Tanh()),
        ("fc2", nn.Linear(hidden, num_classes)),
    ]))


# ---------------------------------------------------------------------------------------------------------------
# ResNet18 / ResNet34 with GroupNorm (torchvision's architecture)
# ---------------------------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """torchvision's ResNet ``BasicBlock`` with GroupNorm, and its residual sum written out of place.

    ``relu(gn2(conv2(relu(gn1(conv1(x))))) + downsample(x))``; ``downsample`` is a strided 1x1 conv + GroupNorm
    when the shape changes, else the identity.

    Example:
        >>> import torch
        >>> BasicBlock(64, 128, stride=2)(torch.zeros(1, 64, 8, 8)).shape
        torch.Size([1, 128, 4, 4])
    """

    def __init__(self, in_channels: int, out_channels: int, *, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.gn1 = group_norm(out_channels)
        self.relu = nn.ReLU(inplace=False)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.gn2 = group_norm(out_channels)
        self.downsample: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), group_norm(out_channels)
            )

    def forward(self, x):
        out = self.relu(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        out = out + self.downsample(x)
        return self.relu(out)


class ResNetGN(nn.Module):
    """torchvision's ResNet (ImageNet stem: 7x7 conv stride 2, 3x3 max-pool) with :class:`BasicBlock` and GroupNorm.

    Module names and initialisation follow torchvision (``gn*`` where torchvision has ``bn*``), so the parameter count
    equals torchvision's for the same ``num_classes``. The papers do not say whether they used the ImageNet stem or a
    CIFAR 3x3 stem; the quoted sizes (about 12M and 22M parameters) match torchvision's networks. On 32x32 inputs the
    last stage works on 1x1 maps.

    Example:
        >>> import torch
        >>> ResNetGN((1, 1, 1, 1), num_classes=3)(torch.zeros(1, 3, 32, 32)).shape
        torch.Size([1, 3])
    """

    def __init__(self, blocks_per_stage: tuple[int, int, int, int], *, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.gn1 = group_norm(64)
        self.relu = nn.ReLU(inplace=False)
        self.maxpool = MaxPool2d(3, stride=2, padding=1)
        widths, c_in = (64, 128, 256, 512), 64
        for stage, (width, blocks) in enumerate(zip(widths, blocks_per_stage), start=1):
            stride = 1 if stage == 1 else 2
            layer = [BasicBlock(c_in, width, stride=stride)] + [BasicBlock(width, width) for _ in range(blocks - 1)]
            setattr(self, f"layer{stage}", nn.Sequential(*layer))
            c_in = width
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():  # torchvision's initialisation; GroupNorm already starts at weight 1, bias 0
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.gn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def resnet18_gn(*, num_classes: int = 10) -> ResNetGN:
    """ResNet18 with GroupNorm(min(32, C), C): 11,181,642 parameters for 10 classes (11,689,512 for 1000).

    DC-SGD (CIFAR10, SVHN) and DPDR (SVHN) replace BatchNorm by GroupNorm without giving the group count;
    32 groups (Opacus's default) is our assumption.

    Example:
        >>> count_parameters(resnet18_gn())
        11181642
    """
    return ResNetGN((2, 2, 2, 2), num_classes=num_classes)


def resnet34_gn(*, num_classes: int = 10) -> ResNetGN:
    """ResNet34 with GroupNorm(min(32, C), C): 21,289,802 parameters for 10 classes (21,797,672 for 1000).

    Example:
        >>> count_parameters(resnet34_gn())
        21289802
    """
    return ResNetGN((3, 4, 6, 3), num_classes=num_classes)


# ---------------------------------------------------------------------------------------------------------------
# ResNet9 with GroupNorm
# ---------------------------------------------------------------------------------------------------------------


def _conv_gn_relu(c_in: int, c_out: int, *, pool: bool = False) -> nn.Sequential:
    layers = [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), group_norm(c_out), nn.ReLU(inplace=False)]
    return nn.Sequential(*layers, *([MaxPool2d(2)] if pool else []))


class Residual(nn.Module):
    """``x + body(x)``, written out of place.

    Example:
        >>> import torch
        >>> Residual(nn.Identity())(torch.ones(2))
        tensor([2., 2.])
    """

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


def resnet9(*, num_classes: int = 10, in_channels: int = 3) -> nn.Sequential:
    """ResNet9 (Page's DAWNBench CIFAR-10 net, as used in DP work) with GroupNorm: 6,573,130 params for 10 classes.

    ``prep conv 64 - conv 128 + pool - residual(2 x conv 128) - conv 256 + pool - conv 512 + pool -
    residual(2 x conv 512) - global max-pool - linear(512, classes)``; every conv is 3x3 without bias, followed
    by GroupNorm(min(32, C), C) and ReLU. DP-PSASC trains "ResNet9 [He et al.]" on CelebA and Imagenette without
    giving the architecture, normalisation or resolution (reading PSASC-28): this network, GroupNorm and the global
    pooling (any input size of at least 8x8 works) are our choices. Page's original ends with a fixed 4x4 max-pool
    (for 32x32 inputs) and a bias-free linear layer whose logits are scaled by 0.125; we use global max-pooling and
    an ordinary linear layer, as DP implementations of ResNet9 commonly do.

    Example:
        >>> import torch
        >>> resnet9(num_classes=2)(torch.zeros(1, 3, 64, 64)).shape
        torch.Size([1, 2])
    """
    layers = [
        ("prep", _conv_gn_relu(in_channels, 64)),
        ("layer1", _conv_gn_relu(64, 128, pool=True)),
        ("res1", Residual(nn.Sequential(_conv_gn_relu(128, 128), _conv_gn_relu(128, 128)))),
        ("layer2", _conv_gn_relu(128, 256, pool=True)),
        ("layer3", _conv_gn_relu(256, 512, pool=True)),
        ("res3", Residual(nn.Sequential(_conv_gn_relu(512, 512), _conv_gn_relu(512, 512)))),
        ("pool", nn.AdaptiveMaxPool2d(1)),
        ("flatten", nn.Flatten()),
        ("fc", nn.Linear(512, num_classes)),
    ]
    return nn.Sequential(OrderedDict(layers))


# ---------------------------------------------------------------------------------------------------------------
# Linear classifier on pre-extracted features (Tramer & Boneh's transfer learning)
# ---------------------------------------------------------------------------------------------------------------


class Standardize(nn.Module):
    """``(x - mean) / sqrt(var + eps)`` per feature with fixed buffers, and 0 for features whose ``var`` is 0.

    Tramer & Boneh's ``StandardizeLayer``: no trainable parameters and no batch statistics (unlike BatchNorm), so
    each example is transformed on its own and per-sample gradients are well defined. ``mean`` and ``var`` are
    buffers: saved with the state dict, moved by ``.to(device)``, never trained.

    Example:
        >>> layer = Standardize(torch.tensor([1.0, 0.0]), torch.tensor([4.0, 0.0]), eps=0.0)
        >>> layer(torch.tensor([[3.0, 5.0]]))
        tensor([[1., 0.]])
    """

    def __init__(self, mean: torch.Tensor, var: torch.Tensor, *, eps: float = 1e-5):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32).clone())
        self.register_buffer("var", torch.as_tensor(var, dtype=torch.float32).clone())
        self.eps = eps

    def forward(self, x):
        scale = torch.where(self.var != 0, torch.rsqrt(self.var + self.eps), torch.zeros_like(self.var))
        return (x - self.mean) * scale

    def extra_repr(self) -> str:
        return f"{self.mean.numel()}, eps={self.eps}"


def linear_classifier(
    in_features: int = 4096,
    num_classes: int = 10,
    *,
    mean: torch.Tensor | None = None,
    var: torch.Tensor | None = None,
) -> nn.Sequential:
    """A fixed :class:`Standardize` layer then ``Linear(in_features, num_classes)``: 40,970 parameters for 4096 -> 10.

    DP-PSASC's "CIFAR10 on SimCLR" task, following Tramer & Boneh (``transfer/transfer_cifar.py`` of
    ``ftramer/Handcrafted-DP``): a linear classifier on the 4096-dimensional SimCLRv2 ``r50_2x_sk1`` features read
    by ``dpbook.data.load_tensors("cifar10-simclr")``. Only the linear layer is trained.

    By default ``mean = 0`` and ``var = 1``, exactly as in Tramer & Boneh's script: the layer then only divides by
    ``sqrt(1 + 1e-5)``, i.e. it is (almost) the identity and the features are used as extracted. Pass ``mean`` and
    ``var`` (shape ``(in_features,)``) to standardise for real, but they must not come from the private training
    set without privacy: use public data, or statistics released with DP and charged to the budget. No BatchNorm:
    its batch statistics would mix the examples of a batch.

    Example:
        >>> model = linear_classifier()
        >>> count_parameters(model), model(torch.zeros(2, 4096)).shape
        (40970, torch.Size([2, 10]))
    """
    mean = torch.zeros(in_features) if mean is None else torch.as_tensor(mean)
    var = torch.ones(in_features) if var is None else torch.as_tensor(var)
    if mean.shape != (in_features,) or var.shape != (in_features,):
        raise ValueError(
            f"mean and var must have shape ({in_features},), got {tuple(mean.shape)} and {tuple(var.shape)}"
        )
    if (var < 0).any():
        raise ValueError("var must be non-negative")
    return nn.Sequential(OrderedDict([
        ("standardize", Standardize(mean, var)),
        ("fc", nn.Linear(in_features, num_classes)),
    ]))
