"""mmseg's UperNet head and Semantic FPN's neck and head, each with its forward also written as
a :class:`~.stripes.RowMap` graph (:meth:`StripedForward.forward_rows`).

``decode_head=dict(type='mmlinattn.StripedUPerHead')``, ``neck=dict(type='mmlinattn.StripedFPN')``
and ``decode_head=dict(type='mmlinattn.StripedFPNHead')`` build mmseg's ``UPerHead``, ``FPN`` and
``FPNHead`` with that method added; their ``forward``, weights and training are mmseg's.  The
classes are made when the first one is built, so nothing here imports mmseg at import time.

Each ``forward_rows`` follows the plain forward of mmseg 1.x line by line: the coarse levels
(strides 8 to 32, a sixteenth of the pixels and less) are computed whole, as there; the finest
level, where UperNet concatenates four 512-channel maps and Semantic FPN sums four scale heads,
becomes a graph whose rows are computed on demand.
"""
from typing import List, Optional

import torch.nn.functional as F
from torch import Tensor

from ..mixins import lazy_attributes, mixed_class
from ..striped import conv_halo
from .stripes import Cat, Conv, Full, Resize, RowMap, Sum


class StripedForward:
    """The interface of a striped neck or decode head: its forward as a row graph."""

    def forward_rows(self, inputs: List[RowMap]):
        """What ``forward`` computes from the maps ``inputs``, as row maps (a neck: one per
        output level; a decode head: its logits), or None where this module's layout has no
        striped form (it then runs whole).  ``inputs`` may be emptied as the levels are
        used."""
        raise NotImplementedError


def _resize(x: Tensor, size, mode='bilinear', align_corners=None) -> Tensor:
    # mmseg's resize() is F.interpolate plus a warning
    return F.interpolate(x, size, None, mode, align_corners)


def _cls_seg(head, feats: RowMap) -> RowMap:
    # mmseg's cls_seg: dropout (if any), then conv_seg
    modules = [m for m in (head.dropout, head.conv_seg) if m is not None]
    return Conv(head.cls_seg, feats, conv_halo(head.conv_seg), modules)


class UPerHeadRows(StripedForward):
    """mmseg's ``UPerHead`` whose stride-4 part can run in row stripes."""

    def forward_rows(self, inputs: List[RowMap]) -> Optional[RowMap]:
        """``UPerHead.forward`` (PPM on the coarsest level, FPN top-down path, the four levels
        resized to the finest and fused by ``fpn_bottleneck``, then ``cls_seg``) with the
        finest level as stripes."""
        if self.input_transform != 'multiple_select' or len(self.in_index) < 2:
            return None
        levels = [inputs[i] for i in self.in_index]
        inputs.clear()
        n, ac = len(levels), self.align_corners
        laterals = [None] * n
        laterals[n - 1] = self.psp_forward([levels[n - 1].whole()])
        for i in range(n - 2, 0, -1):
            lat = self.lateral_convs[i](levels[i].whole())
            levels[i] = None
            laterals[i] = lat + _resize(laterals[i + 1], lat.shape[2:], 'bilinear', ac)
        size0 = (levels[0].height, levels[0].width)
        lat0 = Sum(Conv(self.lateral_convs[0], levels[0], conv_halo(self.lateral_convs[0])),
                   Resize(Full(laterals[1]), size0, 'bilinear', ac))
        levels.clear()
        outs = [Conv(self.fpn_convs[0], lat0, conv_halo(self.fpn_convs[0]))]
        for i in range(1, n - 1):
            outs.append(Resize(Full(self.fpn_convs[i](laterals[i])), size0, 'bilinear', ac))
        outs.append(Resize(Full(laterals[n - 1]), size0, 'bilinear', ac))
        feats = Conv(self.fpn_bottleneck, Cat(outs), conv_halo(self.fpn_bottleneck))
        return _cls_seg(self, feats)


class FPNRows(StripedForward):
    """mmseg's ``FPN`` neck whose finest output can run in row stripes."""

    def forward_rows(self, inputs: List[RowMap]) -> Optional[List[RowMap]]:
        """``FPN.forward`` with its finest output as stripes; None for the extra levels or a
        fixed ``scale_factor`` upsampling (not used by Semantic FPN)."""
        n = len(self.lateral_convs)
        up = dict(self.upsample_cfg)
        mode, ac = up.pop('mode', 'nearest'), up.pop('align_corners', None)
        if self.num_outs != n or self.start_level != 0 or len(inputs) != n or n < 2 or up:
            return None
        laterals = [None] * n
        laterals[n - 1] = self.lateral_convs[n - 1](inputs[n - 1].whole())
        for i in range(n - 2, 0, -1):
            lat = self.lateral_convs[i](inputs[i].whole())
            inputs[i] = None
            laterals[i] = lat + _resize(laterals[i + 1], lat.shape[2:], mode, ac)
        size0 = (inputs[0].height, inputs[0].width)
        lat0 = Sum(Conv(self.lateral_convs[0], inputs[0], conv_halo(self.lateral_convs[0])),
                   Resize(Full(laterals[1]), size0, mode, ac))
        inputs.clear()
        outs = [Conv(self.fpn_convs[0], lat0, conv_halo(self.fpn_convs[0]))]
        outs += [Full(self.fpn_convs[i](laterals[i])) for i in range(1, n)]
        return outs


class FPNHeadRows(StripedForward):
    """mmseg's ``FPNHead`` whose stride-4 sum and classifier can run in row stripes."""

    def forward_rows(self, inputs: List[RowMap]) -> Optional[RowMap]:
        """``FPNHead.forward``: each level's scale head (convolutions and 2x upsamplings) run
        whole on the coarse levels, the last upsampling of each and the sum at stride 4 as
        stripes, the finest level's scale head as stripes."""
        first = self.scale_heads[0]
        if self.input_transform != 'multiple_select' or \
                any(type(m).__name__ == 'Upsample' for m in first.modules()):
            return None
        levels = [inputs[i] for i in self.in_index]
        out = Conv(first, levels[0], conv_halo(first))
        terms = [out]
        for i in range(1, len(self.feature_strides)):
            modules = list(self.scale_heads[i])
            x = levels[i].whole()
            last = modules.pop() if type(modules[-1]).__name__ == 'Upsample' else None
            for m in modules:
                x = m(x)
            level = Full(x)
            if last is not None:
                size = last.size or [int(t * last.scale_factor) for t in x.shape[-2:]]
                level = Resize(level, size, last.mode, last.align_corners)
            terms.append(Resize(level, (out.height, out.width), 'bilinear', self.align_corners))
        return _cls_seg(self, Sum(*terms))


def striped_uper_head() -> type:
    """The class ``StripedUPerHead(UPerHeadRows, mmseg UPerHead)``."""
    return mixed_class(UPerHeadRows, 'mmseg.UPerHead', 'StripedUPerHead', __name__)


def striped_fpn() -> type:
    """The class ``StripedFPN(FPNRows, mmseg FPN)``."""
    return mixed_class(FPNRows, 'mmseg.FPN', 'StripedFPN', __name__)


def striped_fpn_head() -> type:
    """The class ``StripedFPNHead(FPNHeadRows, mmseg FPNHead)``."""
    return mixed_class(FPNHeadRows, 'mmseg.FPNHead', 'StripedFPNHead', __name__)


__getattr__ = lazy_attributes(__name__, StripedUPerHead=striped_uper_head,
                              StripedFPN=striped_fpn, StripedFPNHead=striped_fpn_head)
