"""A ViTDet-style simple feature pyramid for isotropic backbones (e.g. :class:`InfViTPlain`).

mmdet ships its SimpleFPN only in ``projects/ViTDet`` (not in the pip package) and mmseg's
``Feature2Pyramid`` has no channel projection, so the package has its own.
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.model import BaseModule

from ...registry import MODELS
from ..layers import LayerNorm2d

SCALES = (4.0, 2.0, 1.0, 0.5)


def _rescale(scale: float, dim: int) -> Tuple[nn.Module, int]:
    """The resampling branch for one scale factor and its output channels."""
    if scale == 4.0:
        return nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 2, 2, 2), LayerNorm2d(dim // 2, eps=1e-6), nn.GELU(),
            nn.ConvTranspose2d(dim // 2, dim // 4, 2, 2)), dim // 4
    if scale == 2.0:
        return nn.ConvTranspose2d(dim, dim // 2, 2, 2), dim // 2
    if scale == 1.0:
        return nn.Identity(), dim
    # ceil_mode: an odd-sized map keeps its last row / column (ceil(H / 32) rows).
    return nn.MaxPool2d(2, 2, ceil_mode=True), dim


@MODELS.register_module()
class SimpleFeaturePyramid(BaseModule):
    """ViTDet's simple feature pyramid (Li et al., "Exploring Plain Vision Transformer
    Backbones for Object Detection", 2022): deconvolutions (x4, x2), identity and max-pool
    (/2) turn one stride-16 map into maps at strides 4 / 8 / 16 / 32.

    Each branch is ``x4``: deconv 2x2 (C -> C/2), LN, GELU, deconv 2x2 (-> C/4); ``x2``:
    deconv 2x2 (C -> C/2); ``x1``: identity; ``x0.5``: 2x2 max-pool.  With
    ``out_channels`` each is followed by ViTDet's 1x1 conv, LN, 3x3 conv, LN to that
    width.  A deconvolved map has ``4 * ceil(H / 16)`` rows, which equals ``ceil(H / 4)``
    when H is a multiple of 16 (mmdet / mmseg pad to 32); mmdet's FPN and mmseg's heads
    resize to the neighbouring level anyway.

    Args:
        in_channels: channels C of the backbone map(s) (divisible by 4).
        out_channels: channels of every output, or None to keep the branch widths
            (C/4, C/2, C, C), listed in ``self.out_channels``.
        scale_factors: subset (in any order) of 4, 2, 1, 0.5.
        in_index: which input map feeds every branch (ViTDet: the last, -1); None feeds
            input ``i`` to branch ``i`` (BEiT / mmseg ``Feature2Pyramid`` style, with the
            backbone returning one block per scale).
        init_cfg: mmengine init config.

    Forward: a tuple (or list) of NCHW maps -> a tuple of ``len(scale_factors)`` maps.
    """

    def __init__(self, in_channels: int, out_channels: Optional[int] = None,
                 scale_factors: Sequence[float] = SCALES, in_index: Optional[int] = -1,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        super().__init__(init_cfg=init_cfg)
        if not isinstance(in_channels, int) or in_channels < 4 or in_channels % 4:
            raise ValueError(f'in_channels must be a positive int divisible by 4, got '
                             f'{in_channels!r}')
        bad = [s for s in scale_factors if float(s) not in SCALES]
        if not scale_factors or bad:
            raise ValueError(f'scale_factors must be drawn from {SCALES}, got '
                             f'{tuple(scale_factors)!r}')
        self.scale_factors = tuple(float(s) for s in scale_factors)
        self.in_index = in_index
        branches, widths = [], []
        for s in self.scale_factors:
            branch, width = _rescale(s, in_channels)
            if out_channels is not None:
                branch = nn.Sequential(
                    branch, nn.Conv2d(width, out_channels, 1, bias=False),
                    LayerNorm2d(out_channels, eps=1e-6),
                    nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False),
                    LayerNorm2d(out_channels, eps=1e-6))
                width = out_channels
            branches.append(branch)
            widths.append(width)
        self.branches = nn.ModuleList(branches)
        self.out_channels = widths

    def forward(self, inputs: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, ...]:
        if torch.is_tensor(inputs):
            inputs = (inputs, )
        if self.in_index is None:
            if len(inputs) != len(self.branches):
                raise ValueError(f'in_index=None needs one input per scale factor '
                                 f'({len(self.branches)}), got {len(inputs)}')
            feats = list(inputs)
        else:
            feats = [inputs[self.in_index]] * len(self.branches)
        return tuple(branch(f) for branch, f in zip(self.branches, feats))
