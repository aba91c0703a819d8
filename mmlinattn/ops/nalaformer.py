"""Norm-aware linear attention (NaLa): feature maps, the O(N) attention and their references.

Paper: Meng et al., "NaLaFormer: Norm-Aware Linear Attention for Transformer Models"
(arXiv 2506.21137), §2.1 (Def. 1) and §3.2 (Eqs. 8-17).

A query or key ``x`` (last axis = head dim ``d``) is split into its L2 norm and direction,
``x = ||x|| d(x)`` (Def. 1).  The feature maps of Eq. 16 are

* ``phi_q(q) = |d(q)|^p(||q||) * [cos(theta(q)); sin(theta(q))]`` with the query-norm-aware
  power ``p(x) = lam * (0.5 + tanh(x))`` (Eq. 8),
* ``phi_k(k) = |k|^lam * [cos(theta(k)); sin(theta(k))]`` (Eq. 9 / 16),

where the magnitude vector multiplies both halves, so the feature size doubles to ``2d``, and
``theta(x) = (pi / 4) * tanh(alpha * d(x))`` elementwise (App. A.2).  Per dimension the
similarity is ``a_i b_i cos(theta_q,i - theta_k,i)`` with ``|theta_q,i - theta_k,i| < pi / 2``
(Eqs. 13-15, 17), so every ``phi_q(q) . phi_k(k) >= 0``: the "cosine inhibit" keeps same-sign
dimensions and suppresses opposite-sign ones.  Attention is the L1-normalised linear attention
of Eqs. 10-11, evaluated in O(N) through associativity.

Choices where the paper is silent:

* ``lam = 3`` (both authors' codes; the paper gives no value);
* ``alpha = 20``: the paper's literal ``alpha = 1`` maps a unit direction's entries (about
  ``1 / sqrt(d)``) to angles near 0, so opposite signs are barely inhibited (cos ~ 0.98);
  ``alpha = 20`` is the third-party implementation's value and gives real inhibition;
* norms clamped to ``>= eps``; absolute values taken before any fractional power;
* the key-value product and the key sum are divided by ``N`` (authors' code) so magnitudes and
  the ``eps`` of the denominator do not drift with the resolution; it cancels otherwise;
* the core runs in a float32 island (:mod:`mmlinattn.ops.precision`; float64 stays
  float64), because ``|k|^3`` overflows half precision quickly.

References (for tests and visualisation, O(N M)): :func:`nala_feature_maps` (Eq. 16 as
written), :func:`nala_similarity_reference` (Eq. 17 per dimension),
:func:`nala_attention_matrix` and :func:`nala_attention_reference` (the explicit N x M
attention).

``kernel='relu_split'`` is the authors' public-code kernel: ``phi_q = [relu(d(q))^p;
relu(-d(q))^p]``, ``phi_k = [relu(k)^lam; relu(-k)^lam]`` (same-sign pairs only).
``kernel='relu_split_rope'`` adds what that code does on top and the paper never mentions:
a 2-D RoPE rotation of both feature maps in the *numerator* only (the key-value product),
with the unrotated maps in the denominator (:func:`rope_linear_attention`).  Its weights
are no longer guaranteed non-negative and rows need not sum to one; it exists to reproduce
the authors' checkpoints.  It stays O(N).
"""
import functools
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from .normalized_attention import normalized_attention_reference, normalized_linear_attention
from .precision import Float32Island
from .rope import rotate_pairs

KERNELS = ('cos_sin', 'relu_split', 'relu_split_rope')


def _check_args(kernel: str, lam: float, alpha: float, eps: float) -> None:
    if kernel not in KERNELS:
        raise ValueError(f'kernel must be one of {KERNELS}, got {kernel!r}')
    if not lam > 0:
        raise ValueError(f'lam must be > 0, got {lam!r}')
    if not alpha > 0:
        raise ValueError(f'alpha must be > 0, got {alpha!r}')
    if not eps >= 0:
        raise ValueError(f'eps must be >= 0, got {eps!r}')


def feature_kernel(kernel: str) -> str:
    """The feature maps a kernel uses (``relu_split_rope`` rotates ``relu_split``'s)."""
    return 'relu_split' if kernel == 'relu_split_rope' else kernel


def nala_query_power(q_norm: torch.Tensor, lam: float = 3.0) -> torch.Tensor:
    """Eq. 8: ``p(||q||) = lam * (0.5 + tanh(||q||))``, in ``[0.5 lam, 1.5 lam)``."""
    return lam * (0.5 + torch.tanh(q_norm))


def norm_direction(x: torch.Tensor, eps: float = 1e-6) -> Tuple[torch.Tensor, torch.Tensor]:
    """Def. 1 (ND decomposition, L2 over the last axis): ``(||x||, x / ||x||)`` with the
    norm clamped to ``>= eps``; the norm keeps its last axis (size 1)."""
    n = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(eps)
    return n, x / n


@functools.lru_cache(maxsize=None)
def _quarter_pi(dtype: torch.dtype) -> float:
    """pi / 4 rounded down to a value exact in ``dtype``.  Float32 rounds pi / 4 up, which
    would let two angles differ by more than pi / 2 and give a negative cosine."""
    t = torch.tensor(math.pi / 4, dtype=dtype)
    if t.item() > math.pi / 4:
        t = torch.nextafter(t, torch.zeros_like(t))
    return t.item()


#: pi / 4 per float dtype as a Python constant (no ``.item()``, which breaks a torch.compile graph)
QUARTER_PI = {dt: _quarter_pi(dt)
               for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


def inhibit_angle(direction: torch.Tensor, alpha: float = 20.0) -> torch.Tensor:
    """App. A.2: ``theta = (pi / 4) tanh(alpha * d(x))`` in ``[-pi/4, pi/4]``."""
    return QUARTER_PI[direction.dtype] * torch.tanh(alpha * direction)


def _magnitudes(q: torch.Tensor, k: torch.Tensor, lam: float, eps: float):
    """``(|d(q)|^p(||q||), d(q), |k|^lam, d(k))`` (Eqs. 8, 9, 16)."""
    qn, dq = norm_direction(q, eps)
    _, dk = norm_direction(k, eps)
    return dq.abs().pow(nala_query_power(qn, lam)), dq, k.abs().pow(lam), dk


def nala_feature_maps(q: torch.Tensor, k: torch.Tensor, kernel: str = 'cos_sin',
                      lam: float = 3.0, alpha: float = 20.0,
                      eps: float = 1e-6) -> Tuple[torch.Tensor, torch.Tensor]:
    """Reference feature maps ``(phi_q(q), phi_k(k))``, each ``(..., 2d)``, in the paper's layout.

    ``cos_sin`` (Eq. 16): ``[m * cos(theta); m * sin(theta)]`` with ``m = |d(q)|^p(||q||)``
    for queries and ``m = |k|^lam`` for keys.  ``relu_split`` (authors' code):
    ``[relu(d(q))^p; relu(-d(q))^p]`` and ``[relu(k)^lam; relu(-k)^lam]``; for
    ``relu_split_rope`` these unrotated maps (the ones of its denominator).
    Computed in the input dtype.
    """
    _check_args(kernel, lam, alpha, eps)
    if feature_kernel(kernel) == 'relu_split':
        qn, dq = norm_direction(q, eps)
        p = nala_query_power(qn, lam)
        phq = torch.cat([F.relu(dq).pow(p), F.relu(-dq).pow(p)], dim=-1)
        phk = torch.cat([F.relu(k).pow(lam), F.relu(-k).pow(lam)], dim=-1)
        return phq, phk
    mq, dq, mk, dk = _magnitudes(q, k, lam, eps)
    tq, tk = inhibit_angle(dq, alpha), inhibit_angle(dk, alpha)
    phq = torch.cat([mq * torch.cos(tq), mq * torch.sin(tq)], dim=-1)
    phk = torch.cat([mk * torch.cos(tk), mk * torch.sin(tk)], dim=-1)
    return phq, phk


def nala_similarity_reference(q: torch.Tensor, k: torch.Tensor, lam: float = 3.0,
                              alpha: float = 20.0) -> torch.Tensor:
    """Eq. 17 written per dimension, without the feature maps: the (N, M) similarities
    ``sum_i |d(q)_i|^p(||q||) |k_i|^lam cos(theta_q,i - theta_k,i)`` of ``q (N, d)`` and
    ``k (M, d)`` (``kernel='cos_sin'``; O(N M d) memory)."""
    qn = q.norm(dim=-1, keepdim=True)
    dq, dk = q / qn, k / k.norm(dim=-1, keepdim=True)
    p = lam * (0.5 + torch.tanh(qn))                    # Eq. 8
    a = dq.abs() ** p                                   # (N, d)
    b = k.abs() ** lam                                  # (M, d)
    tq, tk = math.pi / 4 * torch.tanh(alpha * dq), math.pi / 4 * torch.tanh(alpha * dk)
    cos = torch.cos(tq[:, None, :] - tk[None, :, :])    # (N, M, d)
    return (a[:, None, :] * b[None, :, :] * cos).sum(-1)


def rope_linear_attention(phq: torch.Tensor, phk: torch.Tensor, v: torch.Tensor,
                           angles: torch.Tensor, eps: float,
                           valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``R(phi_q) (R(phi_k)^T V / M) / (phi_q . mean_j phi_k_j + eps)``, O(N).

    ``R`` rotates the channel pairs of each ``d``-wide half of a ``2d`` feature by the
    token's RoPE ``angles (N, d / 2)``, the same angles for both halves (the authors' code
    rotates ``[relu(x); relu(-x)]`` half by half).  Only the numerator is rotated.
    """
    if valid is not None:                                         # (B, M) for (B, h, M, F)
        phk = phk * valid[:, None, :, None].to(phk.dtype)
        count = valid.sum(-1).to(phk.dtype)[:, None, None, None]
    else:
        count = phk.shape[-2]
    both = torch.cat([angles, angles], dim=-1)
    kv = rotate_pairs(phk, both).transpose(-2, -1) @ v / count
    den = phq @ (phk.sum(-2, keepdim=True) / count).transpose(-2, -1)
    return rotate_pairs(phq, both) @ kv / (den + eps)


def check_attention_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: str,
                         lam: float, alpha: float, eps: float,
                         rope_angles: Optional[torch.Tensor]) -> None:
    """The argument checks of :func:`nala_attention` (shared with its fast form)."""
    _check_args(kernel, lam, alpha, eps)
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f'nala_attention: q (..., N, d), k (..., M, d), v (..., M, d_v) '
                         f'expected, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}')
    rope = kernel == 'relu_split_rope'
    if rope != (rope_angles is not None):
        raise ValueError("rope_angles must be given for kernel='relu_split_rope' and only "
                         f'for it, got kernel={kernel!r}, rope_angles={rope_angles!r}')
    if rope and (tuple(rope_angles.shape) != (k.shape[-2], k.shape[-1] // 2)
                 or q.shape[-2] != k.shape[-2] or k.shape[-1] % 2):
        raise ValueError(f'rope_angles must be (N, d / 2) = ({k.shape[-2]}, '
                         f'{k.shape[-1] // 2}) for N queries = N keys, got '
                         f'{tuple(rope_angles.shape)} for q {tuple(q.shape)}')


def nala_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: str = 'cos_sin',
                   lam: float = 3.0, alpha: float = 20.0, eps: float = 1e-6,
                   valid: Optional[torch.Tensor] = None,
                   rope_angles: Optional[torch.Tensor] = None) -> torch.Tensor:
    """NaLa attention (Eqs. 8-17), O(N) in the token count: the feature maps of Eq. 16
    (:func:`nala_feature_maps`) in the normalised linear attention of Eqs. 10-11.

    Args:
        q: queries ``(..., N, d)`` (one head per leading index, typically ``(B, h, N, d)``).
        k: keys ``(..., M, d)``.
        v: values ``(..., M, d_v)``.
        kernel: ``'cos_sin'`` (paper, Eq. 16), ``'relu_split'`` (authors' code) or
            ``'relu_split_rope'`` (authors' code with its numerator-only RoPE; needs
            ``rope_angles``).
        lam: the power scale lambda of Eqs. 8-9.
        alpha: angle scale, ``theta = (pi/4) tanh(alpha d(x))`` (ignored by ``relu_split``).
        eps: clamp of the norms and additive term of the normaliser.
        valid: optional (B, M) bool mask of the keys to use (batch padding excluded), for
            (B, heads, ., .) inputs.
        rope_angles: ``(N, d / 2)`` RoPE angles of the tokens (N = M), for
            ``kernel='relu_split_rope'`` only (e.g. ``rope_2d_angles(H, W, d)``).

    Returns:
        ``(..., N, d_v)`` in ``q``'s dtype; computed in float32 (float64 for float64 input)
        with autocast disabled.  The backbones run the fast form
        :func:`mmlinattn.kernels.nala_attention` (the same values up to rounding).
    """
    check_attention_args(q, k, v, kernel, lam, alpha, eps, rope_angles)
    with Float32Island(q) as island:
        q, k, v = island.cast(q, k, v)
        phi_q, phi_k = nala_feature_maps(q, k, kernel, lam, alpha, eps)
        if kernel == 'relu_split_rope':
            out = rope_linear_attention(phi_q, phi_k, v, rope_angles, eps, valid)
        else:
            out = normalized_linear_attention(phi_q, phi_k, v, eps, valid)
    return island.back(out)


def nala_attention_matrix(q: torch.Tensor, k: torch.Tensor, kernel: str = 'cos_sin',
                          lam: float = 3.0, alpha: float = 20.0) -> torch.Tensor:
    """The explicit row-normalised ``(..., N, M)`` NaLa attention matrix, O(N M).

    ``A_ij = phi_q(q_i) . phi_k(k_j) / sum_l phi_q(q_i) . phi_k(k_l)`` from the reference
    feature maps (no ``eps`` in the normaliser).  For tests and visualisation; not for
    ``relu_split_rope``, whose numerator depends on the token positions.
    """
    if kernel == 'relu_split_rope':
        raise ValueError("nala_attention_matrix does not cover kernel='relu_split_rope'")
    phq, phk = nala_feature_maps(q, k, kernel, lam, alpha)
    s = phq @ phk.transpose(-2, -1)
    return s / s.sum(dim=-1, keepdim=True)


def _pair_rotations(angles: torch.Tensor) -> torch.Tensor:
    """(N, 2h, 2h) block-diagonal matrices rotating channel pairs (2j, 2j+1) by
    ``angles (N, h)``: ``[[cos, -sin], [sin, cos]]`` blocks."""
    n, half = angles.shape
    r = angles.new_zeros(n, 2 * half, 2 * half)
    c, s = angles.cos(), angles.sin()
    idx = torch.arange(half)
    r[:, 2 * idx, 2 * idx], r[:, 2 * idx, 2 * idx + 1] = c, -s
    r[:, 2 * idx + 1, 2 * idx], r[:, 2 * idx + 1, 2 * idx + 1] = s, c
    return r


def nala_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             kernel: str = 'cos_sin', lam: float = 3.0, alpha: float = 20.0,
                             eps: float = 1e-6, valid: Optional[torch.Tensor] = None,
                             rope_angles: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`nala_attention` with the N x M similarities formed explicitly (Eqs. 10-11 on
    the reference maps of Eq. 16), means over the valid keys and ``eps`` as there.

    For ``kernel='relu_split_rope'`` the numerator's similarities are those of the features
    multiplied by explicit per-token rotation matrices (each ``d``-wide half rotated by
    ``rope_angles (N, d / 2)``), the denominator's those of the unrotated features.
    In the inputs' dtype; O(N M) memory.
    """
    _check_args(kernel, lam, alpha, eps)
    if (kernel == 'relu_split_rope') != (rope_angles is not None):
        raise ValueError("rope_angles must be given for kernel='relu_split_rope' and only "
                         f'for it, got kernel={kernel!r}')
    phq, phk = nala_feature_maps(q, k, kernel, lam, alpha, eps)
    den = phq @ phk.transpose(-2, -1)
    num = den
    if rope_angles is not None:
        rot = _pair_rotations(torch.cat([rope_angles, rope_angles], dim=-1).to(phq.dtype))
        num = (rot @ phq[..., None])[..., 0] @ (rot @ phk[..., None])[..., 0].transpose(-2, -1)
    return normalized_attention_reference(num, v, eps, valid, den_sim=den)
