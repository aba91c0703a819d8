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
similarity matrix, for tests.
"""
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

from ._grad import eager_inference, needs_grad, recompute_in_backward
from .compiled import LazyCompiled
from .precision import Float32Island

__all__ = [
    'linear_attention', 'linear_attention_reference', 'normalized_linear_attention',
    'chunked_linear_attention', 'normalized_attention_reference', 'FEATURE_MAPS'
]

#: elements of one (heads x tokens x features) chunk of :func:`chunked_linear_attention`:
#: 2^18 float32 = 1 MiB, small enough to stay in cache between the feature-map ops
CHUNK_ELEMENTS = 1 << 18


def _elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


#: Positive feature maps φ: ELU+1 (Katharopoulos et al.; LDN authors' code) and ReLU (the
#: paper's example, which can zero the denominator, hence ``eps``).
FEATURE_MAPS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    'elu': _elu_plus_one,
    'relu': F.relu,
}


def _elu_plus_one_no_grad(x: torch.Tensor) -> torch.Tensor:
    """``ELU(x) + 1`` as ``exp(min(x, 0)) + max(x, 0)``: the same values (``exp(x)`` below 0,
    ``x + 1`` above), ~5x faster on CPU, where torch's ELU kernel evaluates ``expm1`` element
    by element (5.8 vs 1.0 ns per element on 2 cores).  Inference only: at exactly ``x = 0``
    the clamps' gradients are 0, ELU's is 1."""
    return torch.exp(x.clamp(max=0)).add_(F.relu(x))


#: faster forms of :data:`FEATURE_MAPS` for calls without autograd (same values)
_NO_GRAD_FEATURE_MAPS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    'elu': _elu_plus_one_no_grad,
}


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def normalized_linear_attention(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor,
                                eps: float = 1e-6,
                                valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`chunked_linear_attention` on features computed beforehand, in one chunk."""
    return chunked_linear_attention(phi_q, phi_k, v, _identity, _identity, eps, valid,
                                    chunk=max(1, phi_q.shape[-2], phi_k.shape[-2]))


def _features(feature: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``feature(x)``; under autograd an eager map longer than one op (NaLa's without a
    compiler: ~10 elementwise ops, each saving a tensor as large as ``x``) is recomputed in
    the backward pass instead of keeping its intermediates, so only its output stays (the
    matmul after it needs that).  One-op maps (ELU + 1 saves only its output), compiled ones
    (:class:`~.compiled.LazyCompiled`, which save about ``x``) and any map inside a
    ``torch.compile`` graph (whose partitioner chooses what to save) run as they are."""
    # the graph test first: comparing function objects in a traced graph guards on them, and
    # the eager maps are fresh closures per call (a recompile per call)
    if torch.compiler.is_compiling() or feature is _identity or \
            feature in FEATURE_MAPS.values() or \
            (isinstance(feature, LazyCompiled) and not feature.failed):
        return feature(x)
    return recompute_in_backward(feature, x)


def _chunks(total: int, chunk: int) -> List[slice]:
    """Slices of ``chunk`` tokens over ``total``; one slice of all tokens in a traced graph
    (``torch.compile`` / ``torch.export``), where a loop over a symbolic token count would
    fix that count and recompile for every image size."""
    if torch.compiler.is_compiling():
        return [slice(None)]
    return [slice(s, s + chunk) for s in range(0, total, chunk)]


def chunked_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             feature_q: Callable[[torch.Tensor], torch.Tensor],
                             feature_k: Callable[[torch.Tensor], torch.Tensor],
                             eps: float = 1e-6, valid: Optional[torch.Tensor] = None,
                             chunk: Optional[int] = None) -> torch.Tensor:
    """The shared O(N) core: ``phi_q (phi_k^T V / M) / (phi_q . mean_j phi_k_j + eps)`` with
    ``phi_q = feature_q(q)``, ``phi_k = feature_k(k)``.

    NaLaFormer Eqs. 4-5 / 10-11 with its feature maps; LDN's ``A_lin`` (§3.3) with ELU+1 / ReLU.

    Shapes: ``q (..., N, d)``, ``k (..., M, d)``, ``v (..., M, D)`` -> ``(..., N, D)``;
    ``feature_q`` / ``feature_k`` map ``(..., n, d)`` to ``(..., n, F)``.  The ``1 / M`` of
    the key-value product cancels against the mean in the denominator; it only keeps
    magnitudes, and the weight of ``eps``, independent of the token count.  ``valid`` ((B, M)
    bool for (B, heads, M, .) keys) leaves padded keys out of both sums and divides by each
    image's own key count (batch padding; not in the paper, which never pads).

    The feature maps are applied to chunks of ``chunk`` tokens and the key sums accumulated
    chunk by chunk (``chunk=None``: ~:data:`CHUNK_ELEMENTS` per chunk of ``q``).  Why: a
    feature map is a chain of elementwise ops over a tensor (2x) wider than ``q``; over all N
    tokens at 2048² each op streams ~100 MiB through memory and allocates a fresh buffer,
    which glibc serves with new zero-filled pages.  Chunks keep the chain in cache and the
    buffers small enough to be reused (NaLa stage 1 at 2048²: 0.88 s -> 0.44 s per block on
    2 CPU cores, ``docs/benchmarks.md``).
    """
    n, m = q.shape[-2], k.shape[-2]
    if chunk is None:
        chunk = max(256, CHUNK_ELEMENTS // max(1, q[..., :1, :].numel()))

    kv = ksum = None
    for s in _chunks(m, chunk):
        pk = _features(feature_k, k[..., s, :])
        if valid is not None:                                     # (B, M) for (B, h, M, F)
            pk = pk * valid[:, None, s, None].to(pk.dtype)
        part_kv, part_sum = pk.transpose(-2, -1) @ v[..., s, :], pk.sum(-2)
        kv = part_kv if kv is None else kv + part_kv
        ksum = part_sum if ksum is None else ksum + part_sum
    if valid is None:
        count = m
    else:
        count = valid.sum(-1).to(kv.dtype)[:, None, None, None]  # (B, 1, 1, 1)
    # the key mean as one more column: the normaliser comes out of the same matmul
    kv = torch.cat([kv, ksum.unsqueeze(-1)], dim=-1) / count     # [mean phi_k v^T | mean phi_k]
    if not eager_inference(q, k, v):
        outs = []
        for s in _chunks(n, chunk):
            out = _features(feature_q, q[..., s, :]) @ kv
            outs.append(out[..., :-1] / (out[..., -1:] + eps))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)
    # no autograd: normalise each chunk straight into the output (no concatenation copy),
    # laid out tokens-major for (..., heads, N, D): the usual (B, N, heads * D) merge of the
    # heads is then a view instead of a copy
    batch = torch.broadcast_shapes(q.shape[:-2], kv.shape[:-2])
    if len(batch) >= 2:
        result = kv.new_empty(batch[:-1] + (n, batch[-1], v.shape[-1])).transpose(-3, -2)
    else:
        result = kv.new_empty(batch + (n, v.shape[-1]))
    for s in _chunks(n, chunk):
        out = feature_q(q[..., s, :]) @ kv
        torch.div(out[..., :-1], out[..., -1:].add_(eps), out=result[..., s, :])
    return result


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
    if feature_map not in FEATURE_MAPS:
        raise ValueError(f'feature_map must be one of {sorted(FEATURE_MAPS)}, '
                         f'got {feature_map!r}')
    if (q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]
            or q.shape[-1] != k.shape[-1]):
        raise ValueError(f'incompatible shapes q {tuple(q.shape)}, k {tuple(k.shape)}, '
                         f'v {tuple(v.shape)}; expected (B, heads, N, d), (B, heads, M, d), '
                         f'(B, heads, M, d_v)')
    phi = FEATURE_MAPS[feature_map]
    if not needs_grad(q, k, v):
        phi = _NO_GRAD_FEATURE_MAPS.get(feature_map, phi)
    with Float32Island(v) as island:
        out = chunked_linear_attention(*island.cast(q, k, v), phi, phi, eps, valid)
    return island.back(out)


def linear_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               feature_map: str = 'elu', eps: float = 0.0,
                               valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`linear_attention` with the N x M similarity matrix ``φ(Q) φ(K)^T`` formed
    explicitly and row-normalised (LDN §3.3, E7), in the inputs' dtype.  O(N M) memory."""
    phi = FEATURE_MAPS[feature_map]
    return normalized_attention_reference(phi(q) @ phi(k).transpose(-1, -2), v, eps, valid)
