"""2-D axial rotary position embedding (RoPE) computed for the current grid size."""
import torch

from ...ops.rope import rotate_pairs


def rope_2d_angles(h: int, w: int, head_dim: int, theta: float = 10000.0,
                   device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rotation angles ``(h * w, head_dim // 2)`` for a row-major ``h x w`` grid, in
    ``dtype`` (float32 by default; float64 for float64 models).

    Channel pairs ``(2j, 2j + 1)`` rotate by ``row * f_j`` for the first ``head_dim / 4``
    pairs and by ``col * f_j`` for the rest, with ``f_j = theta ** -linspace(0, 1,
    head_dim / 4)``.  Nothing depends on a training size, so any resolution works.
    """
    if head_dim % 4:
        raise ValueError(f'2-D RoPE needs head_dim divisible by 4, got {head_dim}')
    q = head_dim // 4
    freqs = theta ** -torch.linspace(0, 1, q, device=device, dtype=dtype)
    rows = torch.arange(h, device=device, dtype=dtype)[:, None] * freqs  # (h, q)
    cols = torch.arange(w, device=device, dtype=dtype)[:, None] * freqs  # (w, q)
    return torch.cat([rows[:, None, :].expand(h, w, q), cols[None, :, :].expand(h, w, q)],
                     dim=-1).reshape(h * w, 2 * q)


def apply_rope(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs of ``x (..., N, d)`` by ``angles (N, d // 2)``; same dtype out."""
    return rotate_pairs(x, angles)
