"""A parameter-free module that adds the 2-D sin-cos encoding of the current grid."""
from typing import Optional

import torch
import torch.nn as nn

from .pos_embed import sincos_axes
from .token_grid import TokenGrid


class SinCosPosEmbed2d(nn.Module):
    """Add :func:`~.pos_embed.sincos_2d` for the input's own (H, W) to an NCHW map.

    Nothing depends on a training size: the encoding is recomputed on integer token indices
    for every input, so no interpolation is ever needed.

    Args:
        dim: channels, divisible by 4.
        temperature: base of the geometric frequencies.
    """

    def __init__(self, dim: int, temperature: float = 10000.0):
        super().__init__()
        if dim % 4:
            raise ValueError(f'SinCosPosEmbed2d: dim must be divisible by 4, got {dim}')
        self.dim = dim
        self.temperature = temperature

    def forward(self, x: torch.Tensor, grid: Optional[TokenGrid] = None,
                inplace: bool = False) -> torch.Tensor:
        """Add the encoding of ``x``'s whole (H, W) (``grid`` is not read: the encoding of
        a token depends only on its row and column, not on the padding); ``inplace``: into
        ``x`` itself."""
        c, h, w = x.shape[1:]
        if c != self.dim:
            raise ValueError(f'SinCosPosEmbed2d was built for {self.dim} channels, got {c}')
        row, col = sincos_axes(c, h, w, self.temperature, device=x.device, dtype=x.dtype)
        # each half plus its one-axis encoding: the (C, H, W) table is never built
        if inplace:
            x[:, :c // 2].add_(row)
            x[:, c // 2:].add_(col)
            return x
        return torch.cat([x[:, :c // 2] + row, x[:, c // 2:] + col], dim=1)

    def extra_repr(self) -> str:
        return f'dim={self.dim}, temperature={self.temperature}'
