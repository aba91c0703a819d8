"""Normalised kernel linear attention, shared by LDN and NaLaFormer, next to its dense reference.

Papers: Katharopoulos et al., "Transformers are RNNs: Fast Autoregressive Transformers with
Linear Attention" (ICML 2020, arXiv 2006.16236; the ELU + 1 feature map); Meng et al.,
"NaLaFormer: Norm-Aware Linear Attention for Transformer Models" (arXiv 2506.21137),
Eqs. 4-5 / 10-11; Fein-Ashley, "Linear Diffusion Networks: Harnessing Diffusion Processes
for Global Interactions", §3.3 (E6-E7, labels defined in :mod:`mmlinattn.models.backbones.ldn`).

LDN defines (§3.3, E6-E7)

    A_lin(H) = φ(Q) (φ(K)^T V) / (φ(Q) (φ(K)^T 1)),     Q, K, V = H W_Q, H W_K, H W_V,

a row-normalised weighted average of all value rows, computed through the (d x d_v) summary
φ(K)^T V so the cost is linear in the number of tokens N.  This op is the multi-head form on
already-projected heads; it has no parameters and no LDN-specific piece, so other families can
reuse it.

Numerics: both reductions over N are taken as *means* (φ(K)^T V / N and mean_n φ(K_n)); the
ratio is unchanged but the summaries stay O(1) instead of O(N), which matters for ~10^5
tokens in half precision.  Everything runs in (at least) float32, also under autocast; the
output dtype follows ``v``.  ``eps`` is added to the (mean) denominator.
:func:`normalized_attention_reference` is the same normalisation on an explicit N x M
similarity matrix, for tests.  The chunked form the backbones run is
:func:`mmlinattn.kernels.chunked.chunked_linear_attention`.
"""
from typing import Callable, Dict, Optional

import torch
import torch.nn.functional as F

from .precision import Float32Island

__all__ = [
    'linear_attention', 'linear_attention_reference', 'normalized_linear_attention',
    'normalized_attention_reference', 'FEATURE_MAPS', 'check_shapes'
]


def _elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


#: Positive feature maps φ: ELU+1 (Katharopoulos et al.; LDN authors' code) and ReLU (the
#: paper's example, which can zero the denominator, hence ``eps``).
FEATURE_MAPS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    'elu': _elu_plus_one,
    'relu': F.relu,
}


def normalized_linear_attention(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor,
                                eps: float = 1e-6,
                                valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``phi_q (phi_k^T V / M) / (phi_q . mean_j phi_k_j + eps)`` on features computed
    beforehand, O(N): NaLaFormer Eqs. 4-5 / 10-11, LDN's ``A_lin`` (§3.3, E6-E7).

    Shapes: ``phi_q (..., N, F)``, ``phi_k (..., M, F)``, ``v (..., M, D)`` -> ``(..., N, D)``.
    The ``1 / M`` of the key-value product cancels against the mean in the denominator; it
    keeps magnitudes, and the weight of ``eps``, independent of the token count.  ``valid``
    ((B, M) bool for (B, heads, M, .) keys) leaves padded keys out of both sums and divides
    by each image's own key count (batch padding; not in the paper, which never pads).
    """
    if valid is not None:
        phi_k = phi_k * valid[:, None, :, None].to(phi_k.dtype)
        count = valid.sum(-1).to(phi_k.dtype)[:, None, None, None]
    else:
        count = phi_k.shape[-2]
    kv = phi_k.transpose(-2, -1) @ v / count                      # (..., F, D)
    mean_k = phi_k.sum(-2, keepdim=True) / count                  # (..., 1, F)
    return (phi_q @ kv) / (phi_q @ mean_k.transpose(-2, -1) + eps)


def normalized_attention_reference(sim: torch.Tensor, v: torch.Tensor, eps: float = 0.0,
                                   valid: Optional[torch.Tensor] = None,
                                   den_sim: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The dense counterpart of :func:`chunked_linear_attention` on explicit similarities:
    ``(sum_j s_ij v_j / M) / (sum_j s'_ij / M + eps)`` over the valid keys ``j``.

    Args:
        sim: (..., N, M) numerator similarities ``s_ij = phi_q(q_i) . phi_k(k_j)``.
        v: (..., M, D) values.
        eps: added to the mean denominator.
        valid: optional (B, M) bool mask of the keys to use, for (B, heads, N, M) ``sim``;
            ``M`` is then each image's own valid-key count.
        den_sim: the denominator's similarities ``s'`` if they differ from ``sim`` (a
            numerator-only position encoding), default ``sim``.

    Returns:
        (..., N, D), in the dtype of ``sim``.  O(N M) memory.
    """
    den_sim = sim if den_sim is None else den_sim
    if valid is None:
        count = sim.shape[-1]
    else:
        keep = valid[:, None, None, :].to(sim.dtype)
        sim, den_sim = sim * keep, den_sim * keep
        count = keep.sum(-1, keepdim=True)
    return (sim @ v / count) / (den_sim.sum(-1, keepdim=True) / count + eps)


def check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, feature_map: str) -> None:
    """The argument checks of :func:`linear_attention` (shared with its fast form)."""
    if feature_map not in FEATURE_MAPS:
        raise ValueError(f'feature_map must be one of {sorted(FEATURE_MAPS)}, '
                         f'got {feature_map!r}')
    if (q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]
            or q.shape[-1] != k.shape[-1]):
        raise ValueError(f'incompatible shapes q {tuple(q.shape)}, k {tuple(k.shape)}, '
                         f'v {tuple(v.shape)}; expected (B, heads, N, d), (B, heads, M, d), '
                         f'(B, heads, M, d_v)')


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     feature_map: str = 'elu', eps: float = 1e-6,
                     valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``φ(Q) (φ(K)^T V) / (φ(Q) φ(K)^T 1)`` per head, with means over the N tokens.

    Args:
        q, k: (B, heads, N, d) queries and keys (before the feature map).
        v: (B, heads, N, d_v) values.
        feature_map: a key of :data:`FEATURE_MAPS`.
        eps: added to the mean denominator ``φ(q_i) · mean_n φ(k_n)``.
        valid: optional (B, N) bool mask of the keys to use (batch padding excluded); the
            means are then over each image's valid tokens.

    Returns:
        (B, heads, N, d_v) in ``v``'s dtype.
    """
    check_shapes(q, k, v, feature_map)
    phi = FEATURE_MAPS[feature_map]
    with Float32Island(v) as island:
        q, k, v = island.cast(q, k, v)
        out = normalized_linear_attention(phi(q), phi(k), v, eps, valid)
    return island.back(out)


def linear_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               feature_map: str = 'elu', eps: float = 0.0,
                               valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`linear_attention` with the N x M similarity matrix ``φ(Q) φ(K)^T`` formed
    explicitly and row-normalised (LDN §3.3, E7), in the inputs' dtype.  O(N M) memory."""
    phi = FEATURE_MAPS[feature_map]
    return normalized_attention_reference(phi(q) @ phi(k).transpose(-1, -2), v, eps, valid)
