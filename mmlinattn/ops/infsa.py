"""Infinite Self-Attention: Pure InfSA and Linear-InfSA, each next to its dense reference.

Paper: Roffo, "Infinite Self-Attention" (arXiv 2603.00175): Pure InfSA is Eq. 11-12
(§3.2), Linear-InfSA Eq. 16-21 (§3.4), the depth discount γ^l of Eq. 23 (§3.5).

Shapes: ``B`` batch, ``H`` heads, ``N`` tokens, ``d`` head dim, ``C = H * d`` channels.
Every fast function takes an optional ``valid`` mask (B, N) of bool: tokens where it is
False (padding) enter no norm, pool or sum, so the result on the valid tokens does not
depend on how much padding there is.  Not in the paper (it never pads); dense inputs need it.

Numerics: all N-length reductions (Frobenius norm, norms, pools, matrix products over N) run
in a float32 island (:mod:`mmlinattn.ops.precision`; float64 inputs stay float64); results
are returned in the input dtype.  The ``*_reference`` functions are the equations written
per (sample, head) with explicit loops and the dense N x N matrix, for tests.

``gamma`` is the discount γ of Eq. 21 / 23, already raised to whatever power the caller
wants (γ^l for Eq. 23, γ for a constant per-block factor): a Python number, a 0-d tensor or
a per-head tensor of shape (H,) (e.g. a learned ``sigmoid(logit)``, kept in the graph).
"""
from typing import Callable, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from .precision import Float32Island

Gamma = Union[float, torch.Tensor]

__all__ = ['pure_infsa', 'pure_infsa_reference', 'infsa_attention_matrix',
           'linear_infsa_weights', 'linear_infsa', 'linear_infsa_reference',
           'linear_infsa_pooled']


def _head_gamma(gamma: Gamma, num_heads: int, ndim: int, like: torch.Tensor) -> Gamma:
    """γ broadcastable against a (B, H, ...) tensor with ``ndim`` dims."""
    if not torch.is_tensor(gamma):
        return float(gamma)
    gamma = gamma.to(like.dtype)
    if gamma.dim() == 0:
        return gamma
    if gamma.shape != (num_heads, ):
        raise ValueError(f'gamma must be a scalar or have shape ({num_heads},), got '
                         f'{tuple(gamma.shape)}')
    return gamma.view(1, num_heads, *([1] * (ndim - 2)))


def _check_valid(valid: Optional[torch.Tensor], b: int, n: int) -> Optional[torch.Tensor]:
    if valid is None:
        return None
    if valid.shape != (b, n):
        raise ValueError(f'valid mask must have shape (B, N) = ({b}, {n}), got '
                         f'{tuple(valid.shape)}')
    return valid.bool()


# ----------------------------------------------------------------------------- Pure InfSA
def _relu_scores(q: torch.Tensor, k: torch.Tensor, q_valid: Optional[torch.Tensor],
                 k_valid: Optional[torch.Tensor]) -> torch.Tensor:
    """[Q Kᵀ]₊ with padded rows / columns set to zero, (B, H, n_q, N)."""
    s = F.relu(q @ k.transpose(-2, -1))
    if q_valid is not None:
        s = s * q_valid[:, None, :, None].to(s.dtype)
    if k_valid is not None:
        s = s * k_valid[:, None, None, :].to(s.dtype)
    return s


def _pure_chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                q_valid: Optional[torch.Tensor], k_valid: Optional[torch.Tensor]
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Un-normalised rows [Q_b Kᵀ]₊ V and their squared Frobenius norm, (B, H, 1, 1)."""
    s = _relu_scores(q, k, q_valid, k_valid)
    return s @ v, s.square().sum((-2, -1), keepdim=True)


def _frobenius(sq: torch.Tensor) -> torch.Tensor:
    # clamp: sqrt has an infinite derivative at 0 (all scores rectified away).
    return sq.clamp_min(torch.finfo(sq.dtype).tiny).sqrt()


def _call(fn: Callable, *args):
    return fn(*args)


def pure_infsa_blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      valid: Optional[torch.Tensor], chunk_size: Optional[int],
                      run_block: Callable = _call) -> Tuple[torch.Tensor, torch.Tensor]:
    """The rows ``[Q Kᵀ]₊ V`` and ``‖[Q Kᵀ]₊‖²_F`` of :func:`pure_infsa`, in query blocks of
    ``chunk_size`` (None: one block); each block is ``run_block(fn, *args)`` (default
    ``fn(*args)``; the fast form recomputes blocks in the backward)."""
    n = q.shape[-2]
    if chunk_size is None or chunk_size >= n:
        return _pure_chunk(q, k, v, valid, valid)
    nums, sq = [], 0
    for start in range(0, n, chunk_size):
        rows = slice(start, start + chunk_size)
        num_b, sq_b = run_block(_pure_chunk, q[:, :, rows], k, v,
                                None if valid is None else valid[:, rows], valid)
        nums.append(num_b)
        sq = sq + sq_b
    return torch.cat(nums, dim=2), sq


def pure_infsa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gamma: Gamma = 1.0,
               valid: Optional[torch.Tensor] = None, eps: float = 1e-6,
               chunk_size: Optional[int] = None, run_block: Callable = _call) -> torch.Tensor:
    """Pure InfSA, Eq. 11-12: ``Â = [QKᵀ]₊ / (‖[QKᵀ]₊‖_F + ε)``, ``Z = γ Â V``.

    No softmax and no row normalisation; the Frobenius norm is one scalar per (sample, head)
    over the whole N x N matrix, so a 1/√d scale on QKᵀ cancels (up to ε) and is omitted.

    Args:
        q, k, v: (B, H, N, d).
        gamma: output scale (γ^l of Eq. 23, or a constant), scalar or per head (H,).
        valid: (B, N) bool; padded tokens are zero rows and columns of Â, and their
            output rows are zero.
        eps: ε of Eq. 11.
        chunk_size: if set and smaller than N, evaluate exactly in query blocks of this
            size: each block contributes its rows [Q_b Kᵀ]₊ V and its share of ‖·‖²_F, and
            the division happens once at the end.  Peak memory is O(chunk_size · N) instead
            of O(N²) (in the backward pass too through the fast form
            :func:`mmlinattn.kernels.pure_infsa`, which recomputes each block there).
        run_block: how a block is evaluated (see :func:`pure_infsa_blocks`).

    Returns:
        Z, (B, H, N, d) in ``v``'s dtype.
    """
    b, h, n, _ = q.shape
    valid = _check_valid(valid, b, n)
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f'chunk_size must be a positive int, got {chunk_size}')
    with Float32Island(q, k, v, out_dtype=v.dtype) as island:
        qf, kf, vf = island.cast(q, k, v)
        num, sq = pure_infsa_blocks(qf, kf, vf, valid, chunk_size, run_block)
        z = num / (_frobenius(sq) + eps)                                 # Eq. 11-12
        z = z * _head_gamma(gamma, h, 4, z)
    return island.back(z)


def pure_infsa_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         gamma: Gamma = 1.0, eps: float = 1e-6) -> torch.Tensor:
    """Eq. 11-12 per (sample, head) with the dense N x N matrix:
    ``Â = [QKᵀ]₊ / (‖[QKᵀ]₊‖_F + ε)`` (``torch.linalg.matrix_norm``), ``Z = γ Â V``.
    The loop counterpart of :func:`pure_infsa` (no mask), in the inputs' dtype."""
    b, h, _, _ = q.shape
    z = torch.empty_like(v)
    for i in range(b):
        for j in range(h):
            s = (q[i, j] @ k[i, j].T).clamp_min(0)
            a_hat = s / (torch.linalg.matrix_norm(s, 'fro') + eps)
            g = gamma[j] if torch.is_tensor(gamma) and gamma.dim() else gamma
            z[i, j] = g * a_hat @ v[i, j]
    return z


def infsa_attention_matrix(q: torch.Tensor, k: torch.Tensor,
                           valid: Optional[torch.Tensor] = None,
                           eps: float = 1e-6) -> torch.Tensor:
    """The dense ``Â`` of Eq. 11, (B, H, N, N) in float32 or float64.  O(N²) memory: for
    analysis and tests on small N, never used by the forward pass."""
    b, _, n, _ = q.shape
    valid = _check_valid(valid, b, n)
    with Float32Island(q, k) as island:
        s = _relu_scores(*island.cast(q, k), valid, valid)
        return s / (_frobenius(s.square().sum((-2, -1), keepdim=True)) + eps)


# ----------------------------------------------------------------------------- Linear-InfSA
def linear_infsa_weights(q: torch.Tensor, k: Optional[torch.Tensor] = None,
                         valid: Optional[torch.Tensor] = None, eps: float = 1e-6,
                         return_alpha: bool = False):
    """Linear-InfSA token weights ``a`` (Eq. 16-20), one vector per (sample, head).

    ``e_i = ‖Q_i‖₂`` (16), ``α = e / (Σe + ε)`` (17), ``q̄ = Σ α_i Q_i`` (18),
    ``S_j = [q̄ᵀ K_j]₊`` (19), ``a = S / (ΣS + ε)`` (20).  The paper ties ``K = Q``
    (``k=None``); an untied ``k`` is accepted for the authors' code's variant.

    Args:
        q: (B, H, N, d); k: same shape or None (tied).
        valid: (B, N) bool; padded tokens get ``α = a = 0``.

    Returns:
        ``a`` (B, H, N), float32 (float64 for float64 input); with ``return_alpha`` the pair
        ``(a, α)``.
    """
    b, _, n, _ = q.shape
    valid = _check_valid(valid, b, n)
    with Float32Island(q, k) as island:
        qf = island.cast(q)
        kf = qf if k is None else island.cast(k)
        e = torch.linalg.vector_norm(qf, dim=-1)                        # (16)
        if valid is not None:
            e = e.masked_fill(~valid[:, None], 0)
        alpha = e / (e.sum(-1, keepdim=True) + eps)                     # (17)
        qbar = (alpha.unsqueeze(-2) @ qf).squeeze(-2)                   # (18), (B, H, d)
        s = F.relu((kf @ qbar.unsqueeze(-1)).squeeze(-1))               # (19), (B, H, N)
        if valid is not None:
            s = s.masked_fill(~valid[:, None], 0)
        a = s / (s.sum(-1, keepdim=True) + eps)                         # (20)
    return (a, alpha) if return_alpha else a


def linear_infsa(q: torch.Tensor, v: torch.Tensor, gamma: Gamma = 1.0,
                 k: Optional[torch.Tensor] = None, valid: Optional[torch.Tensor] = None,
                 eps: float = 1e-6) -> torch.Tensor:
    """Linear-InfSA context, Eq. 21 as written: ``h = Σ_t γ a_t V_t`` from values computed
    for all N tokens (the authors' cost model; see :func:`linear_infsa_pooled`).

    Args:
        q, v: (B, H, N, d); k: untied keys or None (K = Q); gamma, valid, eps: as above.

    Returns:
        h, (B, H, d) in ``v``'s dtype; the same vector is broadcast to every token.
    """
    a = linear_infsa_weights(q, k, valid, eps)
    with Float32Island(v, a) as island:
        vf, w = island.cast(v, a)
        w = w * _head_gamma(gamma, q.shape[1], 3, vf)
        h = (w.unsqueeze(-2) @ vf).squeeze(-2)                           # Eq. 21, (B, H, d)
    return island.back(h)


def linear_infsa_reference(q: torch.Tensor, v: torch.Tensor, gamma: Gamma = 1.0,
                           k: Optional[torch.Tensor] = None,
                           eps: float = 1e-6) -> Tuple[torch.Tensor, torch.Tensor]:
    """Eq. 16-21 with explicit loops over samples, heads and tokens (Python numbers);
    the counterpart of :func:`linear_infsa_weights` and :func:`linear_infsa` (no mask).

    Returns:
        ``(a, h)``: the weights (B, H, N) and the context (B, H, d_v), float64.
    """
    f64 = dict(dtype=torch.float64)
    k = q if k is None else k
    b, nh, n, d = q.shape
    a_all = torch.empty(b, nh, n, **f64)
    h_all = torch.empty(b, nh, v.shape[-1], **f64)
    for i in range(b):
        for j in range(nh):
            e = [float(torch.sqrt(sum(q[i, j, t, c] ** 2 for c in range(d))))   # (16)
                 for t in range(n)]
            alpha = [et / (sum(e) + eps) for et in e]                           # (17)
            qbar = sum(alpha[t] * q[i, j, t] for t in range(n))                 # (18)
            s = [max(float(qbar @ k[i, j, t]), 0.0) for t in range(n)]          # (19)
            a = [st / (sum(s) + eps) for st in s]                               # (20)
            g = float(gamma[j]) if torch.is_tensor(gamma) and gamma.dim() else gamma
            a_all[i, j] = torch.tensor(a, **f64)
            h_all[i, j] = sum(g * a[t] * v[i, j, t] for t in range(n))          # (21)
    return a_all, h_all


def linear_infsa_pooled(q: torch.Tensor, x: torch.Tensor, v_weight: torch.Tensor,
                        v_bias: Optional[torch.Tensor] = None, gamma: Gamma = 1.0,
                        k: Optional[torch.Tensor] = None,
                        valid: Optional[torch.Tensor] = None,
                        eps: float = 1e-6) -> torch.Tensor:
    """Linear-InfSA context by the exact pool-then-project rewrite of Eq. 21.

    With ``V_t = W_V x_t + b_V`` split per head, ``h = Σ_t w_t V_t = W_V (Σ_t w_t x_t) +
    b_V Σ_t w_t`` (``w = γ a``), so the inputs are pooled per head first (O(N·H·C)) and V is
    never computed for the N tokens (which costs O(N·C²)).

    Args:
        q: (B, H, N, d) queries (= keys when ``k`` is None).
        x: (B, N, C) the tokens the value projection reads.
        v_weight: (H·d, C) and v_bias: (H·d,) or None, the value projection.
        gamma, k, valid, eps: as in :func:`linear_infsa`.

    Returns:
        h, (B, H, d) in ``x``'s dtype.
    """
    b, nh, n, d = q.shape
    if x.shape[:2] != (b, n) or v_weight.shape != (nh * d, x.shape[-1]):
        raise ValueError(f'shapes do not match: q {tuple(q.shape)}, x {tuple(x.shape)}, '
                         f'v_weight {tuple(v_weight.shape)}')
    a = linear_infsa_weights(q, k, valid, eps)
    with Float32Island(x, a) as island:
        xf, w = island.cast(x, a)
        w = w * _head_gamma(gamma, nh, 3, w)                               # (B, H, N)
        pooled = w @ xf                                                    # (B, H, C)
        v_heads = island.cast(v_weight).view(nh, d, -1).transpose(-1, -2)  # (H, C, d)
        h = (pooled.unsqueeze(-2) @ v_heads).squeeze(-2)                   # (B, H, d)
        if v_bias is not None:
            h = h + island.cast(v_bias).view(1, nh, d) * w.sum(-1, keepdim=True)
    return island.back(h)
