"""The one conversion pair between (B, N, C) tokens and NCHW maps: copy-free views.

A (B, H*W, C) token tensor *is* a channels-last (B, C, H, W) map in memory: convolutions
(oneDNN / cuDNN) run on that layout directly and keep it, so a depthwise conv between two
token ops needs no copy at all, where a standard (contiguous NCHW) map costs a full copy of
the tokens each way and leaves them transposed (strided) for the ops that follow.  Measured
on 2 CPU cores at 1024 x 1024: a 3x3 depthwise conv + residual on (1, 65536, 224) tokens
takes 0.25 s this way against 1.2-1.5 s through a contiguous NCHW map
(``docs/benchmarks.md``).  A transposed view with the right shape is not enough:
``x.transpose(1, 2).reshape(B, C, H, W)`` of a (1, N, C) tensor gets a batch stride of C,
and oneDNN then falls back to NCHW with a copy each way (the Mix-FFN of InfViT / NaLaFormer
ran ~5x slower that way).
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .depthwise import depthwise_conv
from .onednn import depthwise_act, fused_gelu
from .token_grid import TokenGrid

#: the most elements a conv's input may have for cuDNN's 32-bit indexing.  Above it (with a
#: batch of 1 PyTorch cannot split the batch instead) cuDNN runs a 64-bit direct kernel:
#: InfViT-small's stage-1 FFN depthwise conv at 8192^2 (512 channels x 2048 x 2048 = 2^31
#: elements) took 214 ms per call that way on an H100, 70 % of the forward.  Depthwise
#: channels are independent, so off the CPU such convs run on channel slices below it (on
#: an H200 InfViT-small's forward at 8192^2 then took 294 ms instead of 759; see
#: :func:`depthwise_in_slices` for its memory).
INDEX32_ELEMENTS = 2**31 - 1
#: the fewest slices such a conv runs in: each slice's input copy and output are then at
#: most an eighth of the map's
MIN_SLICES = 8


def tokens_as_map(x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
    """(B, H*W, C) tokens -> (B, C, H, W) map in channels-last memory format.

    A view (no copy) when ``x`` is contiguous; otherwise the tokens are copied once.
    """
    b, n, c = x.shape
    if n != hw[0] * hw[1]:
        raise ValueError(f'{n} tokens do not fill a {hw[0]}x{hw[1]} grid')
    return x.reshape(b, hw[0], hw[1], c).permute(0, 3, 1, 2)


def map_as_tokens(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) map -> contiguous (B, H*W, C) tokens; a view when the map is
    channels-last (e.g. the output of a conv on :func:`tokens_as_map`), else one copy."""
    b, c, h, w = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, h * w, c)


def conv_tokens(conv: nn.Conv2d, x: torch.Tensor, grid: TokenGrid,
                residual: bool = False, act: Optional[nn.Module] = None) -> torch.Tensor:
    """A 'same'-size conv of (B, N, C) tokens on their H x W ``grid``, (B, N, C) out;
    ``residual=True`` gives ``x + conv(x)``; an activation module ``act`` is applied last.

    Goes through the channels-last views (no layout copies for contiguous tokens) and
    zeroes the grid's batch padding first (:meth:`.token_grid.TokenGrid.zero_padding`).
    A depthwise residual conv without padding to zero adds the identity to its kernel centre
    instead: ``conv_w(x) + x = conv_{w + delta}(x)``, one pass over the tokens instead of two
    (the same sum, rounded once less); a GELU after a depthwise conv runs in the conv's
    epilogue in CPU inference (:mod:`.onednn`).  Off the CPU a depthwise conv of more than
    :data:`INDEX32_ELEMENTS` runs on channel slices (:func:`depthwise_in_slices`).
    """
    m = tokens_as_map(x, grid.hw)
    masked = grid.zero_padding(m)
    depthwise = _is_depthwise_same(conv)
    sliced = depthwise and _past_index32(m)
    algorithm = (fused_gelu(act, masked, conv) if depthwise and act is not None
                 and masked.is_contiguous(memory_format=torch.channels_last) else None)
    if depthwise and not sliced and (masked is m if residual else algorithm is not None):
        weight = conv.weight
        if residual:
            kh, kw = conv.kernel_size
            weight = weight.clone()
            weight[:, :, kh // 2, kw // 2] += 1
        return map_as_tokens(depthwise_act(masked, weight, conv.bias, act, algorithm))
    if sliced:
        y = depthwise_in_slices(masked, conv.weight, conv.bias)
    elif depthwise:
        y = depthwise_conv(conv, masked)   # a faster backward for 5x5 and up
    else:
        y = conv(masked)
    y = map_as_tokens(y)
    y = x + y if residual else y
    return y if act is None else act(y)


def _past_index32(m: torch.Tensor) -> bool:
    """Whether a depthwise conv of ``m`` runs in slices: off the CPU, in eager mode, above
    :data:`INDEX32_ELEMENTS`."""
    return (m.device.type != 'cpu' and m.numel() > INDEX32_ELEMENTS
            and not torch.compiler.is_compiling())


def depthwise_in_slices(m: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                        limit: Optional[int] = None) -> torch.Tensor:
    """A stride-1 'same' depthwise conv of the (B, C, H, W) map ``m``, run on contiguous
    channels-last slices of at most ``limit`` elements (:data:`INDEX32_ELEMENTS`) and at
    most ``1 / MIN_SLICES`` of the channels, each written into one channels-last output:
    the same values.  Besides ``m`` and the output, only one slice and its conv are live at
    a time (slices cut only at the limit, then concatenated, had held up to two outputs)."""
    b, c, h, w = m.shape
    kh, kw = weight.shape[-2:]
    per = max(1, min((limit or INDEX32_ELEMENTS) // (b * h * w), -(-c // MIN_SLICES)))
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


def _is_depthwise_same(conv: nn.Conv2d) -> bool:
    """One output per input channel, stride 1, odd kernel, centred zero padding."""
    kh, kw = conv.kernel_size
    return (conv.groups == conv.in_channels == conv.out_channels and conv.stride == (1, 1)
            and conv.dilation == (1, 1) and kh % 2 == 1 and kw % 2 == 1
            and conv.padding == (kh // 2, kw // 2) and conv.padding_mode == 'zeros')
