"""The fast forms of SOFT / SOFT++ attention (Lu et al., "Softmax-free Linear Transformers",
IJCV 2024, arXiv 2207.03341, Eqs. 5, 9, 17): the Gaussian kernel in two passes with a
compiled finish, large per-head products as one ``mm`` each, ``P = exp(Q - K~)`` in token
chunks when it would take gigabytes, and :func:`fast_soft_attention`, the entry the mixer calls.
Each equals its :mod:`mmlinattn.ops.soft` form up to rounding.
"""
import functools
import math
from typing import Optional

import torch

from ..ops import soft as plain
from ..ops.log import current_logger
from ..ops.soft import (CHOLESKY_JITTER, check_attention_args, landmark_kernel_rows,
                        nystrom_middle, soft_attention)
from ..ops.precision import Float32Island
from . import policy
from .compiled import LazyCompiled, compiled_allowed
from .dispatch import FastForm, eager_only, fast_form, fast_ops

__all__ = ['fast_gaussian_kernel', 'fast_soft_attention', 'soft_value_sums', 'soft_middle',
           'soft_output']


@fast_form('SOFT kernel in place', policy.eager_unavailable)
def kernel_in_place(a: torch.Tensor, b: torch.Tensor, denom: float) -> bool:
    """:func:`_gaussian_kernel` takes the call: eager inference (no autograd) on
    points of one batch shape and width, and a positive ``denom``."""
    return (not policy.needs_grad(a, b) and a.shape[:-2] == b.shape[:-2]
            and a.shape[-1] == b.shape[-1] and denom > 0)


def fast_gaussian_kernel(a: torch.Tensor, b: torch.Tensor, denom: Optional[float] = None
                         ) -> torch.Tensor:
    """:func:`mmlinattn.ops.soft.gaussian_kernel` (Eq. 5); in eager inference in place
    (:func:`_gaussian_kernel`)."""
    return _gaussian_kernel(a, b, 2.0 * math.sqrt(a.shape[-1]) if denom is None else denom)


@kernel_in_place.dispatch(plain.gaussian_kernel)
def _gaussian_kernel(a: torch.Tensor, b: torch.Tensor, denom: float) -> torch.Tensor:
    """:func:`fast_gaussian_kernel` where :func:`kernel_in_place` rules so (else the plain
    op), without autograd in two passes over the (p, q) output instead
    of six: ``-||a_i - b_j||^2 / denom = (2 a_i . b_j - |a_i|^2 - |b_j|^2) / denom``, the
    products ``(2 / denom) a_i . b_j`` (:func:`_batched_mm`), then one fused loop
    (:data:`_KERNEL_FROM_PRODUCTS`) that subtracts both squared norms, clamps at 0 (a
    distance is never negative) and takes ``exp`` in place.  The (p, q) matrix is the largest
    tensor of SOFT++ at high resolution, so its passes are its cost."""
    a3, b3 = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
    row = b3.square().sum(-1).mul_(1.0 / denom).unsqueeze(-2)             # (batch, 1, q)
    col = a3.square().sum(-1, keepdim=True).mul_(1.0 / denom)             # (batch, p, 1)
    out = _batched_mm(a3 * (2.0 / denom), b3.transpose(-1, -2))
    _KERNEL_FROM_PRODUCTS(out, row, col)
    return out.view(*a.shape[:-1], b.shape[-2])


def _kernel_from_products(prod: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> None:
    """``prod <- exp(min(prod - row - col, 0))`` in place."""
    prod.sub_(row).sub_(col).clamp_(max=0).exp_()


#: :func:`_kernel_from_products`, as one compiled loop where one may run (:mod:`.compiled`)
_KERNEL_FROM_PRODUCTS = compiled_allowed.dispatch(_kernel_from_products)(
    LazyCompiled(_kernel_from_products, 'the SOFT kernel'))


@fast_form('one mm per head', policy.eager_unavailable)
def mm_per_head(a: torch.Tensor, b: torch.Tensor) -> bool:
    """:func:`_batched_mm` runs one ``torch.mm`` per matrix: eager inference (a loop over
    sizes would be fixed in a graph), more than one matrix, each of at least
    :data:`.policy.MM_LOOP_FLOPS`."""
    return (a.shape[0] > 1 and 2 * a.shape[1] * a.shape[2] * b.shape[-1] >= policy.MM_LOOP_FLOPS
            and not policy.needs_grad(a, b))


@mm_per_head.dispatch(torch.bmm)
def _batched_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm(a, b)`` for (batch, p, k) x (batch, k, q), as one ``torch.mm`` per matrix
    into the output where :func:`mm_per_head` rules so: ``bmm`` shares the batch out among the
    threads, so a few large heads run at a fraction of the rate of one ``mm`` per head that
    uses them all (``docs/benchmarks.md``)."""
    out = a.new_empty(a.shape[0], a.shape[1], b.shape[-1])
    for i in range(a.shape[0]):
        torch.mm(a[i], b[i], out=out[i])
    return out


def _heads_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for (B, h, p, k) x (B, h, k, q) through :func:`_batched_mm`."""
    out = _batched_mm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return out.view(*a.shape[:-1], b.shape[-1])


def _log_newton_cost(m: int) -> None:
    """Say once per process that Eq. 10 at ``m`` landmarks is the expensive part."""
    global _NEWTON_COST_LOGGED
    if _NEWTON_COST_LOGGED or policy.traced() or m <= policy.NEWTON_LOG_LANDMARKS:
        return
    _NEWTON_COST_LOGGED = True
    msg = (f'SOFT attention with m = {m} landmarks: the Newton-Schulz pseudo-inverse costs '
           f'about 40 m^3 = {40 * m ** 3 / 1e9:.1f} GFLOP per head and layer (m = tokens / '
           f"r^2 grows with the image under the paper's landmark rule). Use "
           f"pinv='cholesky' (a ridge-regularised solve with (A + lambda I)^-1, lambda = "
           f'{CHOLESKY_JITTER:g} tr(A) / m, instead of A^+: m^3 / 3 flops) or '
           f"max_landmarks=49 (pooled landmarks: linear cost, not the paper's rule).")
    current_logger(__name__).warning(msg)


_NEWTON_COST_LOGGED = False


@eager_only.dispatch(lambda q, m: None, verify=lambda q, m: not policy.needs_grad(q)
                     and q.numel() // q.shape[-1] * m > policy.SOFT_CHUNK_ELEMENTS)
def _token_chunk(q: torch.Tensor, m: int) -> Optional[int]:
    """Tokens per chunk when P = exp(Q - K~) (``q.shape[:-1] x m``) is too large to hold at
    once in inference, else None.  Chunking computes P twice (once for ``P^T V``, once for
    ``P (.)``), so it is kept for the sizes where P alone would take gigabytes: the paper's
    landmark rule at 2048^2 makes P 13 GB in SOFT-small's first stage."""
    rows = q.numel() // (q.shape[-1] * q.shape[-2])          # B * h
    return max(1, policy.SOFT_CHUNK_TARGET // (rows * m))


@fast_ops.dispatch(soft_attention)
def fast_soft_attention(q: torch.Tensor, landmarks: torch.Tensor, v: torch.Tensor,
                        num_iters: int = 20, init: str = 'safe', sym_norm: bool = True,
                        ridge: float = 0.0, valid: Optional[torch.Tensor] = None,
                        landmark_valid: Optional[torch.Tensor] = None,
                        pinv: str = 'newton') -> torch.Tensor:
    """:func:`mmlinattn.ops.soft_attention` (Eq. 9 / Eq. 17; its arguments and result) with
    its fast forms, the same values up to rounding: the in-place kernel, per-head products
    and, in inference, P in token chunks when it would take gigabytes
    (:data:`.policy.SOFT_CHUNK_ELEMENTS`)."""
    check_attention_args(q, landmarks, v, ridge, pinv)
    with Float32Island(q) as island:
        q32, lm32, v32 = island.cast(q, landmarks, v)
        keep, rows = _masks(island, valid, landmark_valid)
        # the order of what follows is that of the equation: P before A (with A first,
        # AOTAutograd's replay of one view failed in the backward, torch 2.14)
        chunk = _token_chunk(q32, lm32.shape[-2])
        if chunk is None:
            p = landmark_kernel_rows(q32, lm32, keep, rows, fast_gaussian_kernel)
            pv = _heads_mm(p.transpose(-1, -2), v32)         # P^T V: (B, h, m, d_v)
        else:   # P is never whole: P^T V summed over token chunks, P recomputed below
            pv = _value_sums(q32, lm32, v32, keep, rows, chunk)
        middle = _middle(lm32, keep, pv, num_iters, init, sym_norm, ridge, pinv)
        out = _heads_mm(p, middle) if chunk is None else \
            _apply_middle(q32, lm32, keep, rows, middle, chunk)
    return island.back(out)


# -- the three steps of S^ V on their own, for an attention computed in passes over token rows
def soft_value_sums(q: torch.Tensor, landmarks: torch.Tensor, v: torch.Tensor,
                    valid: Optional[torch.Tensor] = None,
                    landmark_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``P^T V`` (B, h, m, d_v) of the tokens ``q`` / ``v`` (arguments as in
    :func:`fast_soft_attention`), in the working dtype (float32, or float64): a sum over
    tokens, so the sum over row stripes of their parts is that of the whole map."""
    with Float32Island(q) as island:
        q32, lm32, v32 = island.cast(q, landmarks, v)
        keep, rows = _masks(island, valid, landmark_valid)
        return _value_sums(q32, lm32, v32, keep, rows, _token_chunk(q32, lm32.shape[-2]))


def soft_middle(landmarks: torch.Tensor, pv: torch.Tensor, num_iters: int = 20,
                init: str = 'safe', sym_norm: bool = True, ridge: float = 0.0,
                landmark_valid: Optional[torch.Tensor] = None,
                pinv: str = 'newton') -> torch.Tensor:
    """``N(A^+) (P^T V)`` (B, h, m, d_v) from the landmarks and the whole map's ``P^T V``
    (:func:`soft_value_sums`), in the working dtype."""
    with Float32Island(landmarks, pv) as island:
        lm32, pv32 = island.cast(landmarks, pv)
        keep, _ = _masks(island, None, landmark_valid)
        return _middle(lm32, keep, pv32, num_iters, init, sym_norm, ridge, pinv)


def soft_output(q: torch.Tensor, landmarks: torch.Tensor, middle: torch.Tensor,
                valid: Optional[torch.Tensor] = None,
                landmark_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``P N(A^+) P^T V`` (B, h, n, d_v) of the tokens ``q`` given ``middle``
    (:func:`soft_middle`), in ``q``'s dtype: each token's row needs only its own query."""
    with Float32Island(q) as island:
        q32, lm32, mid32 = island.cast(q, landmarks, middle)
        keep, rows = _masks(island, valid, landmark_valid)
        chunk = _token_chunk(q32, lm32.shape[-2]) or q32.shape[-2]
        return island.back(_apply_middle(q32, lm32, keep, rows, mid32, chunk))


def _masks(island: Float32Island, valid: Optional[torch.Tensor],
           landmark_valid: Optional[torch.Tensor]):
    """The (B, 1, m) landmark and (B, 1, n, 1) token masks in the working dtype, or None."""
    keep = None if landmark_valid is None else island.cast(landmark_valid[:, None])
    rows = None if valid is None else island.cast(valid[:, None, :, None])
    return keep, rows


def _token_parts(q: torch.Tensor, chunk: Optional[int]):
    n = q.shape[-2]
    return [slice(i, i + chunk) for i in range(0, n, chunk)] if chunk else [slice(0, n)]


def _kernel_rows(q, landmarks, keep, rows, part: slice) -> torch.Tensor:
    """The rows ``part`` of P (:func:`landmark_kernel_rows`)."""
    return landmark_kernel_rows(q[..., part, :], landmarks, keep,
                                None if rows is None else rows[..., part, :],
                                fast_gaussian_kernel)


def _value_sums(q, landmarks, v, keep, rows, chunk: Optional[int]) -> torch.Tensor:
    """``P^T V`` summed over token chunks (P whole when ``chunk`` is None)."""
    return sum(_heads_mm(_kernel_rows(q, landmarks, keep, rows, s).transpose(-1, -2),
                         v[..., s, :]) for s in _token_parts(q, chunk))


def _middle(landmarks, keep, pv, num_iters, init, sym_norm, ridge, pinv) -> torch.Tensor:
    if pinv == 'newton':
        _log_newton_cost(landmarks.shape[-2])
    return _nystrom(landmarks, keep, pv, num_iters, init, sym_norm, ridge, pinv,
                    fast_gaussian_kernel)


#: the rule of a custom autograd Function (Newton-Schulz's own backward)
custom_functions = FastForm('custom autograd Functions', policy.jit_unavailable,
                            lambda *a, **k: True)
_nystrom = custom_functions.dispatch(functools.partial(nystrom_middle, custom_backward=False))(
    nystrom_middle)


def _apply_middle(q, landmarks, keep, rows, middle, chunk: int) -> torch.Tensor:
    """``P middle`` over token chunks, each chunk's rows of P computed again."""
    out = middle.new_empty(*middle.shape[:-2], q.shape[-2], middle.shape[-1])
    for s in _token_parts(q, chunk):
        torch.matmul(_kernel_rows(q, landmarks, keep, rows, s), middle, out=out[..., s, :])
    return out
