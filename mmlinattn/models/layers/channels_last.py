"""The one conversion pair between (B, N, C) tokens and NCHW maps: copy-free views.

A (B, H*W, C) token tensor *is* a channels-last (B, C, H, W) map in memory: convolutions
(oneDNN / cuDNN) run on that layout directly and keep it, so a depthwise conv between two
token ops needs no copy at all, where a standard (contiguous NCHW) map costs a full copy of
the tokens each way and leaves them transposed (strided) for the ops that follow
(``docs/benchmarks.md``).  A transposed view with the right shape is not enough:
``x.transpose(1, 2).reshape(B, C, H, W)`` of a (1, N, C) tensor gets a batch stride of C,
and oneDNN then falls back to NCHW with a copy each way.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn

from ...kernels import fast_linear
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
                residual: bool = False, act: Optional[nn.Module] = None) -> torch.Tensor:
    """A 'same'-size conv of (B, N, C) tokens on their H x W ``grid``, (B, N, C) out;
    ``residual=True`` gives ``x + conv(x)``; an activation module ``act`` is applied last.

    Goes through the channels-last views (no layout copies for contiguous tokens) and
    zeroes the grid's batch padding first (:meth:`.token_grid.TokenGrid.zero_padding`).
    A stride-1 'same' depthwise conv runs through the wing's ``conv_same`` (the residual
    folded into the kernel
    where nothing is padded, a GELU in the conv's epilogue, channel slices on large maps).
    """
    m = tokens_as_map(x, grid.hw)
    masked = grid.zero_padding(m)
    return map_as_tokens(fast_linear.conv_same(conv, masked, m if residual else None, act,
                                               fold=masked is m))
