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
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .depthwise import depthwise_conv
from .token_grid import TokenGrid


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
                residual: bool = False) -> torch.Tensor:
    """A 'same'-size conv of (B, N, C) tokens on their H x W ``grid``, (B, N, C) out;
    ``residual=True`` gives ``x + conv(x)``.

    Goes through the channels-last views (no layout copies for contiguous tokens) and
    zeroes the grid's batch padding first (:meth:`.token_grid.TokenGrid.zero_padding`).
    A depthwise residual conv without padding to zero adds the identity to its kernel centre
    instead: ``conv_w(x) + x = conv_{w + delta}(x)``, one pass over the tokens instead of two
    (the same sum, rounded once less).
    """
    m = tokens_as_map(x, grid.hw)
    masked = grid.zero_padding(m)
    if residual and masked is m and _is_depthwise_same(conv):
        kh, kw = conv.kernel_size
        weight = conv.weight.clone()
        weight[:, :, kh // 2, kw // 2] += 1
        return map_as_tokens(F.conv2d(m, weight, conv.bias, 1, conv.padding, 1, conv.groups))
    if _is_depthwise_same(conv):
        y = map_as_tokens(depthwise_conv(conv, masked))   # a faster backward for 5x5 and up
    else:
        y = map_as_tokens(conv(masked))
    return x + y if residual else y


def _is_depthwise_same(conv: nn.Conv2d) -> bool:
    """One output per input channel, stride 1, odd kernel, centred zero padding."""
    kh, kw = conv.kernel_size
    return (conv.groups == conv.in_channels == conv.out_channels and conv.stride == (1, 1)
            and conv.dilation == (1, 1) and kh % 2 == 1 and kw % 2 == 1
            and conv.padding == (kh // 2, kw // 2) and conv.padding_mode == 'zeros')
