"""Small tensor-layout helpers for blocks that mix tokens on an H x W grid."""
from typing import Tuple

import torch
import torch.utils.checkpoint as cp


def map_to_tokens(x: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, int]]:
    """(B, C, H, W) -> ((B, H*W, C), (H, W))."""
    return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])


def tokens_to_map(x: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
    """(B, H*W, C) -> (B, C, H, W)."""
    b, n, c = x.shape
    if n != hw[0] * hw[1]:
        raise ValueError(f'{n} tokens do not fill a {hw[0]}x{hw[1]} grid')
    return x.transpose(1, 2).reshape(b, c, hw[0], hw[1])


def maybe_checkpoint(module, *args, enabled: bool = False):
    """Run ``module(*args)``, through activation checkpointing when ``enabled`` and any
    input requires grad (``with_cp`` in mmdet backbones).  Non-tensor arguments (a
    :class:`.token_grid.TokenGrid`) reach the recomputation in the backward pass as they are."""
    if enabled and any(torch.is_tensor(a) and a.requires_grad for a in args):
        return cp.checkpoint(module, *args, use_reentrant=False)
    return module(*args)
