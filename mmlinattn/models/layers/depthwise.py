"""A large depthwise convolution whose CPU backward is several times faster than PyTorch's.

Why: on CPU PyTorch's backward of a 5x5 depthwise conv takes 15-30x its forward (oneDNN;
measured on 2 cores: 77 ms against 2.7 ms for 64 channels at 256 x 256, the LePE of a
NaLaFormer stage-1 block at 1024²), where a 3x3 one takes 2-4x.  Both gradients have cheap
forms for a stride-1 'same' depthwise conv:

* the input gradient is the same depthwise conv of the output gradient with the kernel
  flipped (the padding of an odd ``k`` with ``k // 2`` is its own transpose);
* the weight gradient of tap ``(i, j)`` of channel ``c`` is ``sum_{b,h,w} g[b,c,h,w]
  x_pad[b,c,h+i,w+j]``: one loop over the pixels with ``k^2`` accumulators, compiled
  (:class:`~mmlinattn.ops.compiled.LazyCompiled`).

Used for kernels of 5 and more in eager CPU training in float32 / float64; everywhere else
(3x3, autocast, CUDA, no compiler, traced graphs) the plain ``F.conv2d`` and its autograd.
"""
import functools

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...ops._grad import needs_grad
from ...ops.compiled import LazyCompiled, compiled_path_allowed

#: smallest kernel side that takes the custom backward (3x3 is faster in PyTorch's own)
MIN_KERNEL = 5


def _shifted_products(grad: torch.Tensor, x: torch.Tensor, kh: int, kw: int) -> torch.Tensor:
    """``(C, 1, kh, kw)`` weight gradient of a 'same' depthwise conv from its output gradient
    ``grad`` and input ``x``, both (B, C, H, W)."""
    h, w = grad.shape[-2:]
    padded = F.pad(x, (kw // 2, kw // 2, kh // 2, kh // 2))
    taps = [(grad * padded[:, :, i:i + h, j:j + w]).sum((0, 2, 3))
            for i in range(kh) for j in range(kw)]
    return torch.stack(taps, -1).view(-1, 1, kh, kw)


@functools.lru_cache(maxsize=None)
def _compiled_weight_grad(kh: int, kw: int) -> LazyCompiled:
    return LazyCompiled(functools.partial(_shifted_products, kh=kh, kw=kw),
                        f'depthwise {kh}x{kw} weight gradient')


class _DepthwiseConv(torch.autograd.Function):
    """``F.conv2d(x, weight, bias, padding=(kh // 2, kw // 2), groups=C)`` with the backward
    of the module docstring."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        kh, kw = weight.shape[-2:]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return F.conv2d(x, weight, bias, 1, (kh // 2, kw // 2), 1, x.shape[1])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        kh, kw = weight.shape[-2:]
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = F.conv2d(grad, weight.flip(-2, -1), None, 1, (kh // 2, kw // 2), 1,
                              x.shape[1])
        if ctx.needs_input_grad[1]:
            grad_w = _compiled_weight_grad(kh, kw)(grad, x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum((0, 2, 3))
        return grad_x, grad_w, grad_b


def depthwise_conv(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` for a stride-1 'same' depthwise ``conv`` (checked by the caller), through
    :class:`_DepthwiseConv` where its backward is the faster one."""
    kh, kw = conv.kernel_size
    if (max(kh, kw) >= MIN_KERNEL and x.device.type == 'cpu'
            and x.dtype in (torch.float32, torch.float64) and x.dtype == conv.weight.dtype
            and not torch.is_autocast_enabled('cpu')
            and needs_grad(x, *conv.parameters())
            and compiled_path_allowed(x, allow_grad=True)):
        return _DepthwiseConv.apply(x, conv.weight, conv.bias)
    return conv(x)
