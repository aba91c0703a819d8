"""The projections every multi-head mixer with one fused q/k/v linear shares."""
from typing import Tuple

import torch
import torch.nn as nn

from ...kernels import fast_linear
from .utils import check_heads


class QKVMixer(nn.Module):
    """``qkv = Linear(C, 3C)`` split into heads, and ``proj`` (+ dropout) on the merged
    heads; a subclass computes the mixing in between.

    Args:
        dim: channels C.
        num_heads: heads H (C divisible by H).
        qkv_bias: bias of the q/k/v projection.
        eps: the mixer's normaliser epsilon (stored as ``self.eps``).
        proj_drop: dropout after the output projection.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, eps: float = 1e-6,
                 proj_drop: float = 0.0):
        super().__init__()
        self.head_dim = check_heads(dim, num_heads)
        self.num_heads = num_heads
        self.eps = eps
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def qkv_heads(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """(B, N, C) -> q, k, v each (B, H, N, d)."""
        b, n, _ = x.shape
        qkv = fast_linear.apply(x, self.qkv).view(b, n, 3, self.num_heads, self.head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        return qkv.unbind(0)

    def part_heads(self, x: torch.Tensor, first: int, count: int) -> Tuple[torch.Tensor, ...]:
        """``count`` of q, k, v from the ``first`` (0: q, 1: k, 2: v), each (B, H, N, d), from
        those rows of the fused weight alone (a mixer's two passes over row stripes need the
        keys and values in the first, the queries in the second)."""
        b, n, _ = x.shape
        parts = fast_linear.blocks(x, self.qkv.weight, self.qkv.bias, 3,
                                   range(first, first + count))
        return tuple(t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2) for t in parts)

    def project(self, heads: torch.Tensor) -> torch.Tensor:
        """(B, H, N, d) mixed heads -> (B, N, C) after the output projection."""
        return self.proj_drop(self.proj(self.merge_heads(heads)))

    @staticmethod
    def merge_heads(heads: torch.Tensor) -> torch.Tensor:
        """(B, H, N, d) -> (B, N, H d), the output projection's input."""
        b, _, n, _ = heads.shape
        return heads.transpose(1, 2).reshape(b, n, -1)
