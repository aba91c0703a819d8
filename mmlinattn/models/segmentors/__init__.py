"""Segmentors for mmseg, registered here without importing mmseg.

``model = dict(type='mmlinattn.WholeImageEncoderDecoder')`` in an mmseg config builds
:class:`~.whole_image.WholeImageEncoderDecoder`; its module (which subclasses mmseg's
``EncoderDecoder``) is imported when the first one is built, so ``import mmlinattn.models``
still works with torch and mmengine alone.
"""
from mmlinattn.registry import MODELS


@MODELS.register_module(name='WholeImageEncoderDecoder')
def build_whole_image_encoder_decoder(**kwargs):
    """Build :class:`~.whole_image.WholeImageEncoderDecoder` (mmseg needed from here on)."""
    from .whole_image import WholeImageEncoderDecoder
    return WholeImageEncoderDecoder(**kwargs)
