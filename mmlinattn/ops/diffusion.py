"""Graph diffusion on an H x W token grid: the diffusion term of Linear Diffusion Networks.

Fein-Ashley, "Linear Diffusion Networks: Harnessing Diffusion Processes for Global
Interactions" (§3.3-§4.4; equation labels E1-E9 as defined in
:mod:`mmlinattn.models.backbones.ldn`).  The paper's layer adds to the state H the
explicit-Euler diffusion increment

    δt · (K H − diag(K 1) H)                                   (E4, §3.3)

for a non-negative T x T kernel K, i.e. one step of ``A = I + δt (K − diag(K 1))`` (E8, §4.1),
which is a convex combination of the tokens whenever ``δt · max_t Σ_s K_ts ≤ 1`` (E9, §4.4).
The paper defines K for 1-D sequences only.  Here (our 2-D design) K is a
translation-invariant stencil on the image grid:

    δt · K_{t, t+u} = a · p_u,   u ∈ offsets,   p = softmax(logits),   Σ_u p_u = 1,

with a = δt · (interior row sum of K).  Borders have *missing* neighbours (zero padding), and
their row sums are the exact ``deg = conv(ones)`` ≤ 1, so the operator is the true graph
Laplacian of the finite grid: no wrap-around, no replicated values, a constant map is a fixed
point.  With ``0 ≤ a < 1`` the step matrix is non-negative with unit row sums and a strictly
positive diagonal, so E9 holds and Theorem 1 (global dependency) applies, for any H x W.

The functions here take the already-normalised stencil and step (the module
:class:`mmlinattn.models.layers.ldn_block.GridDiffusion` owns the parameters).  Kernels and
steps are per *group* of channels: ``G`` groups, each of ``C / G`` consecutive channels.
Everything runs in a float32 island (:mod:`mmlinattn.ops.precision`), also under autocast;
the output dtype follows the input.

The ``*_reference`` functions build the same operators as dense T x T matrices (explicit
loops over grid cells and offsets, Kronecker sums, dense inverses), for tests: O(T^2).
"""
import math
import re
from typing import Callable, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .precision import Float32Island
from .sizes import model_size

__all__ = [
    'stencil_offsets', 'stencil_kernel', 'grid_diffusion', 'grid_diffusion_implicit_dct',
    'dct_matrix', 'diffusion_kernel_reference', 'explicit_step_matrix_reference',
    'path_laplacian_reference', 'implicit_step_matrix_reference', 'grid_diffusion_reference',
    'grid_diffusion_implicit_reference'
]

#: The 4-neighbour stencil (up, down, left, right), as (row, col) offsets.
CROSS4_OFFSETS: Tuple[Tuple[int, int], ...] = ((-1, 0), (1, 0), (0, -1), (0, 1))


def stencil_offsets(taps: str) -> List[Tuple[int, int]]:
    """The (row, col) neighbour offsets of a stencil.

    Args:
        taps: ``'cross4'`` (the 4 nearest neighbours: up, down, left, right) or ``'kK'`` for
            an odd K >= 3 (every cell of the K x K window except the centre, row-major),
            e.g. ``'k3'`` = the 8-neighbourhood.
    """
    if taps == 'cross4':
        return list(CROSS4_OFFSETS)
    m = re.fullmatch(r'k(\d+)', str(taps))
    if m is None or int(m.group(1)) < 3 or int(m.group(1)) % 2 == 0:
        raise ValueError(f"taps must be 'cross4' or 'kK' with odd K >= 3 (e.g. 'k3'), "
                         f'got {taps!r}')
    r = int(m.group(1)) // 2
    return [(i, j) for i in range(-r, r + 1) for j in range(-r, r + 1) if (i, j) != (0, 0)]


def stencil_kernel(tap_probs: torch.Tensor, taps: str) -> torch.Tensor:
    """Scatter per-offset weights into a (G, k, k) convolution kernel with a zero centre.

    Args:
        tap_probs: (G, n_offsets) non-negative weights p_u (rows summing to 1 make ``a`` the
            interior row sum of δt·K).
        taps: the stencil name, see :func:`stencil_offsets`.
    """
    offsets = stencil_offsets(taps)
    if tap_probs.dim() != 2 or tap_probs.shape[1] != len(offsets):
        raise ValueError(f'stencil {taps!r} has {len(offsets)} offsets; tap_probs must be '
                         f'(G, {len(offsets)}), got {tuple(tap_probs.shape)}')
    r = max(max(abs(i), abs(j)) for i, j in offsets)
    k = 2 * r + 1
    # F.conv2d is a cross-correlation: out[y, x] = Σ w[r+i, r+j] · in[y+i, x+j], so the
    # weight at (r+i, r+j) multiplies the neighbour at offset (i, j): K_{t, t+(i,j)} = p_(i,j).
    index = torch.tensor([(r + i) * k + (r + j) for i, j in offsets], device=tap_probs.device)
    kernel = tap_probs.new_zeros(tap_probs.shape[0], k * k)
    kernel = kernel.index_copy(1, index, tap_probs)
    return kernel.view(-1, k, k)


def _per_channel(t: torch.Tensor, channels: int) -> torch.Tensor:
    """Expand a per-group tensor (G, ...) to (C, ...), groups of C / G consecutive channels."""
    groups = t.shape[0]
    if channels % groups:
        raise ValueError(f'{channels} channels cannot be split into {groups} diffusion groups')
    return t.repeat_interleave(channels // groups, dim=0)


def _group_map(a_deg: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(B, G, H, W) per-group map -> (B, G, 1, H, W), to broadcast over each group's channels
    of ``like`` viewed as (B, G, C / G, H, W), in ``like``'s memory order (channels-last
    ``like``: the groups innermost, so an elementwise op with it runs along its rows)."""
    if like.is_contiguous(memory_format=torch.channels_last):
        a_deg = a_deg.contiguous(memory_format=torch.channels_last)
    return a_deg.unsqueeze(2)


def _split_groups(t: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, G, C / G, H, W), a view for contiguous and channels-last maps (a
    reshape, not ``unflatten``: ONNX opset 11 has no symbol for it)."""
    return t.reshape(t.shape[0], groups, -1, *t.shape[2:])


def increment(y: torch.Tensor, weight: torch.Tensor, a_deg: torch.Tensor, groups: int,
              keep: Optional[torch.Tensor]) -> torch.Tensor:
    """``W ⋆ y − a·deg ⊙ y`` (zero outside ``keep``): the degree term subtracted from the
    conv's output in one pass, the degrees broadcast from one map per group (not a C x H x W
    copy of them)."""
    k, c = model_size(weight.shape[-1]), model_size(y.shape[1])
    inc = F.conv2d(y, weight, padding=k // 2, groups=c)
    inc = torch.addcmul(_split_groups(inc, groups), a_deg, _split_groups(y, groups), value=-1)
    inc = inc.flatten(1, 2)
    return inc if keep is None else inc * keep


def grid_diffusion(x: torch.Tensor, kernel: torch.Tensor, step: torch.Tensor,
                   n_steps: int = 1, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The explicit-Euler diffusion increment ``A^n x − x`` on the H x W grid (E4, E8).

    One step is ``x + a·(W ⋆ x − deg ⊙ x)`` = ``x + δt (K x − diag(K 1) x)``, where ``W ⋆`` is
    the zero-padded depthwise correlation with ``kernel`` and ``deg = W ⋆ 1`` its exact row
    sums (smaller at the borders).  ``n_steps`` steps repeat it with the same stencil and step.

    Args:
        x: (B, C, H, W) state, any memory format (a channels-last view of (B, H*W, C)
            tokens costs no copy).
        kernel: (G, k, k) non-negative stencil with a zero centre (see :func:`stencil_kernel`).
        step: (G,) step ``a = δt · interior row sum``; ``0 ≤ a < 1`` (with kernels summing to
            1) keeps every step a convex combination (E9).
        n_steps: number of explicit sub-steps, >= 1.
        valid: optional (B, 1, H, W) 0/1 mask of each image's valid region in a padded
            batch: the grid is then that region, the padding is a missing neighbour (its
            row sums come from the mask) and the increment is zero there.

    Returns:
        The increment, (B, C, H, W) in ``x``'s dtype.
    """
    return euler_steps(x, kernel, step, n_steps, valid, increment)


def euler_steps(x: torch.Tensor, kernel: torch.Tensor, step: torch.Tensor, n_steps: int,
                valid: Optional[torch.Tensor], step_increment: Callable) -> torch.Tensor:
    """:func:`grid_diffusion` with each step's increment from ``step_increment`` (the
    signature of :func:`increment`)."""
    if n_steps < 1:
        raise ValueError(f'n_steps must be >= 1, got {n_steps}')
    c, (h, w) = model_size(x.shape[1]), x.shape[2:]
    k = model_size(kernel.shape[-1])
    with Float32Island(x) as island:
        dtype = island.dtype
        scaled = kernel.to(dtype) * step.to(dtype).view(-1, 1, 1)      # a·p, (G, k, k)
        g = model_size(scaled.shape[0])
        weight = _per_channel(scaled, c)[:, None]                        # (C, 1, k, k)
        y = x.to(dtype)
        keep = None if valid is None else valid.to(dtype)
        # a·diag(K 1): the exact row sums, one map per group (conv of ones, or of each
        # image's valid region)
        support = (x.new_ones(1, g, h, w, dtype=dtype) if keep is None
                   else keep.expand(-1, g, -1, -1))
        a_deg = F.conv2d(support, scaled[:, None], padding=k // 2, groups=g)
        a_deg = _group_map(a_deg, y)
        if keep is not None:
            y = y * keep
        total = inc = step_increment(y, weight, a_deg, g, keep)
        for _ in range(n_steps - 1):
            y = y + inc
            inc = step_increment(y, weight, a_deg, g, keep)
            total = total + inc
    return island.back(total)


def dct_matrix(n: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """Orthonormal DCT-II matrix D (n x n): ``D[p, k] = s_p cos(π p (k + ½) / n)``.

    Its rows are the eigenvectors of the path-graph Laplacian with missing-neighbour ends
    (eigenvalue ``2 − 2 cos(π p / n)``), so ``D L D^T`` is diagonal.
    """
    k = torch.arange(n, device=device, dtype=torch.float64)
    p = k[:, None]
    d = torch.cos(math.pi * p * (k[None, :] + 0.5) / n) * math.sqrt(2.0 / n)
    d[0] = math.sqrt(1.0 / n)
    return d.to(dtype)


def grid_diffusion_implicit_dct(x: torch.Tensor, kappa: torch.Tensor, step: torch.Tensor,
                                n_steps: int = 1) -> torch.Tensor:
    """The implicit (backward-Euler) diffusion increment, solved exactly with a 2-D DCT.

    Solves ``(I + a·M) y = x`` (``n_steps`` times) for the symmetric, separable 4-neighbour
    operator ``M = (κ_v / 2) L_H ⊕ (κ_h / 2) L_W``, where ``L_n`` is the path Laplacian with
    missing-neighbour ends.  ``−a·M`` is exactly the explicit stencil
    increment for symmetric taps ``p_up = p_down = κ_v / 2``, ``p_left = p_right = κ_h / 2``.
    The paper mentions implicit integration for stability (§3.3, §3.7); this integrator is
    unconditionally stable for any ``a ≥ 0`` and ``(I + a M)^{-1}`` is entrywise positive
    (global in one step) with unit row sums.  Cost O(N (H + W) C) (matmul DCT), so it is
    *not* linear in N.

    Args:
        x: (B, C, H, W) state.
        kappa: (G, 2) non-negative (κ_v, κ_h), normally summing to 1.
        step: (G,) step ``a ≥ 0``.
        n_steps: number of backward-Euler sub-steps, >= 1.

    Returns:
        The increment ``y − x``, (B, C, H, W) in ``x``'s dtype.
    """
    if n_steps < 1:
        raise ValueError(f'n_steps must be >= 1, got {n_steps}')
    c, h, w = x.shape[1:]
    with Float32Island(x) as island:
        dtype = island.dtype
        dh = dct_matrix(h, x.device, dtype)
        dw = dct_matrix(w, x.device, dtype)
        lam_h = 1.0 - torch.cos(math.pi * torch.arange(h, device=x.device, dtype=dtype) / h)
        lam_w = 1.0 - torch.cos(math.pi * torch.arange(w, device=x.device, dtype=dtype) / w)
        kappa = _per_channel(kappa.to(dtype), c)                    # (C, 2)
        a = _per_channel(step.to(dtype), c).view(c, 1, 1)
        # Eigenvalues of a·M: a (κ_v (1 − cos πp/H) + κ_h (1 − cos πq/W)), shape (C, H, W).
        lam = a * (kappa[:, 0, None, None] * lam_h[:, None] + kappa[:, 1, None, None] * lam_w)
        x0 = x.to(dtype)
        spec = dh @ x0 @ dw.T
        y = dh.T @ (spec / (1.0 + lam).pow(n_steps)) @ dw
    return island.back(y - x0)


# ----------------------------------------------------------------------------- references
def diffusion_kernel_reference(tap_probs: torch.Tensor, step, h: int, w: int,
                               taps: str) -> torch.Tensor:
    """``δt·K`` (T x T, T = h·w row-major tokens, float64) of one group by explicit loops:
    ``δt K_{t, t+u} = a p_u`` for each offset ``u`` whose neighbour is inside the grid
    (outside neighbours are missing, E4-E5 on the 2-D grid).

    Args:
        tap_probs: (n_offsets,) weights ``p_u`` of :func:`stencil_offsets` ``(taps)``.
        step: the step ``a`` (a number or 0-d tensor).
    """
    a = torch.as_tensor(step).item()
    k = torch.zeros(h * w, h * w, dtype=torch.float64)
    for r in range(h):
        for c in range(w):
            for (i, j), p in zip(stencil_offsets(taps), tap_probs.tolist()):
                if 0 <= r + i < h and 0 <= c + j < w:
                    k[r * w + c, (r + i) * w + (c + j)] += a * p
    return k


def explicit_step_matrix_reference(tap_probs: torch.Tensor, step, h: int, w: int, taps: str,
                                   n_steps: int = 1) -> torch.Tensor:
    """``A^n`` with ``A = I + δt (K − diag(K 1))`` (E4, E8) from
    :func:`diffusion_kernel_reference`: the dense step matrix of :func:`grid_diffusion`."""
    k = diffusion_kernel_reference(tap_probs, step, h, w, taps)
    a = torch.eye(h * w, dtype=torch.float64) + k - torch.diag(k.sum(1))
    return torch.linalg.matrix_power(a, n_steps)


def path_laplacian_reference(n: int) -> torch.Tensor:
    """The n x n Laplacian of a path graph with missing-neighbour ends, edge by edge."""
    lap = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n - 1):
        lap[i, i] += 1
        lap[i + 1, i + 1] += 1
        lap[i, i + 1] -= 1
        lap[i + 1, i] -= 1
    return lap


def implicit_step_matrix_reference(kappa: torch.Tensor, step, h: int, w: int,
                                   n_steps: int = 1) -> torch.Tensor:
    """``((I + a M)^{-1})^n`` for ``M = (κ_v / 2) L_H ⊕ (κ_h / 2) L_W`` as a dense Kronecker
    sum and a dense inverse: the step matrix of :func:`grid_diffusion_implicit_dct` for one
    group (``kappa`` (2,), ``step`` a number or 0-d tensor)."""
    eye_h, eye_w = torch.eye(h, dtype=torch.float64), torch.eye(w, dtype=torch.float64)
    m = (kappa[0] / 2 * torch.kron(path_laplacian_reference(h), eye_w)
         + kappa[1] / 2 * torch.kron(eye_h, path_laplacian_reference(w)))
    return torch.linalg.matrix_power(
        torch.linalg.inv(torch.eye(h * w, dtype=torch.float64) + step * m), n_steps)


def _increment_reference(x: torch.Tensor, step_matrices: torch.Tensor) -> torch.Tensor:
    """``A_g x − x`` per channel group: x (B, C, H, W), step_matrices (G, T, T)."""
    b, c, h, w = x.shape
    xg = x.reshape(b, step_matrices.shape[0], -1, h * w)                 # (B, G, C/G, T)
    return (xg @ step_matrices.transpose(-1, -2) - xg).view(b, c, h, w)


def grid_diffusion_reference(x: torch.Tensor, tap_probs: torch.Tensor, step: torch.Tensor,
                             taps: str, n_steps: int = 1) -> torch.Tensor:
    """:func:`grid_diffusion`'s increment from the dense step matrices
    (:func:`explicit_step_matrix_reference`), float64.

    Args:
        x: (B, C, H, W); tap_probs: (G, n_offsets); step: (G,).
    """
    h, w = x.shape[-2:]
    mats = torch.stack([explicit_step_matrix_reference(p, a, h, w, taps, n_steps)
                        for p, a in zip(tap_probs, step)])
    return _increment_reference(x.double(), mats)


def grid_diffusion_implicit_reference(x: torch.Tensor, kappa: torch.Tensor, step: torch.Tensor,
                                      n_steps: int = 1) -> torch.Tensor:
    """:func:`grid_diffusion_implicit_dct`'s increment from dense backward-Euler step
    matrices (:func:`implicit_step_matrix_reference`), float64.

    Args:
        x: (B, C, H, W); kappa: (G, 2); step: (G,).
    """
    h, w = x.shape[-2:]
    mats = torch.stack([implicit_step_matrix_reference(kp, a, h, w, n_steps)
                        for kp, a in zip(kappa, step)])
    return _increment_reference(x.double(), mats)
