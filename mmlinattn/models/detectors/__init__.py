"""Striped heads for mmdet, registered here without importing mmdet.

``bbox_head=dict(type='mmlinattn.StripedRetinaHead')`` in an mmdet RetinaNet config builds
mmdet's ``RetinaHead`` with :class:`~.heads.RetinaHeadStripes` in front of it: its inference
runs in row stripes.  The class is made when the first one is built.
"""
from mmlinattn.registry import MODELS

from ..mixins import register_lazy
from .heads import striped_retina_head

register_lazy(MODELS, StripedRetinaHead=striped_retina_head)


@MODELS.register_module(name='WholeImageRetinaNet')
def whole_image_retinanet_moved(**kwargs):
    """The former detector type: says what replaced it."""
    raise ValueError(
        "mmlinattn.WholeImageRetinaNet is no more: mmdet's RetinaNet with the striped head does "
        "its work. In the config, keep the detector's type and set "
        "model = dict(bbox_head=dict(type='mmlinattn.StripedRetinaHead')); test_cfg.stripe_rows "
        'is read as before (docs/user_guides/whole_image.md)')
