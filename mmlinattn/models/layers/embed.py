"""Convolutional patch embeddings and down-samplers shared by the pyramids.

Every embedding maps an NCHW map of size (H, W) to ``(ceil(H / s), ceil(W / s))`` for its
stride ``s``: overlapping convolutions get padding ``k // 2`` (which gives the ceiling for odd
``k``), non-overlapping ones (``k == s``) pad the right/bottom border up to a multiple of ``s``
so no pixel is cropped.  Each takes the input's :class:`.token_grid.TokenGrid` and returns its
output together with the output's grid.
"""
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .norm import LayerNorm2d
from .token_grid import TokenGrid


def pad_to_multiple(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Zero-pad the bottom/right of an NCHW map so H and W are multiples of ``multiple``."""
    h, w = x.shape[-2:]
    ph, pw = (-h) % multiple, (-w) % multiple
    if ph or pw:
        x = F.pad(x, (0, pw, 0, ph))
    return x


class PatchConv(nn.Module):
    """Conv (+ optional norm / activation) with ceil-mode output size.

    Args:
        in_channels, out_channels: channel counts.
        kernel_size, stride: of the convolution; ``kernel_size == stride`` is a
            non-overlapping patchify (input padded to a multiple of ``stride``).
        norm: ``None``, ``'bn'`` (BatchNorm2d) or ``'ln'`` (channel LayerNorm).
        act: an activation module class or ``None``.
        bias: conv bias (defaults to ``norm != 'bn'``).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 norm: Optional[str] = None, act: Optional[type] = None,
                 bias: Optional[bool] = None, ln_eps: float = 1e-6):
        super().__init__()
        if norm not in (None, 'bn', 'ln'):
            raise ValueError(f"norm must be None, 'bn' or 'ln', got {norm!r}")
        self.stride = stride
        self.non_overlapping = kernel_size == stride
        padding = 0 if self.non_overlapping else kernel_size // 2
        if bias is None:
            bias = norm != 'bn'
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=bias)
        if norm == 'bn':
            self.norm = nn.BatchNorm2d(out_channels)
        elif norm == 'ln':
            self.norm = LayerNorm2d(out_channels, eps=ln_eps)
        else:
            self.norm = nn.Identity()
        self.act = act() if act is not None else nn.Identity()

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, TokenGrid]:
        """NCHW map on ``grid`` -> (output map, its grid)."""
        x = grid.zero_padding(x)  # batch padding reads as zeros, like the conv's own padding
        if self.non_overlapping:
            x = pad_to_multiple(x, self.stride)
        return self.act(self.norm(self.conv(x))), grid.downsample(self.stride)


class ConvStem(nn.Sequential):
    """A chain of :class:`PatchConv` units, e.g. SOFT's C33-BN-ReLU (strides 2, 1, 2).

    Args:
        channels: output channels of each unit; the first unit reads ``in_channels``.
        strides: stride of each unit.
        acts: activation class per unit (``None`` for none).
        kernel_size, norm, bias: of every unit (see :class:`PatchConv`).
    """

    def __init__(self, in_channels: int, channels: Sequence[int], strides: Sequence[int],
                 acts: Sequence[Optional[type]], kernel_size: int = 3, norm: str = 'bn',
                 bias: Optional[bool] = None):
        if not len(channels) == len(strides) == len(acts):
            raise ValueError('channels, strides and acts must have the same length')
        units, c_in = [], in_channels
        for c, s, a in zip(channels, strides, acts):
            units.append(PatchConv(c_in, c, kernel_size, s, norm=norm, act=a, bias=bias))
            c_in = c
        super().__init__(*units)

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, TokenGrid]:
        for unit in self:
            x, grid = unit(x, grid)
        return x, grid
