r"""Per-sample gradient norms and re-weighted sums without per-sample gradients of the whole model (Book-Keeping).

A scaled-sum method (DP-SGD, DC-SGD, AdaClip, Auto-S, DP-PSAC, DP-PSASC) releases
:math:`\sum_i w(\|g_i\|)\, g_i + \mathcal N(0, \sigma^2 I)`: it needs each example's gradient *norm* and one
re-weighted *sum*, never the vectors themselves. :class:`BookKeeping` gets both from one forward and one backward
pass of the micro-batch (Bu et al. 2022, "Differentially private optimization on large model at small cost"):

1. forward, recording every layer's input ``a`` (layers with trainable parameters only);
2. backward of the summed per-example losses *to the layers' outputs only*: the gradients ``g`` of the outputs,
   and no parameter gradient at all;
3. per layer, from ``(a, g)``: the per-sample squared norms, by the ghost norm or by forming that layer's
   per-sample gradients, whichever is cheaper for its dimensions (:mod:`dpbook.per_sample.layers`);
4. :math:`\lVert g_i\rVert` over all layers; the method turns them into weights :math:`w_i`; the re-weighted sum is
   formed per layer from the same stored tensors.

The same stored tensors give what the vector methods need (:class:`Pass`): each parameter's per-sample squared
norms, its inner products :math:`\langle g_i^{(l)}, v^{(l)}\rangle` with a fixed vector (DPDR's coefficients
against the previous release, DIFF's residual), and the norms and sums of linear combinations of passes of the same
examples at several parameter values (:class:`Combination`: DIFF2's difference :math:`g_i(w_t) - g_i(w_{t-1})`,
DP-PSASC*'s inner momentum), each without forming :math:`g_i` where the norm does not.

Exactness is the contract: a structure Book-Keeping cannot handle exactly (a layer fed keyword arguments, an
output modified in place, a parameter used outside its own module) raises :class:`Unsupported`, and the engine
then uses the ``vmap`` per-sample gradients of :mod:`dpbook.per_sample.vmap` for the run. On its first call,
:class:`BookKeeping` also checks its norms and sum against ``vmap`` on a few examples of the micro-batch.

    >>> import torch
    >>> from torch import nn
    >>> from dpbook.per_sample import PerSampleGradients, flat_norms, weighted_sum
    >>> torch.manual_seed(0) and None
    >>> model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Tanh(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    >>> x, y = torch.randn(5, 1, 8, 8), torch.tensor([0, 1, 2, 1, 0])
    >>> out = BookKeeping(model, nn.functional.cross_entropy)(x, y)
    >>> grads = PerSampleGradients(model, nn.functional.cross_entropy)(x, y)
    >>> w = torch.rand(5)
    >>> torch.allclose(out.norms, flat_norms(grads), rtol=1e-5)
    True
    >>> all(torch.allclose(a, b, atol=1e-6) for a, b in zip(out.summed(w), weighted_sum(grads, w)))
    True
    >>> v = [torch.randn_like(p) for p in model.parameters()]          # <g_i, v> per parameter, never forming g_i
    >>> torch.allclose(out.inner(v), torch.stack([g.flatten(1) @ u.flatten() for g, u in zip(grads, v)], 1),
    ...                atol=1e-5)
    True
"""

from __future__ import annotations

__all__ = ["SELF_CHECK_EXAMPLES", "Unsupported", "BookKeeping", "Pass", "Combination"]

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch
from torch import nn
from torch.func import vmap
from torch.overrides import TorchFunctionMode

from dpbook.per_sample import layers
from dpbook.per_sample.vmap import PerSampleGradients, flat_norms, weighted_sum

SELF_CHECK_EXAMPLES = 4
"""How many examples of the first micro-batch the first call checks against ``vmap`` per-sample gradients."""


class Unsupported(Exception):
    """The model's structure is outside what Book-Keeping computes exactly; use the ``vmap`` per-sample gradients."""


class _ParameterUse(TorchFunctionMode):
    """Watches which module runs whenever a trainable parameter enters a torch function: the layer hooks see a
    parameter only inside its own module's forward, so a use anywhere else (a parent's ``forward`` reading a child's
    weight, the loss) would escape them."""

    def __init__(self, owners: dict[int, tuple[str, nn.Module]]):
        super().__init__()
        self.owners, self.running, self.stray = owners, [], None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.stray is None:
            for t in _leaves((args, kwargs)):
                name, owner = self.owners.get(id(t), (None, None))
                if owner is not None and (not self.running or self.running[-1] is not owner):
                    where = f"inside {type(self.running[-1]).__name__}.forward" if self.running else "outside the model"
                    self.stray = f"parameter {name!r} is used {where}, not by its own layer"
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def watching(self, model: nn.Module):
        """This mode on, and the stack of running modules kept by hooks on every module."""
        def enter(module, args) -> None:
            self.running.append(module)

        def leave(module, args, output) -> None:  # returns None: the output stays the layer's
            self.running.pop()

        handles = []
        for module in model.modules():
            handles.append(module.register_forward_pre_hook(enter, prepend=True))
            handles.append(module.register_forward_hook(leave, always_call=True))
        try:
            with self:
                yield self
        finally:
            for handle in handles:
                handle.remove()


def _leaves(tree):
    if isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _leaves(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _leaves(item)
    else:
        yield tree


@dataclass
class _Call:
    """One call of a layer in the forward pass: its inputs and output, then the output's gradient."""

    inputs: tuple[torch.Tensor, ...]
    output: torch.Tensor
    versions: list[int]  # of inputs and output when recorded: an in-place change afterwards is refused
    g: torch.Tensor | None = None


@dataclass
class _Layer:
    """A module with trainable parameters of its own, and what one forward pass recorded of it."""

    prefix: str
    module: nn.Module
    names: set[str]  # its own trainable parameters' local names
    rule: layers.Rule  # layers.rule_for(module), looked up once
    calls: list[_Call] = field(default_factory=list)

    def generic(self, calls: int) -> bool:
        """Does the generic (vmap) rule give this layer's per-sample gradients, for this number of calls?"""
        return not self.rule.takes(calls)


class BookKeeping:
    """Per-sample gradient norms and re-weighted sums of ``model`` from stored activations and output gradients.

    ``BookKeeping(model, loss_fn)(x, y)`` returns a :class:`Pass`: the L2 norm of each example's gradient over all
    trainable parameters, shape (n,), ``summed(w)``, which yields ``sum_i w_i g_i`` for each trainable parameter in
    order (as :class:`~dpbook.per_sample.vmap.PerSampleGradients` lists them), one layer at a time, and each
    parameter's per-sample squared norms, inner products with fixed tensors and combinations with other passes.
    Frozen parameters (``requires_grad=False``) are left out, and no gradient flows into layers that only frozen
    ones follow.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
        self.model, self.loss_fn = model, loss_fn
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.layers, owner, self.unsupported = [], {}, None
        for prefix, module in model.named_modules(remove_duplicate=False):
            own = {k for k, p in module.named_parameters(recurse=False) if p.requires_grad}
            for k in own:  # a tied parameter: its per-sample gradient sums two layers' (cross terms in the norm)
                name = _qualified(prefix, k)
                other = owner.setdefault(id(getattr(module, k)), name)
                if other != name:
                    self.unsupported = f"parameter {other!r} is also {name!r} (tied weights)"
            if own:
                self.layers.append(_Layer(prefix, module, own, layers.rule_for(module)))
        where = {_qualified(layer.prefix, k): (layer.prefix, k) for layer in self.layers for k in layer.names}
        self._owners = [where.get(name, (None, None)) for name in self.names]  # (layer prefix, local name)
        dtypes = {p.dtype for p in self.params}
        if not dtypes <= {torch.float32, torch.float64} or len(dtypes) > 1:  # half squares overflow past 256
            self.unsupported = f"parameters of dtype(s) {sorted(map(str, dtypes))}: it needs one of float32, float64"
        self.checked = False  # the first call checks itself (SELF_CHECK_EXAMPLES examples): see _self_check

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> "Pass":
        if self.unsupported:
            raise Unsupported(self.unsupported)
        if not len(x):
            return Pass({}, self._owners, self.params, 0)
        with self.recorded(x, y) as rules:
            return self._gathered(rules, len(x))

    @contextlib.contextmanager
    def recorded(self, x: torch.Tensor, y: torch.Tensor) -> Iterator[dict[str, Callable[[], layers.LayerGrads]]]:
        """A pass in its two stages, for a profile of where its time goes (``python -m dpbook.repro.bench``):
        entering runs the forward and the backward to the layers' outputs (the stage a non-private step shares);
        the block gets, for each layer called, its rule as a call that forms the layer's per-sample norms from the
        stored tensors (a :class:`~dpbook.per_sample.layers.LayerGrads`, whose ``weighted`` is the layer's sum),
        as often as it is called; leaving drops the stored tensors. Calling the engine does both at once.

            >>> from dpbook.models import mnist_cnn
            >>> engine = BookKeeping(mnist_cnn(), nn.functional.cross_entropy)
            >>> with engine.recorded(torch.randn(3, 1, 28, 28), torch.tensor([0, 1, 2])) as rules:
            ...     {layer: tuple(rule().sq_norms.shape) for layer, rule in rules.items()}
            {'conv1': (3,), 'conv2': (3,), 'fc1': (3,), 'fc2': (3,)}
        """
        if self.unsupported:
            raise Unsupported(self.unsupported)
        if not self.checked:
            self.checked = self._self_check(x[:SELF_CHECK_EXAMPLES], y[:SELF_CHECK_EXAMPLES])
        with self._recorded(x, y) as rules:
            yield rules

    def plan(self, x: torch.Tensor) -> list[dict]:
        """How each layer with trainable parameters gets its per-sample norms on inputs like ``x`` (one forward
        without gradients): its name, type, trainable parameters, positions (T or L) and strategy.

            >>> from dpbook.models import mnist_cnn
            >>> [(r["layer"], r["strategy"]) for r in BookKeeping(mnist_cnn(), None).plan(torch.zeros(2, 1, 28, 28))]
            ... # doctest: +NORMALIZE_WHITESPACE
            [('conv1', 'per-sample gradient'), ('conv2', 'ghost norm'),
             ('fc1', 'norm product'), ('fc2', 'norm product')]
        """
        calls: dict[str, list] = {layer.prefix: [] for layer in self.layers}
        handles = [layer.module.register_forward_hook(
            lambda module, args, out, prefix=layer.prefix: calls[prefix].append((args[0].shape, out.shape)))
            for layer in self.layers]
        try:
            with torch.no_grad():
                self.model(x)
        finally:
            for handle in handles:
                handle.remove()
        return [self._plan_row(layer, calls[layer.prefix], x.device) for layer in self.layers]

    @staticmethod
    def _plan_row(layer: _Layer, calls: list, device) -> dict:
        module = layer.module
        positions = sum(layer.rule.positions(out) for _, out in calls)
        rule = layers.GENERIC if layer.generic(len(calls)) else layer.rule
        strategy = rule.strategy(module, positions, device) if calls else "not called"
        trainable = sum(p.numel() for k, p in module.named_parameters(recurse=False) if k in layer.names)
        return {"layer": layer.prefix, "type": type(module).__name__, "trainable": trainable,
                "positions": positions, "strategy": strategy}

    # --- the two stages of a pass -------------------------------------------------------------------------
    @contextlib.contextmanager
    def _recorded(self, x, y, watch: _ParameterUse | None = None):
        try:
            self._forward_backward(x, y, watch)
            yield {layer.prefix: functools.partial(self._layer_grads, layer, len(x))
                   for layer in self.layers if layer.calls}
        finally:
            for layer in self.layers:
                layer.calls = []

    def _gathered(self, rules: dict[str, Callable[[], layers.LayerGrads]], n: int) -> "Pass":
        return Pass({prefix: rule() for prefix, rule in rules.items()}, self._owners, self.params, n)

    def _forward_backward(self, x, y, watch: _ParameterUse | None = None) -> None:
        """Forward with every layer's inputs and output recorded, then the output gradients of the summed
        per-example losses, stored with each call as ``(inputs, g)``. ``watch``: where each parameter is used."""
        handles = [layer.module.register_forward_hook(self._recorder(layer), with_kwargs=True)
                   for layer in self.layers]
        try:
            with watch.watching(self.model) if watch else contextlib.nullcontext():
                out = self.model(x)
                total = _summed_loss(self.loss_fn, out, y)
        finally:
            for handle in handles:
                handle.remove()
        calls = [(layer, call) for layer in self.layers for call in layer.calls]
        for layer, call in calls:
            if [t._version for t in (*call.inputs, call.output)] != call.versions:
                raise Unsupported(f"layer {layer.prefix!r}: its input or output is modified in place after the "
                                  "call (e.g. ReLU(inplace=True), or by the loss); write it out of place")
            if call.output.shape[:1] != (len(x),) or not call.output.requires_grad:
                raise Unsupported(f"layer {layer.prefix!r}: its output {tuple(call.output.shape)} does not hold "
                                  f"the {len(x)} examples along dimension 0, or does not depend on its parameters")
        outputs = [call.output for _, call in calls]  # an output the loss does not use gets a zero gradient
        grads = torch.autograd.grad(total, outputs, allow_unused=True, materialize_grads=True) if calls else []
        for (layer, call), g in zip(calls, grads):  # the generic rule compares its re-run with the output
            call.g = g
            call.output = call.output.detach() if layer.generic(len(layer.calls)) else None

    @staticmethod
    def _recorder(layer: _Layer):
        def hook(module, args, kwargs, output):
            if kwargs or not args or not all(isinstance(a, torch.Tensor) for a in args) \
                    or not isinstance(output, torch.Tensor):
                raise Unsupported(f"layer {layer.prefix!r} ({type(module).__name__}) takes keyword or non-tensor "
                                  "arguments or returns several tensors")
            if any(a.shape[:1] != output.shape[:1] for a in args):
                raise Unsupported(f"layer {layer.prefix!r}: its inputs and output differ in dimension 0")
            layer.calls.append(_Call(args, output, [t._version for t in (*args, output)]))
        return hook

    # --- one layer ----------------------------------------------------------------------------------------
    def _layer_grads(self, layer: _Layer, n: int) -> layers.LayerGrads:
        if layer.generic(len(layer.calls)):
            return layers.instantiated(self._generic(layer))
        a, g = layer.rule.gather(layer.module, [(call.inputs[0].detach(), call.g) for call in layer.calls], n)
        return layer.rule(layer.module, a, g, layer.names)

    def _generic(self, layer: _Layer) -> dict[str, torch.Tensor]:
        """Any other layer, or a layer called several times: its per-sample gradients, summed over the calls."""
        total: dict[str, torch.Tensor] = {}
        for call in layer.calls:
            inputs = tuple(t.detach() for t in call.inputs)
            grads, output = layers.generic(layer.module, inputs, call.g, layer.names)
            scale = 1 + float(output.abs().max())  # loose enough for a GPU's TF32, tight for dropout's zeros
            if output.shape != call.output.shape or not torch.allclose(output, call.output, rtol=1e-2,
                                                                       atol=1e-4 * scale):
                raise Unsupported(f"layer {layer.prefix!r} ({type(layer.module).__name__}) gives another output "
                                  "when run again one example at a time (randomness inside it, e.g. dropout, or "
                                  "it mixes the examples)")
            for k, v in grads.items():
                total[k] = total[k] + v if k in total else v
        return total

    # --- the first call's check ---------------------------------------------------------------------------
    def _self_check(self, x, y) -> bool:
        """Two checks on a few examples, in eval mode (dropout off), before the first step:

        - *structure*: every trainable parameter enters torch functions only while its own layer runs (a weight
          read by a parent's ``forward`` or by the loss would escape the layer hooks, whatever its gradient);
        - *numbers*: the norms and a re-weighted sum equal ``vmap``'s, at float64-grade tolerance scaled to the
          dtype (a layer mixing the examples shows up here).

        False (not checked yet) when a gradient is not finite: that is the caller's error to report."""
        owners = {id(p): (name, module) for layer in self.layers for name, p, module in
                  ((_qualified(layer.prefix, k), getattr(layer.module, k), layer.module) for k in layer.names)}
        watch = _ParameterUse(owners)
        training = {module: module.training for module in self.model.modules()}
        self.model.eval()
        try:
            with _exact_matmuls():
                with self._recorded(x, y, watch) as rules:
                    got = self._gathered(rules, len(x))
                reference = PerSampleGradients(self.model, self.loss_fn)(x, y)
        finally:
            for module, mode in training.items():
                module.training = mode
        if watch.stray:
            raise Unsupported(watch.stray)
        ref_norms = flat_norms(reference)
        if not bool(torch.isfinite(ref_norms).all()):
            return False
        w = 1.0 / ref_norms.clamp(min=1e-12)
        tol = 1e4 * torch.finfo(ref_norms.dtype).eps  # 1.2e-3 in float32, 2.2e-12 in float64
        bad = [name for name, a, b in zip(self.names, got.summed(w), weighted_sum(reference, w))
               if not torch.allclose(a, b, rtol=tol, atol=tol * (1 + float(b.abs().max())))]
        if bad or not torch.allclose(got.norms, ref_norms, rtol=tol, atol=tol * float(ref_norms.max())):
            raise Unsupported("its per-sample norms or sums disagree with vmap's on the first micro-batch"
                              + (f" (parameters {bad[:5]})" if bad else "")
                              + ": a layer mixes the examples, or treats another dimension as the batch")
        return True


class Pass:
    """What one Book-Keeping forward and backward of a micro-batch gives: every trainable parameter's per-sample
    gradients, formed or not (:class:`~dpbook.per_sample.layers.PerSample`), and each layer's re-weighted sum. A
    parameter the loss does not reach has zero gradients. Per-parameter results are ``(n, m)`` tensors, ``m`` the
    number of trainable parameter tensors, in their order."""

    def __init__(self, per_layer: dict[str, layers.LayerGrads], owners: list[tuple[str, str]],
                 params: list[torch.Tensor], n: int):
        self.layers, self.owners, self.params, self.n = per_layer, owners, params, n
        self.gradients = [per_layer[o].gradients.get(k) if o in per_layer else None for o, k in owners]
        dtype, device = params[0].dtype, params[0].device
        self.norms = sum((r.sq_norms for r in per_layer.values()), torch.zeros(n, dtype=dtype, device=device)).sqrt()

    def _stack(self, each: Callable[[int, layers.PerSample], torch.Tensor]) -> torch.Tensor:
        zeros = self.norms.new_zeros(self.n)
        return torch.stack([zeros if g is None else each(i, g) for i, g in enumerate(self.gradients)], 1)

    def layer_sq_norms(self) -> torch.Tensor:
        r""":math:`\lVert g_i^{(l)}\rVert^2`, shape ``(n, m)``."""
        return self._stack(lambda i, g: g.sq_norms)

    def inner(self, vectors: Sequence[torch.Tensor]) -> torch.Tensor:
        r""":math:`\langle g_i^{(l)}, v^{(l)}\rangle` for one tensor ``vectors[l]`` per parameter, shape ``(n, m)``."""
        return self._stack(lambda i, g: g.inner(vectors[i]))

    @staticmethod
    def combined(terms: Sequence[tuple[float, "Pass"]]) -> "Combination":
        r""":math:`\sum_j c_jg_i^{(j)}` of passes of the same examples at several parameter values, ``terms`` the
        pairs :math:`(c_j, \text{pass}_j)`, summed only as far as its norms and sums need."""
        return Combination(terms)

    def summed(self, w: torch.Tensor) -> Iterator[torch.Tensor]:
        """``sum_i w_i g_i`` parameter by parameter, in order, one layer at a time: the caller adds each into its
        accumulator before the next layer's is formed (peak memory of one layer's sum, not the model's)."""
        w = w.to(self.params[0].dtype)
        prefix, current = None, {}
        for (owner, local), p in zip(self.owners, self.params):  # a layer's parameters are adjacent
            if owner != prefix:
                prefix = owner
                current = self.layers[owner].weighted(w) if owner in self.layers else {}
            yield current.pop(local) if local in current else torch.zeros_like(p)


class Combination:
    r""":math:`m_i = \sum_jc_jg_i^{(j)}` over passes of the same examples at several parameter values (DIFF2's
    difference :math:`g_i(w_t) - g_i(w_{t-1})`, DP-PSASC*'s inner momentum :math:`\sum_l\gamma_0^{k-l}g_i(w_l)`):
    its per-sample norms, per parameter from the passes' stored tensors
    (:meth:`~dpbook.per_sample.layers.PerSample.combined_sq_norms`), and
    :math:`\sum_iw_im_i = \sum_jc_j\sum_iw_ig_i^{(j)}` from the passes' re-weighted sums. A parameter a pass does
    not reach has a zero gradient in it."""

    def __init__(self, terms: Sequence[tuple[float, Pass]]):
        self.terms = list(terms)
        first = self.terms[0][1]
        zeros = first.norms.new_zeros(first.n)
        columns = []
        for i in range(len(first.params)):
            present = [(c, p.gradients[i]) for c, p in self.terms if p.gradients[i] is not None]
            columns.append(type(present[0][1]).combined_sq_norms(present) if present else zeros)
        self.sq = torch.stack(columns, 1)
        self.norms = self.sq.sum(1).sqrt()

    def layer_sq_norms(self) -> torch.Tensor:
        r""":math:`\lVert m_i^{(l)}\rVert^2`, shape ``(n, m)``."""
        return self.sq

    def inner(self, vectors: Sequence[torch.Tensor]) -> torch.Tensor:
        r""":math:`\langle m_i^{(l)}, v^{(l)}\rangle = \sum_jc_j\langle g_i^{(j,l)}, v^{(l)}\rangle`, shape
        ``(n, m)``."""
        return sum(c * p.inner(vectors) for c, p in self.terms)

    def summed(self, w: torch.Tensor) -> Iterator[torch.Tensor]:
        r""":math:`\sum_iw_im_i` parameter by parameter, in order."""
        coefficients = [c for c, _ in self.terms]
        for parts in zip(*(p.summed(w) for _, p in self.terms)):
            yield layers.combination(parts, coefficients)


@contextlib.contextmanager
def _exact_matmuls():
    """TF32 off (GPUs) while Book-Keeping and vmap are compared: its 10-bit mantissa would fail the comparison."""
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def _summed_loss(loss_fn: Callable, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The sum of the examples' own losses, each ``loss_fn`` of one example: by ``vmap`` for any loss; for
    ``nn.functional.cross_entropy`` itself (whose mean over one example is its loss), by its ``reduction="sum"``,
    the same number without ``vmap``'s per-call cost (a fifth of a small model's step)."""
    if loss_fn is nn.functional.cross_entropy:
        return nn.functional.cross_entropy(out, y, reduction="sum")
    return vmap(lambda o, t: loss_fn(o.unsqueeze(0), t.unsqueeze(0)))(out, y).sum()


def _qualified(prefix: str, local: str) -> str:
    return f"{prefix}.{local}" if prefix else local
