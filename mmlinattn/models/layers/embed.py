"""Convolutional patch embeddings and down-samplers shared by the pyramids.

Every embedding maps an NCHW map of size (H, W) to ``(ceil(H / s), ceil(W / s))`` for its
stride ``s``: overlapping convolutions get padding ``k // 2`` (which gives the ceiling for odd
``k``), non-overlapping ones (``k == s``) pad the right/bottom border up to a multiple of ``s``
so no pixel is cropped.  Each takes the input's :class:`.token_grid.TokenGrid` and returns its
output together with the output's grid.
"""
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...kernels import memory, stage_forms
from ...ops.tracing import traced
from .norm import build_act, build_norm, norm_cancels_bias
from .token_grid import TokenGrid


def pad_to_multiple(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Zero-pad the bottom/right of an NCHW map so H and W are multiples of ``multiple``."""
    h, w = x.shape[-2:]
    # the padding up to the next multiple, by floor division only: traced, ``(-h) % m``
    # becomes a symbolic Python-mod that AOTAutograd's index analysis cannot handle
    ph = (h + multiple - 1) // multiple * multiple - h
    pw = (w + multiple - 1) // multiple * multiple - w
    # traced (torch.compile / export): pad unconditionally, a zero pad is free and the
    # branch would fix the graph to sizes that are (or are not) multiples
    if traced() or ph or pw:
        x = F.pad(x, (0, pw, 0, ph))
    return x


class PatchConv(nn.Module):
    """Conv (+ optional norm / activation) with ceil-mode output size.

    Args:
        in_channels, out_channels: channel counts.
        kernel_size, stride: of the convolution; ``kernel_size == stride`` is a
            non-overlapping patchify (input padded to a multiple of ``stride``).
        norm_cfg: the norm after the conv (:func:`.norm.build_norm`, e.g. ``dict(type='BN')``
            or ``dict(type='LN2d', eps=1e-6)``), or None.
        act_cfg: the activation after the norm (:func:`.norm.build_act`), or None.
        bias: conv bias; ``'auto'``: none before a batch norm, which cancels it.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 norm_cfg: Optional[dict] = None, act_cfg: Optional[dict] = None,
                 bias: Union[bool, str] = 'auto'):
        super().__init__()
        self.stride = stride
        self.non_overlapping = kernel_size == stride
        padding = 0 if self.non_overlapping else kernel_size // 2
        if bias == 'auto':
            bias = not norm_cancels_bias(norm_cfg)
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=bias)
        self.norm = build_norm(norm_cfg, out_channels) if norm_cfg is not None else nn.Identity()
        self.act = build_act(act_cfg)

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, TokenGrid]:
        """NCHW map on ``grid`` -> (output map, its grid); on a large map conv, norm and act
        in row stripes."""
        return stage_forms.run_stem((self, ), x, grid, self.whole)

    def whole(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, TokenGrid]:
        """:meth:`forward` on the whole map."""
        x = self.act(self.norm(self.convolve(x, grid)))
        return x, grid.downsample(self.stride, hw=x.shape[-2:])

    def convolve(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """The conv alone (with the padding it needs)."""
        x = grid.zero_padding(x)  # batch padding reads as zeros, like the conv's own padding
        if self.non_overlapping:
            x = pad_to_multiple(x, self.stride)
        return self.conv(x)


class ConvStem(nn.Sequential):
    """A chain of :class:`PatchConv` units, e.g. SOFT's C33-BN-ReLU (strides 2, 1, 2).

    Args:
        channels: output channels of each unit; the first unit reads ``in_channels``.
        strides: stride of each unit.
        act_cfgs: activation config per unit (``None`` for none).
        kernel_size, norm_cfg, bias: of every unit (see :class:`PatchConv`).
        recompute_act: in eager training, recompute each activation that feeds the next
            unit's conv in the backward instead of keeping its output (that conv's input):
            one full-resolution map fewer per unit for activations that keep their input
            anyway (GELU, SiLU; not ReLU, which keeps its output).  The conv itself is not
            recomputed (the checkpoint stops once its input is rebuilt).
    """

    def __init__(self, in_channels: int, channels: Sequence[int], strides: Sequence[int],
                 act_cfgs: Sequence[Optional[dict]], kernel_size: int = 3,
                 norm_cfg: Optional[dict] = None, bias: Union[bool, str] = 'auto',
                 recompute_act: bool = False):
        if not len(channels) == len(strides) == len(act_cfgs):
            raise ValueError('channels, strides and act_cfgs must have the same length')
        units, c_in = [], in_channels
        for c, s, a in zip(channels, strides, act_cfgs):
            units.append(PatchConv(c_in, c, kernel_size, s, norm_cfg, a, bias))
            c_in = c
        super().__init__(*units)
        self.recompute_act = recompute_act

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, TokenGrid]:
        """NCHW map on ``grid`` -> (output map, its grid); on a large image the
        full-resolution maps in row stripes."""
        return stage_forms.run_stem(self, x, grid, self.chain)

    def chain(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, TokenGrid]:
        """The units one after the other on the whole map (``recompute_act``: in training
        each activation recomputed in the backward, :meth:`recomputed_chain`)."""
        if self.recompute_act:
            return memory.recompute_stretch(self, self.units, self.recomputed_chain, x, grid)
        return self.units(x, grid)

    def units(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, TokenGrid]:
        for unit in self:
            x, grid = unit(x, grid)
        return x, grid

    def recomputed_chain(self, x: torch.Tensor, grid: TokenGrid
                         ) -> Tuple[torch.Tensor, TokenGrid]:
        """:meth:`units` with each activation but the last applied again in the backward
        together with the next conv, so that only the convs' outputs are kept."""
        act = None  # the previous unit's activation, applied with this unit's conv
        for unit in self:
            if act is None:
                x = unit.convolve(x, grid)
            else:
                x = memory.recompute_in_backward(
                    lambda t, act=act, unit=unit, grid=grid: unit.convolve(act(t), grid), x)
            x = unit.norm(x)
            act = unit.act
            grid = grid.downsample(unit.stride, hw=x.shape[-2:])
        return act(x), grid


#: the backbones' ``stem`` argument: their own patch embedding, or :func:`early_conv_stem`
STEMS = ('patch', 'conv')


def early_conv_stem(in_channels: int, out_channels: int) -> ConvStem:
    """A stride-4 convolutional stem in place of a patchify one, after T. Xiao et al.,
    "Early Convolutions Help Transformers See Better" (NeurIPS 2021, arXiv:2106.14881),
    who show that 3x3 convs with BN and ReLU make a transformer optimise faster and less
    sensitively to the learning rate.  The form is SOFT++'s stem: strides 2, 1, 2, half the
    output width inside (at least 16 channels), the last conv with BN only."""
    hid = max(out_channels // 2, 16)
    relu = dict(type='ReLU')
    return ConvStem(in_channels, (hid, hid, out_channels), (2, 1, 2), (relu, relu, None),
                    norm_cfg=dict(type='BN'))
