"""The stride-4 part of mmseg's UperNet head and of Semantic FPN (FPN neck + FPN head) as
:class:`~.stripes.RowMap` graphs.

Each function follows the plain forward of the mmseg module line by line (``UPerHead.forward``,
``FPN.forward``, ``FPNHead.forward`` of mmseg 1.x): the coarse levels (strides 8 to 32, a
sixteenth of the pixels and less) are computed whole, as there; the finest level, where UperNet
concatenates four 512-channel maps and Semantic FPN sums four scale heads, becomes a graph whose
rows are computed on demand.  The modules are read by their attributes, so no mmseg import is
needed here; a head laid out otherwise returns ``None`` and the caller runs it whole.
"""
from typing import List, Optional

import torch.nn.functional as F
from torch import Tensor

from ..striped import conv_halo
from .stripes import Cat, Conv, Full, Resize, RowMap, Sum


def _resize(x: Tensor, size, mode='bilinear', align_corners=None) -> Tensor:
    # mmseg's resize() is F.interpolate plus a warning
    return F.interpolate(x, size, None, mode, align_corners)


def _cls_seg(head, feats: RowMap) -> RowMap:
    # mmseg's cls_seg: dropout (if any), then conv_seg
    modules = [m for m in (head.dropout, head.conv_seg) if m is not None]
    return Conv(head.cls_seg, feats, conv_halo(head.conv_seg), modules)


def _selected(head, inputs: List) -> Optional[List]:
    if getattr(head, 'input_transform', None) != 'multiple_select':
        return None
    return [inputs[i] for i in head.in_index]


def uper_head_graph(head, inputs: List[Tensor]) -> Optional[RowMap]:
    """mmseg ``UPerHead.forward`` (PPM on the coarsest level, FPN top-down path, the four levels
    resized to the finest and fused by ``fpn_bottleneck``, then ``cls_seg``) with the finest level
    as stripes.  ``inputs`` is emptied as the levels are used."""
    levels = _selected(head, inputs)
    if levels is None or len(levels) < 2:
        return None
    inputs.clear()
    n, ac = len(levels), head.align_corners
    laterals = [None] * n
    laterals[n - 1] = head.psp_forward(levels)
    for i in range(n - 2, 0, -1):
        lat = head.lateral_convs[i](levels[i])
        levels[i] = None
        laterals[i] = lat + _resize(laterals[i + 1], lat.shape[2:], 'bilinear', ac)
    size0 = levels[0].shape[2:]
    lat0 = Sum(Conv(head.lateral_convs[0], Full(levels[0]), conv_halo(head.lateral_convs[0])),
               Resize(Full(laterals[1]), size0, 'bilinear', ac))
    levels.clear()
    outs = [Conv(head.fpn_convs[0], lat0, conv_halo(head.fpn_convs[0]))]
    for i in range(1, n - 1):
        outs.append(Resize(Full(head.fpn_convs[i](laterals[i])), size0, 'bilinear', ac))
    outs.append(Resize(Full(laterals[n - 1]), size0, 'bilinear', ac))
    feats = Conv(head.fpn_bottleneck, Cat(outs), conv_halo(head.fpn_bottleneck))
    return _cls_seg(head, feats)


def fpn_neck_graphs(neck, inputs: List[Tensor]) -> Optional[List[RowMap]]:
    """mmseg ``FPN.forward`` with its finest output as stripes; ``None`` for the extra levels or
    a fixed ``scale_factor`` upsampling (not used by Semantic FPN)."""
    n = len(neck.lateral_convs)
    if neck.num_outs != n or neck.start_level != 0 or len(inputs) != n or n < 2 or \
            'scale_factor' in neck.upsample_cfg:
        return None
    up = dict(neck.upsample_cfg)
    mode, ac = up.pop('mode', 'nearest'), up.pop('align_corners', None)
    if up:
        return None
    laterals = [None] * n
    laterals[n - 1] = neck.lateral_convs[n - 1](inputs[n - 1])
    for i in range(n - 2, 0, -1):
        lat = neck.lateral_convs[i](inputs[i])
        inputs[i] = None
        laterals[i] = lat + _resize(laterals[i + 1], lat.shape[2:], mode, ac)
    size0 = inputs[0].shape[2:]
    lat0 = Sum(Conv(neck.lateral_convs[0], Full(inputs[0]), conv_halo(neck.lateral_convs[0])),
               Resize(Full(laterals[1]), size0, mode, ac))
    inputs.clear()
    outs = [Conv(neck.fpn_convs[0], lat0, conv_halo(neck.fpn_convs[0]))]
    outs += [Full(neck.fpn_convs[i](laterals[i])) for i in range(1, n)]
    return outs


def fpn_head_graph(head, inputs: List[RowMap]) -> Optional[RowMap]:
    """mmseg ``FPNHead.forward``: each level's scale head (convolutions and 2x upsamplings) run
    whole on the coarse levels, the last upsampling of each and the sum at stride 4 as
    stripes, the finest level's scale head as stripes."""
    levels = _selected(head, inputs)
    if levels is None:
        return None
    first = head.scale_heads[0]
    if any(type(m).__name__ == 'Upsample' for m in first.modules()):
        return None
    out = Conv(first, levels[0], conv_halo(first))
    terms = [out]
    for i in range(1, len(head.feature_strides)):
        modules = list(head.scale_heads[i])
        x = levels[i].whole()
        last = modules.pop() if type(modules[-1]).__name__ == 'Upsample' else None
        for m in modules:
            x = m(x)
        level = Full(x)
        if last is not None:
            size = last.size or [int(t * last.scale_factor) for t in x.shape[-2:]]
            level = Resize(level, size, last.mode, last.align_corners)
        terms.append(Resize(level, (out.height, out.width), 'bilinear', head.align_corners))
    return _cls_seg(head, Sum(*terms))
