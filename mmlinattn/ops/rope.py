"""Rotation of channel pairs, the arithmetic of rotary position embeddings (RoPE)."""
import torch


def rotate_pairs(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs ``(2j, 2j + 1)`` of ``x (..., N, d)`` by ``angles (N, d // 2)``:
    ``(x0 cos - x1 sin, x1 cos + x0 sin)``.  Computed in at least float32 (float64 stays
    float64); returned in ``x``'s dtype."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    pairs = x.to(dtype).unflatten(-1, (-1, 2))
    x0, x1 = pairs[..., 0], pairs[..., 1]
    cos, sin = angles.to(dtype).cos(), angles.to(dtype).sin()
    out = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return out.flatten(-2).to(x.dtype)
