"""The chunked O(N) core of normalised kernel linear attention (LDN, NaLaFormer): the fast
form of :func:`mmlinattn.ops.normalized_attention.normalized_linear_attention` and the entry
:func:`fast_linear_attention` that LDN's mixer calls.

* Chunks: the feature maps are applied to chunks of tokens and the key sums accumulated
  chunk by chunk (:data:`.policy.CHUNK_ELEMENTS` per chunk on the CPU): a feature map is a
  chain of elementwise ops over a tensor wider than ``q``; over all N tokens each op streams
  the whole tensor through memory and allocates a fresh buffer, chunks keep the chain in
  cache and the buffers small enough to be reused (``docs/benchmarks.md``).
* Segments (off the CPU, :data:`.policy.DEVICE_SEGMENT_TOKENS`): the sums over tokens as one
  batched matmul of segments instead of one product ~10^5 tokens deep.
* Eager training: one :class:`_RecomputedCore` whose forward runs without autograd and keeps
  only ``q, k, v`` and the key summary, and whose backward recomputes the features chunk by
  chunk and applies the closed-form gradient of the normalisation.
* Eager inference: each chunk normalised straight into a tokens-major output.
"""
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from ..ops.normalized_attention import FEATURE_MAPS, check_shapes, linear_attention
from ..ops.precision import Float32Island
from . import policy
from .compiled import LazyCompiled
from .dispatch import eager_only, fast_form, fast_ops
from .recompute import checkpoint, recomputes

__all__ = ['fast_linear_attention', 'chunked_linear_attention', 'triton_allowed', 'key_sums',
           'query_side_given_sums', 'linear_attention_features', 'maps_for']


# a newer torch tells a legacy-vmap batched gradient apart (torch has no public name for it);
# torch 2.1 cannot (a vectorised Jacobian through this backward then stops with torch's
# missing-batching-rule error)
try:
    from torch._C._functorch import is_legacy_batchedtensor as _legacy_batched
except ImportError:  # torch 2.1
    def _legacy_batched(t: torch.Tensor) -> bool:
        return False


def _elu_plus_one_no_grad(x: torch.Tensor) -> torch.Tensor:
    """``ELU(x) + 1`` as ``exp(min(x, 0)) + max(x, 0)``: the same values (``exp(x)`` below 0,
    ``x + 1`` above), faster on CPU, where torch's ELU kernel evaluates ``expm1`` element by
    element.  Inference only: at exactly ``x = 0`` the clamps' gradients are 0, ELU's is 1."""
    return torch.exp(x.clamp(max=0)).add_(F.relu(x))


#: faster forms of :data:`~mmlinattn.ops.normalized_attention.FEATURE_MAPS` for calls without
#: autograd (same values)
_NO_GRAD_FEATURE_MAPS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    'elu': _elu_plus_one_no_grad,
}


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _eager_chain(feature: Callable[[torch.Tensor], torch.Tensor], x) -> bool:
    """An eager map longer than one op (not ELU + 1, which saves only its output, nor a
    compiled map, which saves about ``x``), under eager autograd."""
    return not (feature is _identity or feature in FEATURE_MAPS.values()
                or (isinstance(feature, LazyCompiled) and not feature.failed)) \
        and recomputes.verify(x)


@recomputes.dispatch(lambda feature, x: feature(x), verify=_eager_chain)
def _features(feature: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``feature(x)``; under eager autograd a map longer than one op (NaLa's without a
    compiler: ~10 elementwise ops, each saving a tensor as large as ``x``) is recomputed in
    the backward pass instead of keeping its intermediates, so only its output stays (the
    matmul after it needs that).  In a ``torch.compile`` graph the partitioner chooses (and
    the rule asks before the maps are compared: a traced graph would guard on them)."""
    return checkpoint(feature, x)


@eager_only.dispatch(lambda a, b, segment: a.transpose(-2, -1) @ b,
                     verify=lambda a, b, segment: 0 < segment <= a.shape[-2] // 2)
def _token_sum(a: torch.Tensor, b: torch.Tensor, segment: int) -> torch.Tensor:
    """``a^T b`` over the token axis (-2): ``(..., n, F), (..., n, D) -> (..., F, D)``.  With
    ``segment`` > 0 the first ``segment * (n // segment)`` tokens are cut into segments
    whose products run as one batched matmul and are then added (the rest, fewer than
    ``segment`` tokens, as one more product): the same sum, in another order, with
    ``n / segment`` times the parallel work (:data:`.policy.DEVICE_SEGMENT_TOKENS`)."""
    n = a.shape[-2]
    whole = n - n % segment
    parts = (a[..., :whole, :].unflatten(-2, (-1, segment)).transpose(-2, -1)
             @ b[..., :whole, :].unflatten(-2, (-1, segment)))
    out = parts.sum(-3)
    if whole < n:
        out = out + a[..., whole:, :].transpose(-2, -1) @ b[..., whole:, :]
    return out


@eager_only.dispatch(lambda total, chunk: [slice(None)])
def _chunks(total: int, chunk: int) -> List[slice]:
    """Slices of ``chunk`` tokens over ``total``; one slice of all tokens in a traced graph
    (``torch.compile`` / ``torch.export``), where a loop over a symbolic token count would
    fix that count and recompile for every image size."""
    return [slice(s, s + chunk) for s in range(0, total, chunk)]


def chunked_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             feature_q: Callable[[torch.Tensor], torch.Tensor],
                             feature_k: Callable[[torch.Tensor], torch.Tensor],
                             eps: float = 1e-6, valid: Optional[torch.Tensor] = None,
                             chunk: Optional[int] = None,
                             backward_features: Optional[Tuple[Callable, Callable]] = None,
                             segment: Optional[int] = None) -> torch.Tensor:
    """The shared O(N) core: ``phi_q (phi_k^T V / M) / (phi_q . mean_j phi_k_j + eps)`` with
    ``phi_q = feature_q(q)``, ``phi_k = feature_k(k)``.

    NaLaFormer Eqs. 4-5 / 10-11 with its feature maps; LDN's ``A_lin`` (§3.3) with ELU+1 / ReLU.

    Shapes: ``q (..., N, d)``, ``k (..., M, d)``, ``v (..., M, D)`` -> ``(..., N, D)``;
    ``feature_q`` / ``feature_k`` map ``(..., n, d)`` to ``(..., n, F)``.  The ``1 / M`` of
    the key-value product cancels against the mean in the denominator; it only keeps
    magnitudes, and the weight of ``eps``, independent of the token count.  ``valid`` ((B, M)
    bool for (B, heads, M, .) keys) leaves padded keys out of both sums and divides by each
    image's own key count (batch padding; not in the paper, which never pads).

    ``chunk`` tokens per feature-map chunk and ``segment`` tokens per segment of the sums
    (:func:`_token_sum`); ``None``: the device's defaults (:func:`_core_sizes`).

    Under eager autograd the core is one :class:`_RecomputedCore`: its forward keeps only ``q,
    k, v`` and the key summary; its backward recomputes the features chunk by chunk with
    ``backward_features`` (default: ``feature_q, feature_k``; a pair with a backward where the
    forward maps have none) and applies the closed-form gradient of the normalisation.
    Wherever else autograd records the core it runs ``backward_features`` throughout.
    """
    default_chunk, default_segment = _core_sizes(q)
    chunk = default_chunk if chunk is None else chunk
    segment = default_segment if segment is None else segment
    grad_q, grad_k = backward_features or (feature_q, feature_k)
    return _core(q, k, v, valid, feature_q, feature_k, grad_q, grad_k, eps, chunk, segment)


@fast_form('feature maps without a backward', policy.plain_unavailable)
def without_backward(maps, grad_maps, *tensors) -> bool:
    """``maps`` (in place, fused: no backward) may run on ``tensors``: autograd records
    nothing."""
    return not policy.needs_grad(*tensors)


#: ``maps`` where autograd records nothing on ``tensors``, else ``grad_maps``
maps_for = without_backward.dispatch(lambda maps, grad_maps, *tensors: grad_maps)(
    lambda maps, grad_maps, *tensors: maps)


def _plain_core(q, k, v, valid, feature_q, feature_k, grad_q, grad_k, eps, chunk, segment):
    feature_q, feature_k = maps_for((feature_q, feature_k), (grad_q, grad_k), q, k, v)
    summary, _ = _key_summary(k, v, feature_k, valid, chunk, segment)
    return _query_side(q, summary, feature_q, eps, chunk)


@fast_form('linear attention core recomputed in the backward', policy.eager_unavailable)
def core_recomputed(q, k, v, *_) -> bool:
    """:class:`_RecomputedCore` takes the call: eager training, ``q``, ``k``, ``v`` of one
    leading shape."""
    return policy.needs_grad(q, k, v) and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]


@core_recomputed.dispatch(_plain_core)
def _core(q, k, v, valid, feature_q, feature_k, grad_q, grad_k, eps, chunk, segment):
    return _RecomputedCore.apply(q, k, v, valid, feature_q, feature_k, grad_q, grad_k, eps,
                                 chunk, segment)


def _key_sums(k, v, feature_k, valid, chunk, segment):
    """``[phi_k^T V | phi_k^T 1]`` (..., F, D + 1), the key sums accumulated over key chunks
    (the key sum as one more column: the normaliser comes out of the query side's matmul)."""
    kv = ksum = None
    for s in _chunks(k.shape[-2], chunk):
        pk = _masked(_features(feature_k, k[..., s, :]), valid, s)
        part_kv, part_sum = _token_sum(pk, v[..., s, :], segment), pk.sum(-2)
        kv = part_kv if kv is None else kv + part_kv
        ksum = part_sum if ksum is None else ksum + part_sum
    return torch.cat([kv, ksum.unsqueeze(-1)], dim=-1)


def _key_count(k: torch.Tensor, valid: Optional[torch.Tensor], dtype: torch.dtype):
    """The key count, or each image's valid-key count as (B, 1, 1, 1)."""
    return k.shape[-2] if valid is None else valid.sum(-1).to(dtype)[:, None, None, None]


def _key_summary(k, v, feature_k, valid, chunk, segment):
    """``S = [phi_k^T V | phi_k^T 1] / count`` (..., F, D + 1) and ``count``."""
    sums = _key_sums(k, v, feature_k, valid, chunk, segment)
    count = _key_count(k, valid, sums.dtype)
    return sums / count, count


def _core_sizes(q: torch.Tensor) -> Tuple[int, int]:
    """The default ``(chunk, segment)`` of :func:`chunked_linear_attention` for ``q``."""
    elements = policy.CHUNK_ELEMENTS if q.device.type == 'cpu' else policy.DEVICE_CHUNK_ELEMENTS
    segment = 0 if q.device.type == 'cpu' else policy.DEVICE_SEGMENT_TOKENS
    return max(256, elements // max(1, q[..., :1, :].numel())), segment


# -- the two passes of a global mixer in row stripes (:mod:`.row_stripes`) -----------------
def key_sums(k: torch.Tensor, v: torch.Tensor, feature_k: Callable[[torch.Tensor], torch.Tensor],
             valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Pass 1 over some of the keys: ``[phi_k(K)^T V | phi_k(K)^T 1]`` (..., F, D + 1) in
    float32 (float64 for float64 inputs), padded keys of ``valid`` ((B, M) bool) left out.
    Added over every stripe of keys, it gives :func:`query_side_given_sums` what
    :func:`chunked_linear_attention` computes from all keys at once."""
    chunk, segment = _core_sizes(k)
    with Float32Island(v) as island:
        k, v = island.cast(k, v)
        return _key_sums(k, v, feature_k, valid, chunk, segment)


def query_side_given_sums(q: torch.Tensor, sums: torch.Tensor, count,
                          feature_q: Callable[[torch.Tensor], torch.Tensor],
                          eps: float = 1e-6) -> torch.Tensor:
    """Pass 2 for some of the queries: :func:`chunked_linear_attention` of ``q`` (B, heads,
    n, d) against all keys, given their ``sums`` (:func:`key_sums` added over every stripe)
    and ``count`` (the key count, or (B,) valid-key counts); in ``q``'s dtype."""
    chunk, _ = _core_sizes(q)
    if torch.is_tensor(count):
        count = count.to(sums.dtype)[:, None, None, None]
    with Float32Island(q) as island:
        q = island.cast(q)
        out = _query_side(q, sums / count, feature_q, eps, chunk)
    return island.back(out)


def linear_attention_features(feature_map: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The feature map ``feature_map`` of :func:`fast_linear_attention` without autograd
    (for :func:`key_sums` and :func:`query_side_given_sums`)."""
    return _NO_GRAD_FEATURE_MAPS.get(feature_map, FEATURE_MAPS[feature_map])


def _query_side_by_chunks(q, summary, feature_q, eps, chunk):
    outs = []
    for s in _chunks(q.shape[-2], chunk):
        out = _features(feature_q, q[..., s, :]) @ summary
        outs.append(out[..., :-1] / (out[..., -1:] + eps))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)


@fast_form('query side written in place', policy.eager_unavailable)
def query_side_in_place(q, summary, feature_q, eps, chunk) -> bool:
    """:func:`_query_side` normalises into its output: eager inference."""
    return not policy.needs_grad(q, summary)


@query_side_in_place.dispatch(_query_side_by_chunks)
def _query_side(q, summary, feature_q, eps, chunk):
    """``u / (z + eps)`` for ``[u | z] = phi_q(q) S``, chunk by chunk; in eager inference
    each chunk normalised straight into the output (no concatenation copy), laid out
    tokens-major for (..., heads, N, D): the usual (B, N, heads * D) merge of the heads is
    then a view instead of a copy."""
    n = q.shape[-2]
    batch = torch.broadcast_shapes(q.shape[:-2], summary.shape[:-2])
    width = summary.shape[-1] - 1
    if len(batch) >= 2:
        result = summary.new_empty(batch[:-1] + (n, batch[-1], width)).transpose(-3, -2)
    else:
        result = summary.new_empty(batch + (n, width))
    for s in _chunks(n, chunk):
        out = feature_q(q[..., s, :]) @ summary
        torch.div(out[..., :-1], out[..., -1:].add_(eps), out=result[..., s, :])
    return result


def _masked(pk: torch.Tensor, valid: Optional[torch.Tensor], s: slice) -> torch.Tensor:
    """Key features with the padded keys of ``valid`` ((B, M) for (B, h, M, F)) zeroed."""
    return pk if valid is None else pk * valid[:, None, s, None].to(pk.dtype)


def _with_grad(feature: Callable, x: torch.Tensor):
    """``(x', feature(x'))`` for a detached copy ``x'`` of ``x`` that requires grad."""
    x = x.detach().requires_grad_()
    with torch.enable_grad():
        return x, feature(x)


class _RecomputedCore(torch.autograd.Function):
    """:func:`chunked_linear_attention` with a closed-form backward that recomputes the features.

    With ``S = [phi_k^T V | phi_k^T 1] / M`` (F x (D + 1)), ``[u | z] = phi_q S`` and
    ``out = u / (z + eps)``, the gradient ``G`` of ``out`` gives ``dL/du = G / (z + eps)``,
    ``dL/dz = -sum(G * out) / (z + eps)``, ``dL/dphi_q = [dL/du | dL/dz] S^T`` and
    ``dL/dS = phi_q^T [dL/du | dL/dz]``; then ``dL/dphi_k = (V dS_v^T + 1 dS_1^T) / M`` and
    ``dL/dV = phi_k dS_v / M``, and the feature maps' own backward gives ``dL/dq``, ``dL/dk``.
    Autograd through the plain form would keep both feature maps (each 2x ``q`` for NaLa),
    the unnormalised output and the denominator of every chunk for the backward; this keeps
    ``q, k, v`` and ``S``, and the forward runs without autograd (tokens-major output).
    """

    @staticmethod
    def forward(ctx, q, k, v, valid, feature_q, feature_k, grad_q, grad_k, eps, chunk, segment):
        summary, count = _key_summary(k, v, feature_k, valid, chunk, segment)
        out = _query_side(q, summary, feature_q, eps, chunk)
        ctx.save_for_backward(q, k, v, valid, summary)
        ctx.count = count
        ctx.maps, ctx.eps, ctx.chunk, ctx.segment = (grad_q, grad_k), eps, chunk, segment
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, valid, summary = ctx.saved_tensors
        feature_q, feature_k = ctx.maps
        eps, chunk, count, segment = ctx.eps, ctx.chunk, ctx.count, ctx.segment
        if _legacy_batched(grad_out):
            # a vectorised Jacobian (``jacobian(..., vectorize=True)``) batches the gradient;
            # the chunk writes below have no batching rule, the plain ops' backward does
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                out = _query_side(leaves[0], _key_summary(*leaves[1:], feature_k, valid,
                                                          chunk, segment)[0], feature_q, eps, chunk)
                grads = torch.autograd.grad(out, leaves, grad_out)
            return (*grads, None, None, None, None, None, None, None, None)
        with Float32Island(q):
            grad_out = grad_out.to(q.dtype)
            grad_q = torch.empty_like(q)
            grad_summary = None
            for s in _chunks(q.shape[-2], chunk):
                q_s, pq = _with_grad(feature_q, q[..., s, :])
                ud = pq.detach() @ summary
                den = ud[..., -1:] + eps
                g = grad_out[..., s, :] / den
                g_ud = torch.cat([g, -(g * ud[..., :-1]).sum(-1, keepdim=True) / den], -1)
                part = _token_sum(pq.detach(), g_ud, segment)
                grad_summary = part if grad_summary is None else grad_summary + part
                g_pq = g_ud @ summary.transpose(-2, -1)
                grad_q[..., s, :] = torch.autograd.grad(pq, q_s, g_pq)[0]
            grad_summary = grad_summary / count
            g_kv, g_sum = grad_summary[..., :-1], grad_summary[..., -1:].transpose(-2, -1)
            grad_k, grad_v = torch.empty_like(k), torch.empty_like(v)
            for s in _chunks(k.shape[-2], chunk):
                k_s, pk = _with_grad(feature_k, k[..., s, :])
                pk_masked = _masked(pk.detach(), valid, s)
                grad_v[..., s, :] = pk_masked @ g_kv
                g_pk = _masked(v[..., s, :] @ g_kv.transpose(-2, -1) + g_sum, valid, s)
                grad_k[..., s, :] = torch.autograd.grad(pk, k_s, g_pk)[0]
        return grad_q, grad_k, grad_v, None, None, None, None, None, None, None, None


def _triton_unavailable(ctx: policy.CallContext) -> Optional[str]:
    """Why no Triton kernel may run in ``ctx``: a traced graph or a special mode, a switch
    (``MMLINATTN_TRITON=0``, ``MMLINATTN_KERNELS=plain``), or Triton not importable."""
    if ctx.special:
        return 'off in a traced graph or a special mode'
    if policy.TRITON_ENV in ctx.off:
        return f'off ({policy.TRITON_ENV}=0)'
    if not policy.toolchain_available('cuda'):
        return 'off (Triton is not installed)'
    return policy.plain_unavailable(ctx)


@fast_form('Triton linear attention', _triton_unavailable)
def triton_allowed(*tensors: torch.Tensor) -> bool:
    """A Triton kernel (:mod:`.triton_linear`) may stand in for the torch ops on ``tensors``:
    where the context allows (:func:`_triton_unavailable`), in eager inference on a device of
    :data:`.policy.TRITON_DEVICES`, all plain ``torch.Tensor`` of one dtype of
    :data:`.policy.TRITON_DTYPES`."""
    if any(type(t) is not torch.Tensor for t in tensors) or policy.needs_grad(*tensors):
        return False
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1 or next(iter(dtypes)) not in policy.TRITON_DTYPES:
        return False
    return tensors[0].device.type in policy.TRITON_DEVICES


def _chunked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, feature_map: str,
                       eps: float, valid: Optional[torch.Tensor]) -> torch.Tensor:
    """The chunked core with the compiled-free feature maps of ``feature_map``."""
    phi = FEATURE_MAPS[feature_map]
    fast = linear_attention_features(feature_map)
    with Float32Island(v) as island:
        q, k, v = island.cast(q, k, v)
        out = chunked_linear_attention(q, k, v, fast, fast, eps, valid,
                                       backward_features=(phi, phi))
    return island.back(out)


@triton_allowed.dispatch(_chunked_attention, verify=lambda q, k, v, feature_map, eps, valid:
                         valid is None and triton_allowed.verify(q, k, v))
def _attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, feature_map: str,
                    eps: float, valid: Optional[torch.Tensor]) -> torch.Tensor:
    """The Triton kernels of :mod:`.triton_linear` where they run (no padded keys), else
    :func:`_chunked_attention`."""
    from . import triton_linear  # imports Triton: only where its kernels run
    return triton_linear.triton_linear_attention(q, k, v, feature_map, eps)


@fast_ops.dispatch(linear_attention)
def fast_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          feature_map: str = 'elu', eps: float = 1e-6,
                          valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`mmlinattn.ops.linear_attention` (LDN §3.3, E6-E7; its arguments and result)
    through the chunked core, or on the GPU in eager inference without padded keys through
    the Triton kernels of :mod:`.triton_linear`: the same values up to rounding."""
    check_shapes(q, k, v, feature_map)
    return _attention_core(q, k, v, feature_map, eps, valid)
