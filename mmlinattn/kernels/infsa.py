"""The memory form of Pure InfSA (Infinite Self-Attention, Eqs. 11-12): query blocks recomputed
in the backward pass, so training keeps O(chunk_size · N) too."""
from typing import Optional

import torch

from ..ops import infsa as plain
from .recompute import recompute_in_backward

__all__ = ['fast_pure_infsa']


def fast_pure_infsa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gamma=1.0,
                    valid: Optional[torch.Tensor] = None, eps: float = 1e-6,
                    chunk_size: Optional[int] = None) -> torch.Tensor:
    """:func:`mmlinattn.ops.pure_infsa` (its arguments and values), each query block under
    activation checkpointing when autograd records it."""
    return plain.pure_infsa(q, k, v, gamma, valid, eps, chunk_size,
                            run_block=recompute_in_backward)
