"""Segmentors and striped heads for mmseg, registered here without importing mmseg.

``model = dict(type='mmlinattn.WholeImageEncoderDecoder')`` in an mmseg config builds mmseg's
``EncoderDecoder`` with :class:`~.whole_image.WholeImageInference` in front of it;
``decode_head=dict(type='mmlinattn.StripedUPerHead')`` (or ``StripedFPNHead``, with
``neck=dict(type='mmlinattn.StripedFPN')``) chooses the head whose stride-4 part that
segmentor computes in row stripes (:mod:`.heads`).  Each class is made when the first one is
built, so ``import mmlinattn.models`` still works with torch and mmengine alone.
"""
from mmlinattn.registry import MODELS

from ..mixins import register_lazy
from .heads import striped_fpn, striped_fpn_head, striped_uper_head
from .whole_image import whole_image_encoder_decoder

register_lazy(MODELS, WholeImageEncoderDecoder=whole_image_encoder_decoder,
              StripedUPerHead=striped_uper_head, StripedFPNHead=striped_fpn_head,
              StripedFPN=striped_fpn)
