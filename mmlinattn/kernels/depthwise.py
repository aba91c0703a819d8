"""Stride-1 'same' depthwise convolutions: the forms that run faster or fit the hardware.

* Folded residual: ``conv_w(x) + x = conv_{w + delta}(x)`` (the identity added to the kernel's
  centre), one pass over the map instead of two (the same sum, rounded once less).
* A GELU in the conv's epilogue in CPU inference (:mod:`.onednn`).
* A faster CPU backward for kernels of :data:`.policy.MIN_KERNEL` and more: PyTorch's
  (oneDNN's) backward of a 5x5 depthwise conv takes 15-30x its forward, a 3x3 one's 2-4x
  (``docs/benchmarks.md``).  Both gradients have cheap forms for a 'same' depthwise conv:
  the input gradient is the same conv of the output gradient with the kernel flipped (the
  padding of an odd ``k`` with ``k // 2`` is its own transpose); the weight gradient of tap
  ``(i, j)`` of channel ``c`` is ``sum_{b,h,w} g[b,c,h,w] x_pad[b,c,h+i,w+j]``, one loop over
  the pixels with ``k^2`` accumulators, compiled (:class:`~.compiled.LazyCompiled`).
* Channel slices off the CPU above :data:`.policy.INDEX32_ELEMENTS` elements, where cuDNN
  falls back to a slow 64-bit kernel (a batch of 1 cannot be split instead); depthwise
  channels are independent, so the slices give the same values.

:func:`depthwise_same` chooses; everywhere else the plain ``F.conv2d`` and its autograd.
"""
import functools
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops.precision import autocast_enabled
from . import policy
from .compiled import LazyCompiled, compiled_allowed, compiler_unavailable
from .dispatch import fast_form
from .onednn import depthwise_act, fused_gelu, onednn_allowed


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


def depthwise_in_slices(m: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                        limit: Optional[int] = None) -> torch.Tensor:
    """A stride-1 'same' depthwise conv of the (B, C, H, W) map ``m``, run on contiguous
    channels-last slices of at most ``limit`` elements (:data:`.policy.INDEX32_ELEMENTS`)
    and at most ``1 / MIN_SLICES`` of the channels, each written into one channels-last
    output: the same values.  Besides ``m`` and the output, only one slice and its conv are
    live at a time."""
    b, c, h, w = m.shape
    kh, kw = weight.shape[-2:]
    per = max(1, min((limit or policy.INDEX32_ELEMENTS) // (b * h * w),
                     -(-c // policy.MIN_SLICES)))
    out = None
    for s in range(0, c, per):
        part = m[:, s:s + per].contiguous(memory_format=torch.channels_last)
        y = F.conv2d(part, weight[s:s + per], None if bias is None else bias[s:s + per],
                     1, (kh // 2, kw // 2), 1, part.shape[1])
        del part
        if out is None:  # the conv's dtype: autocast may run it in half precision
            out = torch.empty((b, c) + tuple(y.shape[2:]), dtype=y.dtype, device=y.device,
                              memory_format=torch.channels_last)
        out[:, s:s + per] = y
    return out


@fast_form('custom depthwise backward', compiler_unavailable)
def custom_depthwise_backward(conv: torch.nn.Conv2d, x: torch.Tensor) -> bool:
    """A 'same' depthwise ``conv(x)`` takes the custom CPU backward: a kernel of at least
    :data:`.policy.MIN_KERNEL` in eager CPU training in float32 / float64 (no autocast) with a
    compiler for its weight gradient (available where a compiled loop is:
    :func:`.compiled.compiler_unavailable`)."""
    kh, kw = conv.kernel_size
    return (max(kh, kw) >= policy.MIN_KERNEL and x.device.type == 'cpu'
            and x.dtype in (torch.float32, torch.float64) and x.dtype == conv.weight.dtype
            and not autocast_enabled('cpu')
            and policy.needs_grad(x, *conv.parameters())
            and compiled_allowed.verify(x, allow_grad=True))


@fast_form('depthwise channel slices', policy.eager_unavailable)
def depthwise_slices(conv: nn.Conv2d, m: torch.Tensor) -> bool:
    """A depthwise conv of the map ``m`` runs on channel slices: off the CPU, in eager mode,
    above :data:`.policy.INDEX32_ELEMENTS`."""
    return m.device.type != 'cpu' and m.numel() > policy.INDEX32_ELEMENTS


@fast_form('depthwise residual fold', policy.eager_unavailable)
def residual_folded(conv: nn.Conv2d, m: torch.Tensor, shortcut=None, act=None) -> bool:
    """The residual of a depthwise conv of its own input goes into the kernel's centre
    wherever the context allows (not in a graph, whose compiler fuses the sum anyway, and
    where the TorchScript ONNX exporter loses the kernel's shape in the in-place write) and
    the map is not cut into channel slices."""
    return not depthwise_slices.runs(conv, m)


def is_depthwise_same(conv: nn.Conv2d) -> bool:
    """One output per input channel, stride 1, odd kernel, centred zero padding."""
    kh, kw = conv.kernel_size
    return (conv.groups == conv.in_channels == conv.out_channels and conv.stride == (1, 1)
            and conv.dilation == (1, 1) and kh % 2 == 1 and kw % 2 == 1
            and conv.padding == (kh // 2, kw // 2) and conv.padding_mode == 'zeros')


def conv_same(conv: nn.Conv2d, m: torch.Tensor, shortcut: Optional[torch.Tensor] = None,
              act: Optional[nn.Module] = None, fold: bool = False) -> torch.Tensor:
    """``act(shortcut + conv(m))`` (``shortcut`` and ``act`` optional) of the (B, C, H, W)
    map ``m`` for a 'same'-size ``conv``: a stride-1 'same' depthwise one
    (:func:`is_depthwise_same`) through :func:`depthwise_same`, any other as written."""
    if is_depthwise_same(conv):
        return depthwise_same(conv, m, shortcut, act, fold)
    y = conv(m)
    y = y if shortcut is None else shortcut + y
    return y if act is None else act(y)


def depthwise_same(conv: nn.Conv2d, m: torch.Tensor, shortcut: Optional[torch.Tensor] = None,
                   act: Optional[nn.Module] = None, fold: bool = False) -> torch.Tensor:
    """``act(shortcut + conv(m))`` (``shortcut`` and ``act`` optional) of the (B, C, H, W)
    map ``m`` for a stride-1 'same' depthwise ``conv`` (:func:`is_depthwise_same`); ``fold``:
    ``shortcut`` is ``m`` itself, so the residual may go into the kernel's centre.  The
    plain form is ``conv(m)``, then the sum, then ``act``."""
    if shortcut is None:
        return _conv_act(conv, m, act)
    return (_folded if fold else _conv_sum_act)(conv, m, shortcut, act)


def _epilogue(conv: nn.Conv2d, m: torch.Tensor, act: Optional[nn.Module]) -> Optional[str]:
    """The GELU algorithm of ``act`` in the conv's epilogue (:func:`.onednn.fused_gelu`), or
    None."""
    if act is None or not m.is_contiguous(memory_format=torch.channels_last):
        return None
    return fused_gelu(act, m, conv)


def _conv_sum_act(conv, m, shortcut, act) -> torch.Tensor:
    y = _depthwise_conv(conv, m)
    y = y if shortcut is None else shortcut + y
    return y if act is None else act(y)


# (on the CPU, where oneDNN's epilogue runs, never in channel slices)
@onednn_allowed.dispatch(lambda conv, m, act: _conv_sum_act(conv, m, None, act),
                         verify=lambda conv, m, act: _epilogue(conv, m, act) is not None)
def _conv_act(conv, m, act) -> torch.Tensor:
    """``act(conv(m))``, the GELU in the conv's epilogue where :func:`.onednn.fused_gelu`
    allows it (the verifier asked it: its algorithm is the GELU's own)."""
    return depthwise_act(m, conv.weight, conv.bias, act, act.approximate)


@residual_folded.dispatch(_conv_sum_act)
def _folded(conv, m, shortcut, act) -> torch.Tensor:
    """``act(m + conv(m))`` (``shortcut`` is ``m``) as one conv with the identity in the
    kernel's centre (and the GELU in its epilogue where :func:`.onednn.fused_gelu` allows
    it)."""
    kh, kw = conv.kernel_size
    weight = conv.weight.clone()
    weight[:, :, kh // 2, kw // 2] += 1
    return depthwise_act(m, weight, conv.bias, act, _epilogue(conv, m, act))


@custom_depthwise_backward.dispatch(lambda conv, m: conv(m))
def _custom_conv(conv, m) -> torch.Tensor:
    return _DepthwiseConv.apply(m, conv.weight, conv.bias)


@depthwise_slices.dispatch(_custom_conv)
def _depthwise_conv(conv, m) -> torch.Tensor:
    """``conv(m)``: in channel slices (:func:`depthwise_in_slices`) where
    :func:`depthwise_slices` rules so, else with the custom backward where
    :func:`custom_depthwise_backward` does, else the module's own."""
    return depthwise_in_slices(m, conv.weight, conv.bias)
