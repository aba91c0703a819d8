"""The memory forms of InfSA (Infinite Self-Attention): Pure InfSA's query blocks recomputed in
the backward pass (Eqs. 11-12), so training keeps O(chunk_size · N) too, and Linear-InfSA's
context from sums over row stripes in two passes (Eqs. 16-21), for inference on large maps."""
from typing import Optional

import torch
import torch.nn.functional as F

from ..ops import infsa as plain
from ..ops.precision import Float32Island
from .recompute import recompute_in_backward

__all__ = ['fast_pure_infsa', 'infsa_query_sums', 'infsa_mean_query', 'infsa_pool_sums',
           'infsa_context']


def fast_pure_infsa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gamma=1.0,
                    valid: Optional[torch.Tensor] = None, eps: float = 1e-6,
                    chunk_size: Optional[int] = None) -> torch.Tensor:
    """:func:`mmlinattn.ops.pure_infsa` (its arguments and values), each query block under
    activation checkpointing when autograd records it."""
    return plain.pure_infsa(q, k, v, gamma, valid, eps, chunk_size,
                            run_block=recompute_in_backward)


# -- Linear-InfSA's context in two summary passes over row stripes (:mod:`.row_stripes`) -----
def infsa_query_sums(q: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Pass 1 over some tokens: ``[sum e_i | sum e_i q_i]`` (B, H, 1 + d) with ``e_i =
    ||q_i||`` (Eq. 16), padded tokens of ``valid`` ((B, n) bool) left out; float32 (float64
    for float64 ``q``)."""
    with Float32Island(q) as island:
        qf = island.cast(q)
        e = torch.linalg.vector_norm(qf, dim=-1)
        if valid is not None:
            e = e.masked_fill(~valid[:, None], 0)
        return torch.cat([e.sum(-1, keepdim=True), (e.unsqueeze(-2) @ qf).squeeze(-2)], -1)


def infsa_mean_query(sums: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``q̄ = sum alpha_i q_i`` (Eqs. 17-18) from :func:`infsa_query_sums` over all tokens."""
    return sums[..., 1:] / (sums[..., :1] + eps)


def infsa_pool_sums(k: torch.Tensor, x: torch.Tensor, qbar: torch.Tensor,
                    valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Pass 2 over the same tokens: ``[sum S_j | sum S_j x_j]`` (B, H, 1 + C) with ``S_j =
    [q̄ᵀ K_j]₊`` (Eq. 19) for the keys ``k`` (B, H, n, d) and the tokens ``x`` (B, n, C) the
    value projection reads."""
    with Float32Island(k, x) as island:
        kf, xf = island.cast(k, x)
        s = F.relu((kf @ qbar.to(kf.dtype).unsqueeze(-1)).squeeze(-1))   # (B, H, n)
        if valid is not None:
            s = s.masked_fill(~valid[:, None], 0)
        return torch.cat([s.sum(-1, keepdim=True), s @ xf], -1)


def infsa_context(sums: torch.Tensor, v_weight: torch.Tensor, v_bias: Optional[torch.Tensor],
                  gamma, eps: float = 1e-6) -> torch.Tensor:
    """``h = W_V (sum w_t x_t) + b_V sum w_t`` per head with ``w = γ S / (sum S + ε)``
    (Eqs. 20-21, pool then project) from :func:`infsa_pool_sums` over all tokens: (B, H, d)
    in the sums' dtype, :func:`mmlinattn.ops.infsa.linear_infsa_pooled`'s value."""
    nh = sums.shape[1]
    scale = plain._head_gamma(gamma, nh, 3, sums) / (sums[..., :1] + eps)   # γ / (ΣS + ε)
    pooled = sums[..., 1:] * scale                                           # (B, H, C)
    d = v_weight.shape[0] // nh
    v_heads = v_weight.to(sums.dtype).view(nh, d, -1).transpose(-1, -2)     # (H, C, d)
    h = (pooled.unsqueeze(-2) @ v_heads).squeeze(-2)
    if v_bias is not None:
        h = h + v_bias.to(sums.dtype).view(1, nh, d) * (sums[..., :1] * scale)
    return h
