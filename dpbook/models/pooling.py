r"""Max pooling, bit for bit :class:`torch.nn.MaxPool2d`, with a faster forward on a CPU.

PyTorch's CPU kernel for max pooling is slow on the usual (N, C, H, W) layout and fast on channels-last. Measured on
the development machine (one core, torch 2.14, 2026-11-27), the MNIST CNN's first pooling (16 x 14 x 14, window 2,
stride 1, B = 256) took 12.5 ms forward, and 3.0 ms as done here, copies included; ``python -m dpbook.repro.bench``
times whole steps. Both layouts pick the same element of each window (the first maximum in row-major order, a NaN
wherever there is one), so the forward here pools a channels-last copy and returns the values and indices in the
usual layout.

The backward is the usual layout's own kernel, with those indices: a gradient shared by overlapping windows
(stride 1) is summed in the same order as :class:`torch.nn.MaxPool2d`'s, so training gives the same numbers, bit for
bit. (Left channels-last, the backward sums in another order, and results move beyond float rounding.)

>>> import torch
>>> x = torch.randn(4, 16, 14, 14, requires_grad=True)
>>> fast, usual = MaxPool2d(2, stride=1), torch.nn.MaxPool2d(2, stride=1)
>>> torch.equal(fast(x), usual(x))
True
>>> g = torch.randn(4, 16, 13, 13)
>>> torch.equal(torch.autograd.grad(fast(x), x, g)[0], torch.autograd.grad(usual(x), x, g)[0])
True
"""

from __future__ import annotations

__all__ = ["MaxPool2d"]

import torch
import torch.nn.functional as F
from torch import nn


class MaxPool2d(nn.MaxPool2d):
    """:class:`torch.nn.MaxPool2d` (same arguments, same results bit for bit), pooled channels-last on a CPU.

    Under ``torch.func`` transforms (dpbook's ``vmap`` path), on other devices and for other layouts, it is
    :class:`torch.nn.MaxPool2d` itself."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.device.type != "cpu" or x.dim() != 4 or not x.is_contiguous() or self.return_indices
                or torch._C._functorch.is_functorch_wrapped_tensor(x)):
            return super().forward(x)
        args = (self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)
        if not (torch.is_grad_enabled() and x.requires_grad):
            return F.max_pool2d(x.contiguous(memory_format=torch.channels_last), *args).contiguous()
        return _ChannelsLastForward.apply(x, *args)[0]


class _ChannelsLastForward(torch.autograd.Function):
    """Values and indices pooled channels-last; the backward is the usual layout's kernel."""

    @staticmethod
    def forward(x, kernel_size, stride, padding, dilation, ceil_mode):
        out, indices = F.max_pool2d(x.contiguous(memory_format=torch.channels_last), kernel_size, stride, padding,
                                    dilation, ceil_mode, return_indices=True)
        return out.contiguous(), indices.contiguous()

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, kernel_size, stride, padding, dilation, ctx.ceil_mode = inputs
        ctx.sizes = [_pair(a) for a in (kernel_size, stride, padding, dilation)]
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(x, output[1])

    @staticmethod
    def backward(ctx, grad_out, _):
        x, indices = ctx.saved_tensors
        grad = torch.ops.aten.max_pool2d_with_indices_backward(grad_out.contiguous(), x, *ctx.sizes, ctx.ceil_mode,
                                                              indices)
        return grad, None, None, None, None, None


def _pair(value) -> list[int]:
    return list(value) if isinstance(value, (tuple, list)) else [value, value]
