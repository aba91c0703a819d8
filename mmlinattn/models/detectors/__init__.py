"""Detectors for mmdet, registered here without importing mmdet.

``model = dict(type='mmlinattn.WholeImageRetinaNet')`` in an mmdet RetinaNet config builds
mmdet's ``RetinaNet`` with :class:`~.whole_image.WholeImageDetection` in front of it; the class
is made when the first one is built.
"""
from mmlinattn.registry import MODELS


@MODELS.register_module(name='WholeImageRetinaNet')
def build_whole_image_retinanet(**kwargs):
    """Build a ``WholeImageRetinaNet`` (mmdet needed from here on)."""
    from .whole_image import whole_image_retinanet
    return whole_image_retinanet()(**kwargs)
