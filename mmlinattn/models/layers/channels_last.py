"""Copy-free views between (B, N, C) tokens and channels-last NCHW maps.

``tokens_to_map`` / ``map_to_tokens`` in :mod:`.utils` give a standard (contiguous NCHW) map,
which costs a full copy of the tokens each way and leaves the tokens transposed (strided) for
the ops that follow.  A (B, H*W, C) token tensor *is* a channels-last (B, C, H, W) map in
memory: convolutions (oneDNN / cuDNN) run on that layout directly and keep it, so a
depthwise conv between two token ops needs no copy at all.  Measured on 2 CPU cores at
1024 x 1024: a 3x3 depthwise conv + residual on (1, 65536, 224) tokens takes 0.25 s this way
against 1.2-1.5 s through ``tokens_to_map`` (``docs/benchmarks.md``).  A transposed view with
the right shape is not enough: ``x.transpose(1, 2).reshape(B, C, H, W)`` of a (1, N, C) tensor
gets a batch stride of C, and oneDNN then falls back to NCHW with a copy each way (the Mix-FFN
of InfViT / NaLaFormer ran ~5x slower that way).
"""
from typing import Tuple

import torch


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
