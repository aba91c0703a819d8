"""Segmentors for mmseg, registered here without importing mmseg.

``model = dict(type='mmlinattn.WholeImageEncoderDecoder')`` in an mmseg config builds mmseg's
``EncoderDecoder`` with :class:`~.whole_image.WholeImageInference` in front of it; the class is
made when the first one is built, so ``import mmlinattn.models`` still works with torch and
mmengine alone.
"""
from mmlinattn.registry import MODELS


@MODELS.register_module(name='WholeImageEncoderDecoder')
def build_whole_image_encoder_decoder(**kwargs):
    """Build a ``WholeImageEncoderDecoder`` (mmseg needed from here on)."""
    from .whole_image import whole_image_encoder_decoder
    return whole_image_encoder_decoder()(**kwargs)
