"""Rotation of channel pairs, the arithmetic of rotary position embeddings (RoPE)."""
import torch

from .precision import Float32Island


def rotate_pairs(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs ``(2j, 2j + 1)`` of ``x (..., N, d)`` by ``angles (N, d // 2)``:
    ``(x0 cos - x1 sin, x1 cos + x0 sin)``.  Computed in a float32 island (float64 stays
    float64); returned in ``x``'s dtype."""
    with Float32Island(x) as island:
        xf = island.cast(x)
        pairs = xf.reshape(*xf.shape[:-1], -1, 2)  # not unflatten: ONNX opset 11 has no symbol
        x0, x1 = pairs[..., 0], pairs[..., 1]
        angles = island.cast(angles)
        cos, sin = angles.cos(), angles.sin()
        out = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return island.back(out.flatten(-2))
