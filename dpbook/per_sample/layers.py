r"""Per-layer rules: one layer's per-sample gradient norms and re-weighted sum from its stored tensors.

Example i's gradient of a layer's parameters depends on two tensors only: the layer's input ``a_i`` (its
activations) and the gradient ``g_i`` of the summed loss with respect to the layer's output. From them, a rule
gives, for the layer's trainable parameters together,

- ``gradients``: each parameter's per-sample gradients :math:`G_i`, formed or not (:class:`PerSample`), which give
  their squared norms, their inner products :math:`\langle G_i, V\rangle` with a fixed tensor (DPDR's and DIFF's
  projections) and the norms of linear combinations with the same layer's at other parameter values (DIFF2's
  difference :math:`G_i - H_i`, DP-PSASC*'s inner momentum), each without forming :math:`G_i` where it is not
  formed;
- ``weighted(w)``: the re-weighted sum :math:`\sum_i w_i \nabla_\theta \ell_i` of each parameter.

Two ways to get a norm, chosen per layer by cost (Bu et al. 2022, "Scalable and efficient training of large
convolutional neural networks with differential privacy", mixed ghost clipping):

- **instantiate** the per-sample gradient (e.g. :math:`G_i = g_i^\top a_i`, :math:`p\times d` for a linear layer
  applied at :math:`T` positions; :math:`Tpd` multiply-adds and :math:`pd` numbers per example) and keep it for the
  weighted sum;
- the **ghost norm** (Goodfellow 2015; Li et al. 2021) without forming it:
  :math:`\|g_i^\top a_i\|_F^2 = \sum_{t,t'} \langle a_{it}, a_{it'}\rangle \langle g_{it}, g_{it'}\rangle`
  (:math:`T^2(d + p)` multiply-adds per example), then the weighted sum as one ordinary weight-gradient product with the
  output gradients scaled by :math:`w`: :math:`\sum_i w_i g_i^\top a_i = (w \odot g)^\top a` (Book-Keeping, Bu et al.
  2022, "Differentially private optimization on large model at small cost"): no second backward pass.

A rule is an object (:class:`Rule`), one per layer type, registered for the exact types it knows with
:func:`register` (as Opacus registers its grad samplers): it says which settings of the layer it computes exactly
(``supports``), whether it takes a layer called several times (``takes``: a linear or embedding layer's calls are one
call over a longer sequence, :class:`SequenceRule`), how it gathers the stored input and output gradient of the calls
(``gather``), how many positions a call has and which strategy it picks for them (``positions``, ``strategy``), and
the norms and sum themselves (calling it). A layer no rule knows, or a layer called more often than its rule takes,
gets :data:`GENERIC`: its per-sample gradients by :func:`generic`, ``torch.func`` (``vmap`` of a ``vjp`` of that
layer alone), exact for any layer that treats examples independently.

    >>> rule = rule_for(nn.Linear(4, 3))
    >>> type(rule).__name__, rule.takes(2), rule.strategy(nn.Linear(4, 3), 1, torch.device("cpu"))
    ('LinearRule', True, 'norm product')
    >>> rule_for(nn.Conv2d(1, 2, 3, padding="same")) is GENERIC  # string padding: no rule computes it
    True
"""

from __future__ import annotations

__all__ = [
    "Weighted", "PerSample", "Formed", "combination", "Recomputed", "Outer", "Rows", "LayerGrads", "instantiated",
    "formed",
    "NORM_PRODUCT", "GHOST", "FORMED", "GROUPED",
    "ghost_is_cheaper", "Rule", "SequenceRule", "GenericRule", "GENERIC", "RULES", "register", "rule_for",
    "LinearRule", "ConvRule", "GROUPED_WORK", "GROUPED_EXAMPLES", "GroupNormRule", "LayerNormRule", "EmbeddingRule",
    "generic"
]

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vjp, vmap

Weighted = Callable[[torch.Tensor], dict[str, torch.Tensor]]


class PerSample:
    r"""One trainable parameter's per-sample gradients :math:`G_i` over a micro-batch, formed or not: their squared
    norms ``sq_norms`` (shape ``(n,)``), their :meth:`inner` products with a fixed tensor, and
    (:meth:`combined_sq_norms`) the squared norms of a linear combination :math:`\sum_j c_jG_i^{(j)}` of the same
    parameter's per-sample gradients at several parameter values on the same examples (DIFF2's difference, DP-PSASC*'s
    inner momentum)."""

    sq_norms: torch.Tensor

    def inner(self, V: torch.Tensor) -> torch.Tensor:
        r""":math:`\langle G_i, V\rangle` for each example, ``V`` of the parameter's shape."""
        raise NotImplementedError

    @staticmethod
    def combined_sq_norms(terms: Sequence[tuple[float, "PerSample"]]) -> torch.Tensor:
        r""":math:`\lVert\sum_j c_jG_i^{(j)}\rVert^2` for each example, ``terms`` the pairs :math:`(c_j, G^{(j)})`, all
        of one class."""
        raise NotImplementedError


class Formed(PerSample):
    """Per-sample gradients ``G`` ``(n, *shape)``, formed."""

    def __init__(self, G: torch.Tensor):
        self.G = G
        self.sq_norms = G.flatten(1).square().sum(1)

    def inner(self, V):
        return self.G.flatten(1) @ V.flatten().to(self.G.dtype)

    @staticmethod
    def combined_sq_norms(terms):
        m = combination([t.G for _, t in terms], [c for c, _ in terms])
        return torch.linalg.vector_norm(m.flatten(1), dim=1).square()


def combination(tensors: Sequence[torch.Tensor], coefficients: Sequence[float]) -> torch.Tensor:
    r""":math:`\sum_j c_jT_j`, summed in order from :math:`c_0T_0`, each term added in one pass
    (``torch.add(..., alpha=c)``); one order for every engine, so that a combination formed by either is the same
    to the bit."""
    total = tensors[0] if coefficients[0] == 1 else coefficients[0] * tensors[0]
    for c, t in zip(coefficients[1:], tensors[1:]):
        total = torch.add(total, t, alpha=c)
    return total


class Recomputed(PerSample):
    """Per-sample gradients whose squared norms were formed and the gradients then dropped (they outweigh the
    layer's input and output gradient); ``chunk(s)`` forms them again for the examples of slice ``s``, a few at a
    time (:data:`GROUPED_EXAMPLES`), for an inner product or a combination."""

    def __init__(self, sq_norms: torch.Tensor, chunk: Callable[[slice], torch.Tensor]):
        self.sq_norms, self.chunk = sq_norms, chunk

    def _slices(self):
        return [slice(s, s + GROUPED_EXAMPLES) for s in range(0, len(self.sq_norms), GROUPED_EXAMPLES)]

    def inner(self, V):
        return torch.cat([Formed(self.chunk(s)).inner(V) for s in self._slices()])

    @staticmethod
    def combined_sq_norms(terms):
        return torch.cat([Formed.combined_sq_norms([(c, Formed(t.chunk(s))) for c, t in terms])
                          for s in terms[0][1]._slices()])


class Outer(PerSample):
    r""":math:`G_i = \sum_t g_{it}^\top a_{it}` (shape ``(p, d)``), never formed: ``a`` ``(n, T, d)`` and ``g``
    ``(n, T, p)`` (views allowed), a linear map at :math:`T` positions or a convolution's unfolded patches.

    - the squared norm: :math:`\lVert g_i\rVert\lVert a_i\rVert` at :math:`T = 1` (the norm product), else the ghost
      norm :math:`\sum_{t,t'}\langle a_{it}, a_{it'}\rangle\langle g_{it}, g_{it'}\rangle`;
    - :math:`\langle G_i, V\rangle = \sum_t g_{it}^\top V a_{it}`: the layer's own map with weight :math:`V`, read
      against its output gradient (:math:`Tdp` multiply-adds, as its forward);
    - :math:`\lVert\sum_jc_jG_i^{(j)}\rVert^2`: the ghost norm of all the terms' positions, inputs
      :math:`a_i^{(j)}` with output gradients :math:`c_jg_i^{(j)}`, summed in float64 (for a difference its terms
      cancel as :math:`G^{(2)} \to G^{(1)}`, and float64 keeps their rounding, about :math:`10^{-16}` of the terms,
      below the float32 rounding of a formed difference); or, where forming the :math:`J` terms' :math:`G_i`
      (:math:`JTdp` multiply-adds) costs less than that float64 ghost norm (:math:`(JT)^2(d + p)`, counted twice),
      the combination formed, as the ``vmap`` path forms it.
    """

    def __init__(self, a: torch.Tensor, g: torch.Tensor):
        self.a, self.g = a, g
        if a.shape[1] == 1:
            self.sq_norms = a.square().sum((1, 2)) * g.square().sum((1, 2))
        else:
            self.sq_norms = _gram_sq_norms(a, g)

    def inner(self, V):
        return ((self.a @ V.reshape(self.g.shape[-1], -1).to(self.a.dtype).mT) * self.g).sum((1, 2))

    @staticmethod
    def combined_sq_norms(terms):
        first = terms[0][1]
        (T, d), p, J = first.a.shape[1:], first.g.shape[-1], len(terms)
        if T > 1 and J * T * d * p <= 2 * (J * T) ** 2 * (d + p):  # forming each G_i is cheaper than a float64 ghost
            return Formed.combined_sq_norms([(c, Formed(t.g.mT @ t.a)) for c, t in terms])
        a = torch.cat([t.a.double() for _, t in terms], dim=1)
        g = torch.cat([c * t.g.double() for c, t in terms], dim=1)
        return _gram_sq_norms(a, g).to(first.a.dtype)


class Rows(PerSample):
    r"""An embedding's per-sample gradient, never formed: ids ``(n, T)`` and output gradients ``g`` ``(n, T, p)``;
    row :math:`\mathrm{id}_{it}` of :math:`G_i` gets :math:`g_{it}`. Norms and combinations by the ghost norm with
    :math:`\langle e_{\mathrm{id}_t}, e_{\mathrm{id}_{t'}}\rangle = [\mathrm{id}_t = \mathrm{id}_{t'}]` (combinations
    in float64, as :class:`Outer`'s); :math:`\langle G_i, V\rangle = \sum_t \langle V_{\mathrm{id}_{it}},
    g_{it}\rangle`."""

    def __init__(self, ids: torch.Tensor, g: torch.Tensor):
        self.ids, self.g = ids, g
        self.sq_norms = _same_id_sq_norms(ids, g)

    def inner(self, V):
        return (V.to(self.g.dtype)[self.ids] * self.g).sum((1, 2))

    @staticmethod
    def combined_sq_norms(terms):
        ids = torch.cat([t.ids for _, t in terms], dim=1)
        g = torch.cat([c * t.g.double() for c, t in terms], dim=1)
        return _same_id_sq_norms(ids, g).to(terms[0][1].g.dtype)


def _same_id_sq_norms(ids: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    same = (ids.unsqueeze(2) == ids.unsqueeze(1)).to(g.dtype)
    return (same * (g @ g.mT)).sum((1, 2)).clamp(min=0)


@dataclass
class LayerGrads:
    """One layer's per-sample gradients (each trainable parameter's, formed or not), and its re-weighted sum as a
    function of the weights."""

    gradients: dict[str, PerSample]  # parameter's local name -> its per-sample gradients
    weighted: Weighted  # w (n,) -> {parameter's local name: sum_i w_i grad_i}

    @property
    def sq_norms(self) -> torch.Tensor:
        """The layer's per-sample squared gradient norms, shape (n,)."""
        return sum(p.sq_norms for p in self.gradients.values())


def instantiated(grads: dict[str, torch.Tensor]) -> LayerGrads:
    """A layer whose per-sample gradients ``{name: (n, *shape)}`` are formed: norms and sums read them."""
    return LayerGrads({k: Formed(g) for k, g in grads.items()},
                      lambda w: {k: torch.einsum("n,n...->...", w, g) for k, g in grads.items()})


def formed(name: str, G: torch.Tensor, a: torch.Tensor, g: torch.Tensor, product: Weighted,
           chunk: Callable[[slice], torch.Tensor]) -> LayerGrads:
    """A weight whose per-sample gradients ``G`` ``(n, *shape)`` were formed for its norms. Its sum reads ``G``
    when ``G`` is no larger than the layer's input and output gradient; else ``G`` is dropped, the sum is the
    weight-gradient ``product`` of (a, g), and ``chunk(s)`` forms the gradients of examples ``s`` again where an
    inner product or a combination needs them (the memory of a step stays that of the activations, e.g. ResNet's
    wide small-map convs)."""
    if G[0].numel() <= a[0].numel() + g[0].numel():
        return LayerGrads({name: Formed(G)}, lambda w: {name: torch.einsum("n,n...->...", w, G)})
    return LayerGrads({name: Recomputed(G.flatten(1).square().sum(1), chunk)}, product)


def _combine(parts: Sequence[LayerGrads]) -> LayerGrads:
    """Parameters of one layer handled by separate rules (e.g. a ghost weight and an instantiated bias)."""
    return LayerGrads({k: v for p in parts for k, v in p.gradients.items()},
                      lambda w: {k: v for p in parts for k, v in p.weighted(w).items()})


NORM_PRODUCT = "norm product"  # T = 1: ||g a^T|| = ||g|| ||a||
GHOST = "ghost norm"
FORMED = "per-sample gradient"
GROUPED = "per-sample gradient, grouped calls"
"""How a rule gets a weight's per-sample norms (:meth:`Rule.strategy`)."""


def ghost_is_cheaper(T: int, d: int, p: int) -> bool:
    """Bu et al.'s per-layer choice: the ghost norm costs :math:`T^2(d + p)`, instantiating costs :math:`Tdp`, per
    example."""
    return T * (d + p) < d * p


def _gram_sq_norms(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    r"""Ghost norm :math:`\sum_{t,t'} \langle a_t, a_{t'}\rangle\langle g_t, g_{t'}\rangle` per example, a (n,T,d),
    g (n,T,p); clamped at 0 against rounding."""
    return (a @ a.mT).mul_(g @ g.mT).sum((1, 2)).clamp_(min=0)


# --- what a rule is, and which rule a layer gets ----------------------------------------------------------------


class Rule:
    """One layer type's per-sample norms and re-weighted sum from the stored input ``a`` and output gradient ``g``
    of its call. This base takes a layer called once, with positions along the dimensions after the channels
    ``(n, C, *positions)``; a rule of its own overrides what differs, and ``__call__``."""

    def supports(self, module: nn.Module) -> bool:
        """Does the rule compute this layer's settings exactly? Else the layer gets :data:`GENERIC`."""
        return True

    def takes(self, calls: int) -> bool:
        """Does the rule compute a layer called ``calls`` times in one forward? Else :data:`GENERIC` does."""
        return calls == 1

    def positions(self, output_shape: torch.Size) -> int:
        """The positions (T or L) of one call, from its output's shape."""
        return math.prod(output_shape[2:])

    def gather(self, module: nn.Module, calls: list[tuple[torch.Tensor, torch.Tensor]],
               n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, g)`` of the ``calls``, each its stored ``(input, output gradient)``, over ``n`` examples."""
        return calls[0]

    def strategy(self, module: nn.Module, positions: int, device: torch.device) -> str:
        """How the rule gets the layer's per-sample norms at this many positions, on this device."""
        return FORMED

    def __call__(self, module: nn.Module, a: torch.Tensor, g: torch.Tensor, names: set[str]) -> LayerGrads:
        """The layer's :class:`LayerGrads` for its trainable parameters ``names`` (local names)."""
        raise NotImplementedError(f"{type(self).__name__} computes no norms from (a, g): see generic()")


class SequenceRule(Rule):
    """A layer applied position by position, ``(n, *positions, features)``: its calls in one forward are one call
    over a longer sequence (an LSTM's linear maps at every time step), whatever their number."""

    def takes(self, calls: int) -> bool:
        return True

    def positions(self, output_shape: torch.Size) -> int:
        return math.prod(output_shape[1:-1])

    def tail(self, module: nn.Module) -> tuple[int, ...]:
        """The shape of one position of the stored input (the features a linear layer reads, none for ids)."""
        return ()

    def gather(self, module: nn.Module, calls: list[tuple[torch.Tensor, torch.Tensor]],
               n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The calls' inputs ``(n, T, *tail)`` and output gradients ``(n, T, p)`` concatenated along positions."""
        a = _cat([x.reshape(n, -1, *self.tail(module)) for x, _ in calls])
        g = _cat([g.reshape(n, -1, g.shape[-1]) for _, g in calls])
        return a, g


def _cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


RULES: dict[type[nn.Module], Rule] = {}
"""The layers a rule knows, by exact type: a subclass may compute something else in its own ``forward``."""


def register(*types: type[nn.Module]) -> Callable[[type[Rule]], type[Rule]]:
    """Class decorator: one instance of the rule, in :data:`RULES` for each of ``types``."""
    def decorate(cls: type[Rule]) -> type[Rule]:
        rule = cls()
        for t in types:
            RULES[t] = rule
        return cls
    return decorate


def rule_for(module: nn.Module) -> Rule:
    """The rule of a layer that takes one tensor, or :data:`GENERIC`: a known type whose trainable parameters are
    its ``weight`` and ``bias`` (not, e.g., pruning's ``weight_orig``), in a setting its rule supports."""
    rule = RULES.get(type(module), GENERIC)
    names = {k for k, p in module.named_parameters(recurse=False) if p.requires_grad}
    if names <= {"weight", "bias"} and rule.supports(module):
        return rule
    return GENERIC


# --- nn.Linear ------------------------------------------------------------------------------------------------


@register(nn.Linear)
class LinearRule(SequenceRule):
    """``y = a W^T + b`` at T positions: a (n, T, d), g (n, T, p) (a sequence, or the calls of a reused layer)."""

    def tail(self, module: nn.Linear) -> tuple[int, ...]:
        return (module.in_features,)

    def strategy(self, module: nn.Linear, positions: int, device: torch.device) -> str:
        """The norm product at T = 1, else the cheaper of ghost and formed."""
        T, d, p = positions, module.in_features, module.out_features
        return NORM_PRODUCT if T == 1 else GHOST if ghost_is_cheaper(T, d, p) else FORMED

    def __call__(self, module: nn.Linear, a: torch.Tensor, g: torch.Tensor, names: set[str]) -> LayerGrads:
        parts = []
        if "weight" in names:
            if self.strategy(module, a.shape[1], a.device) in (NORM_PRODUCT, GHOST):
                parts.append(LayerGrads({"weight": Outer(a, g)}, lambda w: {"weight": _linear_sum(a, g, w)}))
            else:  # formed only when T (d + p) >= d p: never larger than (a, g), so kept for the sum
                parts.append(instantiated({"weight": g.mT @ a}))
        if "bias" in names:
            parts.append(instantiated({"bias": g.sum(1)}))
        return _combine(parts)


def _linear_sum(a: torch.Tensor, g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(w * g)^T a over every example and position: one weight-gradient product (Book-Keeping)."""
    return (g * w[:, None, None]).flatten(0, 1).mT @ a.flatten(0, 1)


# --- nn.Conv1d / nn.Conv2d ------------------------------------------------------------------------------------


@register(nn.Conv1d, nn.Conv2d)
class ConvRule(Rule):
    r"""A convolution with zero padding: a ``(n, C_in, *spatial)``, g ``(n, C_out, *spatial_out)``.

    Its weight gradient is a linear layer's at the :math:`L` output positions, on the unfolded input patches of
    dimension :math:`d = C_{\mathrm{in}}k/\mathrm{groups}`: the ghost norm costs :math:`L^2(d + C_{\mathrm{out}})` per
    example, forming the gradient :math:`LdC_{\mathrm{out}}`.
    """

    def supports(self, module: nn.Conv1d | nn.Conv2d) -> bool:
        """Numeric zero padding (string padding and other padding modes go to :data:`GENERIC`)."""
        return module.padding_mode == "zeros" and not isinstance(module.padding, str)

    def strategy(self, module: nn.Conv1d | nn.Conv2d, positions: int, device: torch.device) -> str:
        """The ghost norm where cheaper (groups = 1), else the per-sample gradients, by grouped weight-gradient
        calls on a CPU for large layers (or any grouped convolution), else by the unfolded input times the output
        gradient (the way on a GPU)."""
        L, d, p = positions, module.weight[0].numel(), module.out_channels
        if module.groups == 1 and ghost_is_cheaper(L, d, p):
            return GHOST
        if module.groups != 1 or (device.type == "cpu" and L * d * p >= GROUPED_WORK):
            return GROUPED
        return FORMED

    def __call__(self, module: nn.Conv1d | nn.Conv2d, a: torch.Tensor, g: torch.Tensor,
                 names: set[str]) -> LayerGrads:
        parts = []
        if "weight" in names:
            parts.append(self._weight(module, a, g))
        if "bias" in names:
            parts.append(instantiated({"bias": g.flatten(2).sum(2)}))
        return _combine(parts)

    def _weight(self, module: nn.Conv1d | nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> LayerGrads:
        strategy = self.strategy(module, g[0, 0].numel(), a.device)

        def product(w):
            return {"weight": _conv_weight_grad(module, a, g * _bcast(w, g))}

        if strategy == GHOST:  # patches (n, L, d), g (n, L, C_out): transposed views, no copy
            return LayerGrads({"weight": Outer(_unfold(module, a).mT, g.flatten(2).mT)}, product)

        def chunk(s: slice) -> torch.Tensor:
            if strategy == GROUPED:
                return _grouped_weight_grads(module, a[s], g[s])
            return (g[s].flatten(2) @ _unfold(module, a[s]).mT).reshape(len(a[s]), *module.weight.shape)

        G = torch.cat([chunk(slice(s, s + GROUPED_EXAMPLES)) for s in range(0, len(a), GROUPED_EXAMPLES)]) \
            if strategy == GROUPED else chunk(slice(None))
        return formed("weight", G, a, g, product, chunk)


def _bcast(w: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return w.reshape(-1, *([1] * (like.dim() - 1)))


def _unfold(module: nn.Conv1d | nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
    """The input patches (n, C_in k, L) of a convolution with groups = 1, as ``F.unfold`` gives them, but read
    through a strided view of the padded input (one copy; ``F.unfold`` is up to 3x slower on a CPU)."""
    pad = [p for p in reversed(module.padding) for _ in (0, 1)]
    a = F.pad(a, pad)
    n, c = a.shape[:2]
    sizes, steps, windows = [], [], []
    for size, k, stride, dilation, step in zip(a.shape[2:], module.kernel_size, module.stride, module.dilation,
                                               a.stride()[2:]):
        sizes.append((size - dilation * (k - 1) - 1) // stride + 1)
        steps.append(step * stride)
        windows.append(step * dilation)
    view = a.as_strided((n, c, *module.kernel_size, *sizes), (*a.stride()[:2], *windows, *steps))
    return view.reshape(n, c * module.weight[0, 0].numel(), -1)


def _conv_weight_grad(module: nn.Conv1d | nn.Conv2d, a: torch.Tensor, g: torch.Tensor, *,
                      weight: torch.Tensor | None = None, groups: int | None = None) -> torch.Tensor:
    """The convolution's weight gradient for input a and output gradient g (summed over the examples of a). The
    weight gives only its shape: detached, so that the result carries no autograd graph (which would keep a and g
    alive in the parameter's ``.grad``)."""
    spatial = a.dim() - 2
    return torch.ops.aten.convolution_backward(
        g, a, (module.weight if weight is None else weight).detach(), None, list(module.stride), list(module.padding),
        list(module.dilation), False, [0] * spatial, module.groups if groups is None else groups,
        [False, True, False])[1]


def _grouped_weight_grads(module: nn.Conv1d | nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The m per-sample weight gradients of a ``(m, C_in, *)`` as one convolution over a ``(1, m C_in, *)`` with m
    times the groups: group j of the result is example j's gradient."""
    m = len(a)
    weight = module.weight.detach().repeat(m, *([1] * (module.weight.dim() - 1)))
    grads = _conv_weight_grad(module, a.reshape(1, -1, *a.shape[2:]), g.reshape(1, -1, *g.shape[2:]),
                              weight=weight, groups=m * module.groups)
    return grads.reshape(m, *module.weight.shape)


GROUPED_WORK = 1_000_000
r"""On a CPU, per-sample conv gradients of at least this many multiply-adds per example (:math:`LdC_{\mathrm{out}}`) are
formed by the convolution's own weight gradient, :data:`GROUPED_EXAMPLES` examples per call; smaller ones by unfolding
the input and one batched product, which wins when the per-call overhead dominates. Measured on the book's models
(2026-11-25, 2-core CPU); ``python -m dpbook.repro.bench`` times the whole step."""

GROUPED_EXAMPLES = 16
"""Examples per weight-gradient call: m examples side by side in the channels of one input, a convolution with
m times the groups, give the m per-sample gradients at once (m = 16 was the fastest of 1 to 32 on the CIFAR-10 CNN's
layers: 1.6x to 2x faster than one example per call)."""


# --- normalisation layers -------------------------------------------------------------------------------------


@register(nn.GroupNorm)
class GroupNormRule(Rule):
    """``y = x_hat * weight + bias`` per channel, x_hat normalised per example and group: a, g ``(n, C, *)``."""

    def __call__(self, module: nn.GroupNorm, a: torch.Tensor, g: torch.Tensor, names: set[str]) -> LayerGrads:
        grads = {}
        if "weight" in names:
            grads["weight"] = _sum_over(g * F.group_norm(a, module.num_groups, eps=module.eps), range(2, a.dim()))
        if "bias" in names:
            grads["bias"] = _sum_over(g, range(2, a.dim()))
        return instantiated(grads)


def _sum_over(t: torch.Tensor, dims) -> torch.Tensor:
    """``t`` summed over ``dims`` (none: ``t`` itself; ``Tensor.sum(())`` would sum over everything)."""
    dims = tuple(dims)
    return t.sum(dims) if dims else t


@register(nn.LayerNorm)
class LayerNormRule(Rule):
    """``y = x_hat * weight + bias`` over the last dims ``normalized_shape``: a, g ``(n, *, *normalized_shape)``."""

    def __call__(self, module: nn.LayerNorm, a: torch.Tensor, g: torch.Tensor, names: set[str]) -> LayerGrads:
        dims = range(1, a.dim() - len(module.normalized_shape))
        grads = {}
        if "weight" in names:
            grads["weight"] = _sum_over(g * F.layer_norm(a, module.normalized_shape, eps=module.eps), dims)
        if "bias" in names:
            grads["bias"] = _sum_over(g, dims)
        return instantiated(grads)


# --- nn.Embedding ---------------------------------------------------------------------------------------------


@register(nn.Embedding)
class EmbeddingRule(SequenceRule):
    r"""Row lookup: ids ``(n, T)``, g ``(n, T, p)``. Example :math:`i`'s gradient adds :math:`g_{it}` to row
    :math:`\mathrm{id}_{it}`, so its squared norm is
    :math:`\sum_{t,t'} [\mathrm{id}_t = \mathrm{id}_{t'}] \langle g_t, g_{t'}\rangle` (ghost; the :math:`V\times p`
    per-sample gradient is never formed). The padding row gets no gradient, as in ``nn.Embedding``."""

    def supports(self, module: nn.Embedding) -> bool:
        """Dense embeddings whose gradient does not depend on the batch (``scale_grad_by_freq`` counts batch-wide)."""
        return not module.scale_grad_by_freq and not module.sparse

    def strategy(self, module: nn.Embedding, positions: int, device: torch.device) -> str:
        return GHOST

    def __call__(self, module: nn.Embedding, ids: torch.Tensor, g: torch.Tensor, names: set[str]) -> LayerGrads:
        if module.padding_idx is not None:
            g = g * (ids != module.padding_idx).unsqueeze(-1)

        def weighted(w):
            rows = (g * w[:, None, None]).flatten(0, 1)
            return {"weight": torch.zeros_like(module.weight).index_add_(0, ids.flatten(), rows)}

        return LayerGrads({"weight": Rows(ids, g)}, weighted)


# --- any other layer ------------------------------------------------------------------------------------------


class GenericRule(Rule):
    """Any other layer, or a layer called more often than its rule takes: it takes no ``(a, g)``; the engine gets
    the layer's per-sample gradients by :func:`generic` (``vmap`` of the layer alone), call by call."""

    def takes(self, calls: int) -> bool:
        return False

    def strategy(self, module: nn.Module, positions: int, device: torch.device) -> str:
        return f"{FORMED}, vmap of the layer"


GENERIC = GenericRule()
"""The rule of a layer no rule knows."""


def generic(module: nn.Module, inputs: tuple[torch.Tensor, ...], g: torch.Tensor,
            names: set[str]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Per-sample gradients ``{name: (n, *shape)}`` of the layer's own trainable parameters by ``torch.func``, in a
    ``vmap`` over examples: the vector-Jacobian product of the layer alone at ``inputs[i]`` with cotangent ``g[i]``;
    and the layer's output so recomputed (its caller checks it against the recorded one).
    """
    params = {k: p.detach() for k, p in module.named_parameters(recurse=False) if k in names}

    def one(inputs_i, g_i):
        def layer(p):
            return functional_call(module, p, tuple(x.unsqueeze(0) for x in inputs_i))
        output, pullback = vjp(layer, params)
        return pullback(g_i.unsqueeze(0))[0], output.squeeze(0)

    return vmap(one, randomness="different")(inputs, g)
