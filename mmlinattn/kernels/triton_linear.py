"""Triton kernels of the normalised linear-attention core on the GPU: LDN's ``A_lin``
(Fein-Ashley, "Linear Diffusion Networks", §3.3, E6-E7) with the ELU+1 or ReLU feature map,
the form of :func:`mmlinattn.ops.linear_attention`::

    [S | s] = phi(K)^T [V | 1] / M          out = phi(Q) S / (phi(Q) . s + eps)

in two kernels, for eager inference (:func:`.chunked.triton_allowed`):

* key side (:func:`_key_side`): each program maps a range of key tokens in registers and
  accumulates its part of ``[S | s]`` (one ``tl.dot`` per tile, on the inputs' own precision:
  half-precision inputs on tensor cores, accumulated in float32), added into the summary
  atomically;
* query side (:func:`_query_side`): each program maps a tile of query tokens, multiplies it
  by ``S``, takes the normaliser ``phi(Q) . s`` in float32 and writes ``out`` in the inputs'
  dtype at any strides (tokens-major: the heads' merge is then a view).

Neither feature map reaches memory, and half-precision inputs stay half: the plain form
writes both feature maps and float32 copies of ``q, k, v`` (:class:`~mmlinattn.ops.precision.
Float32Island`) to memory.

The kernels are compiled for CUDA, or run by Triton's interpreter on any device when
``TRITON_INTERPRET=1`` is set before Triton is first imported (Triton decides then, for its
own library too): the tests check them that way on the CPU against the plain op in float64.
"""
from typing import Optional

import torch
import triton
import triton.language as tl

__all__ = ['FEATURES', 'INTERPRETED', 'triton_linear_attention', 'key_summary']

#: feature maps the kernels apply: name -> the kernels' code
FEATURES = {'elu': 0, 'relu': 1}
#: whether this module's kernels run in Triton's interpreter (decided at import)
INTERPRETED = bool(triton.knobs.runtime.interpret)
#: query / key tokens per tile
BLOCK_TOKENS = 64
#: programs the key side aims at (enough to fill a large GPU several times over)
KEY_PROGRAMS = 1024


@triton.jit
def _features(x, FEATURE: tl.constexpr, ACC: tl.constexpr):
    """``phi(x)`` in the accumulation dtype: ELU + 1 (``exp(x)`` below 0, ``x + 1`` above) or
    ReLU."""
    x = x.to(ACC)
    if FEATURE == 0:
        return tl.where(x > 0, x + 1.0, tl.exp(tl.minimum(x, 0.0)))
    return tl.maximum(x, 0.0)


@triton.jit
def _key_side(k_ptr, v_ptr, s_ptr, heads, tokens, d, e, per_program, inv_count,
              skb, skh, skn, skd, svb, svh, svn, sve,
              FEATURE: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    """``[S | s] += phi(k)^T [v | 1] / M`` over this program's ``per_program`` key tokens of
    head ``program_id(0)``; ``s_ptr``: the (B * heads, d, e + 1) summary, zeroed."""
    bh = tl.program_id(0)
    b = bh // heads
    h = bh % heads
    first = tl.program_id(1) * per_program
    rd = tl.arange(0, BLOCK_D)
    re = tl.arange(0, BLOCK_E)
    kv = tl.zeros((BLOCK_D, BLOCK_E), ACC)
    ksum = tl.zeros((BLOCK_D, ), ACC)
    k_base = k_ptr + b * skb + h * skh
    v_base = v_ptr + b * svb + h * svh
    for n0 in range(0, per_program, BLOCK_N):
        rn = first + n0 + tl.arange(0, BLOCK_N)
        in_k = (rn < tokens)[:, None] & (rd < d)[None, :]
        kt = tl.load(k_base + rn[:, None] * skn + rd[None, :] * skd, mask=in_k, other=0.0)
        phi = tl.where(in_k, _features(kt, FEATURE, ACC), 0.0)
        in_v = (rn < tokens)[:, None] & (re < e)[None, :]
        vt = tl.load(v_base + rn[:, None] * svn + re[None, :] * sve, mask=in_v, other=0.0)
        kv = tl.dot(tl.trans(phi.to(vt.dtype)), vt, kv, input_precision=PREC, out_dtype=ACC)
        ksum += tl.sum(phi, axis=0)
    s_base = s_ptr + bh * d * (e + 1)
    in_s = (rd < d)[:, None] & (re < e)[None, :]
    tl.atomic_add(s_base + rd[:, None] * (e + 1) + re[None, :], kv * inv_count, mask=in_s)
    tl.atomic_add(s_base + rd * (e + 1) + e, ksum * inv_count, mask=rd < d)


@triton.jit
def _query_side(q_ptr, s_ptr, o_ptr, heads, tokens, d, e, eps,
                sqb, sqh, sqn, sqd, sob, soh, son, soe,
                FEATURE: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_E: tl.constexpr):
    """``out = phi(q) S / (phi(q) . s + eps)`` for one tile of query tokens of one head."""
    bh = tl.program_id(0)
    b = bh // heads
    h = bh % heads
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    re = tl.arange(0, BLOCK_E)
    in_q = (rn < tokens)[:, None] & (rd < d)[None, :]
    qt = tl.load(q_ptr + b * sqb + h * sqh + rn[:, None] * sqn + rd[None, :] * sqd, mask=in_q,
                 other=0.0)
    phi = tl.where(in_q, _features(qt, FEATURE, ACC), 0.0)
    s_base = s_ptr + bh * d * (e + 1)
    sv = tl.load(s_base + rd[:, None] * (e + 1) + re[None, :],
                 mask=(rd < d)[:, None] & (re < e)[None, :], other=0.0)
    s1 = tl.load(s_base + rd * (e + 1) + e, mask=rd < d, other=0.0)
    u = tl.dot(phi.to(qt.dtype), sv.to(qt.dtype), input_precision=PREC, out_dtype=ACC)
    z = tl.sum(phi * s1[None, :], axis=1)
    out = u / (z[:, None] + eps)
    in_o = (rn < tokens)[:, None] & (re < e)[None, :]
    tl.store(o_ptr + b * sob + h * soh + rn[:, None] * son + re[None, :] * soe,
             out.to(o_ptr.dtype.element_ty), mask=in_o)


def _heads(t: torch.Tensor) -> torch.Tensor:
    """``t`` as (B, heads, tokens, channels): a view."""
    return t if t.dim() == 4 else t.reshape(-1, *t.shape[-2:]).unsqueeze(0)


def _meta(x: torch.Tensor, feature_map: str):
    """The kernels' compile-time arguments for inputs like ``x``."""
    if feature_map not in FEATURES:
        raise ValueError(f'feature_map must be one of {sorted(FEATURES)}, got {feature_map!r}')
    wide = x.dtype == torch.float64
    return dict(FEATURE=FEATURES[feature_map], ACC=tl.float64 if wide else tl.float32,
                # float32 inputs multiply in float32 (not TF32); half ones on tensor cores
                PREC='ieee' if x.dtype in (torch.float32, torch.float64) else 'tf32')


def _block(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def key_summary(k: torch.Tensor, v: torch.Tensor, feature_map: str = 'elu') -> torch.Tensor:
    """``[S | s] = phi(k)^T [v | 1] / M`` per head: ``k (B, heads, M, d)``, ``v (B, heads, M,
    e)`` -> ``(B * heads, d, e + 1)`` in float32 (float64 for float64 inputs)."""
    k4, v4 = _heads(k), _heads(v)
    b, heads, tokens, d = k4.shape
    e = v4.shape[-1]
    meta = _meta(k, feature_map)
    summary = torch.zeros(b * heads, d, e + 1, device=k.device,
                          dtype=torch.float64 if k.dtype == torch.float64 else torch.float32)
    splits = max(1, min(triton.cdiv(tokens, BLOCK_TOKENS), KEY_PROGRAMS // (b * heads)))
    per_program = triton.cdiv(triton.cdiv(tokens, splits), BLOCK_TOKENS) * BLOCK_TOKENS
    grid = (b * heads, triton.cdiv(tokens, per_program))
    _key_side[grid](k4, v4, summary, heads, tokens, d, e, per_program, 1.0 / tokens,
                    *k4.stride(), *v4.stride(), BLOCK_N=BLOCK_TOKENS, BLOCK_D=_block(d),
                    BLOCK_E=_block(e), **meta)
    return summary


def triton_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            feature_map: str = 'elu', eps: float = 1e-6,
                            out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`mmlinattn.ops.linear_attention` without padded keys: ``q (B, heads, N, d)``,
    ``k (B, heads, M, d)``, ``v (B, heads, M, e)`` of one dtype (or the same without the
    heads' axis) -> ``(B, heads, N, e)`` in that dtype, laid out tokens-major (``out``: a
    tensor of that shape to write into instead)."""
    q4 = _heads(q)
    b, heads, tokens, d = q4.shape
    e = v.shape[-1]
    summary = key_summary(k, v, feature_map)
    if out is None:
        out = q.new_empty(b, tokens, heads, e).transpose(1, 2)
    o4 = _heads(out)
    grid = (b * heads, triton.cdiv(tokens, BLOCK_TOKENS))
    _query_side[grid](q4, summary, o4, heads, tokens, d, e, eps, *q4.stride(), *o4.stride(),
                      BLOCK_N=BLOCK_TOKENS, BLOCK_D=_block(d), BLOCK_E=_block(e),
                      **_meta(q, feature_map))
    return out if q.dim() == 4 else out.reshape(*q.shape[:-1], e)
