"""Batch-independent predictions in OpenMMLab runners (``docs/batch_independence.md``)."""
from mmengine.hooks import Hook
from mmengine.logging import print_log

from ..models.layers.valid_region import enable_valid_region
from ..registry import HOOKS


@HOOKS.register_module()
class ValidRegionHook(Hook):
    """Let mmlinattn backbones ignore batch padding, in training, validation and testing.

    mmdet / mmseg pad a batch to its largest image.  This hook makes the model's data
    preprocessor attach each image's ``img_shape`` to the batch tensor
    (:func:`mmlinattn.models.layers.valid_region.enable_valid_region`); the backbone then
    zeroes the padding before every convolution and leaves it out of every global token
    mixer, so an image's features do not depend on what it is batched with.

    Config: ``custom_hooks = [dict(type='mmlinattn.ValidRegionHook')]``.
    """

    priority = 'VERY_HIGH'

    def before_run(self, runner) -> None:
        if not enable_valid_region(runner.model):
            print_log('ValidRegionHook: the model has no data_preprocessor; batch padding '
                      'is not masked', logger='current', level=30)
