"""2-D axial rotary position embedding (RoPE) computed for the current grid size."""
import torch


def rope_2d_angles(h: int, w: int, head_dim: int, theta: float = 10000.0,
                   device=None) -> torch.Tensor:
    """Rotation angles ``(h * w, head_dim // 2)`` for a row-major ``h x w`` grid (float32).

    Channel pairs ``(2j, 2j + 1)`` rotate by ``row * f_j`` for the first ``head_dim / 4``
    pairs and by ``col * f_j`` for the rest, with ``f_j = theta ** -linspace(0, 1,
    head_dim / 4)``.  Nothing depends on a training size, so any resolution works.
    """
    if head_dim % 4:
        raise ValueError(f'2-D RoPE needs head_dim divisible by 4, got {head_dim}')
    q = head_dim // 4
    freqs = theta ** -torch.linspace(0, 1, q, device=device, dtype=torch.float32)
    rows = torch.arange(h, device=device, dtype=torch.float32)[:, None] * freqs  # (h, q)
    cols = torch.arange(w, device=device, dtype=torch.float32)[:, None] * freqs  # (w, q)
    return torch.cat([rows[:, None, :].expand(h, w, q), cols[None, :, :].expand(h, w, q)],
                     dim=-1).reshape(h * w, 2 * q)


def apply_rope(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs of ``x (..., N, d)`` by ``angles (N, d // 2)``; same dtype out."""
    pairs = x.float().unflatten(-1, (-1, 2))
    x0, x1 = pairs[..., 0], pairs[..., 1]
    cos, sin = angles.cos(), angles.sin()
    out = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return out.flatten(-2).to(x.dtype)
