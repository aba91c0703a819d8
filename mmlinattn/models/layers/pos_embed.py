"""Position encodings that follow the current grid size."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...ops.tracing import traced
from .token_grid import TokenGrid


def sincos_2d(dim: int, h: int, w: int, temperature: float = 10000.0,
              device=None, dtype=torch.float32) -> torch.Tensor:
    """Fixed 2-D sin-cos encoding on integer token indices, shape (1, dim, h, w).

    ``dim / 4`` channels each hold sin(row), cos(row), sin(col), cos(col) at geometric
    frequencies; computed for the given grid, so nothing depends on a training size.
    """
    row, col = sincos_axes(dim, h, w, temperature, device, dtype)
    return torch.cat([row.expand(-1, -1, h, w), col.expand(-1, -1, h, w)], dim=1)


def sincos_axes(dim: int, h: int, w: int, temperature: float = 10000.0, device=None,
                dtype=torch.float32) -> Tuple[torch.Tensor, torch.Tensor]:
    """The two halves of :func:`sincos_2d`, each depending on one axis only: the row part
    (1, dim / 2, h, 1) and the column part (1, dim / 2, 1, w) (computed in float64, then
    cast)."""
    if dim % 4:
        raise ValueError(f'sin-cos 2-D encoding needs dim divisible by 4, got {dim}')
    q = dim // 4
    omega = 1.0 / temperature ** (torch.arange(q, device=device, dtype=torch.float64) / q)
    ys = torch.arange(h, device=device, dtype=torch.float64)[:, None] * omega  # (h, q)
    xs = torch.arange(w, device=device, dtype=torch.float64)[:, None] * omega  # (w, q)
    row = torch.cat([ys.sin(), ys.cos()], dim=1).t()[None, :, :, None]
    col = torch.cat([xs.sin(), xs.cos()], dim=1).t()[None, :, None, :]
    return row.to(dtype), col.to(dtype)


class InterpolatedPosEmbed(nn.Module):
    """A learned absolute position embedding stored at a reference grid and resized
    (bicubic, like timm / mmpretrain ViTs) to the current grid on every forward.

    Args:
        dim: channels.
        grid: reference (h, w) at which the parameter is stored, e.g. 56x56 for stage 1
            of a 224-input model.
    """

    mode = 'bicubic'

    def __init__(self, dim: int, grid):
        super().__init__()
        self.grid = tuple(grid)
        self.weight = nn.Parameter(torch.zeros(1, dim, *self.grid))
        nn.init.trunc_normal_(self.weight, std=0.02)

    def resized(self, size) -> torch.Tensor:
        """The (1, C, h, w) embedding at grid ``size`` (``self.mode`` interpolation)."""
        return resize_pos_embed(self.weight, size, self.mode)

    def forward(self, x: torch.Tensor, grid: Optional[TokenGrid] = None,
                inplace: bool = False) -> torch.Tensor:
        """Add the embedding, resized to ``x``'s (H, W), to the NCHW map ``x`` on ``grid``
        (``inplace``: into ``x`` itself).

        In a padded batch (a padded ``grid``) each image gets the embedding resized to its
        own valid size, zero in the padding, so its position code does not depend on the
        batch."""
        if grid is None or not grid.padded:
            pe = self.resized(x.shape[-2:]).to(x.dtype)
            return x.add_(pe) if inplace else x + pe
        sizes = grid.valid_hw
        if len(sizes) != x.shape[0] or tuple(x.shape[-2:]) != grid.hw:
            raise ValueError(f'{grid!r}: a map of shape {tuple(x.shape)} is not on the grid')
        pe = x.new_zeros(x.shape[0], x.shape[1], *x.shape[-2:])
        for size in set(sizes):
            items = [i for i, s in enumerate(sizes) if s == size]
            pe[items, :, :size[0], :size[1]] = self.resized(size).to(x.dtype)
        return x.add_(pe) if inplace else x + pe


class BilinearPosEmbed(InterpolatedPosEmbed):
    """:class:`InterpolatedPosEmbed` resized bilinearly, as in the SOFT authors' code (the
    paper's Fig. 2, Lu et al., arXiv 2207.03341, shows a "P.E." without details)."""

    mode = 'bilinear'


def resize_pos_embed(weight: torch.Tensor, size, mode: str = 'bicubic') -> torch.Tensor:
    """Resize a (1, C, h, w) position embedding to ``size`` (interpolated in float32, float64
    stays float64; returned in ``weight``'s dtype); the forward pass and checkpoint loading
    share it."""
    # (traced: always resize -- the same values, see below -- since the test would fix the
    # graph to one size; at equal size bilinear / bicubic sample the original points)
    if not traced() and tuple(weight.shape[-2:]) == tuple(size):
        return weight
    dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
    return F.interpolate(weight.to(dtype), size=tuple(size), mode=mode,
                         align_corners=False).to(weight.dtype)
