"""Batch-independent predictions in OpenMMLab runners (``docs/advanced/batch_independence.md``).

The hand-off from mmengine's data preprocessor to an mmlinattn backbone: a forward hook on the
preprocessor reads ``img_shape`` from each data sample and records the sizes on the batch
tensor it returns (:data:`~mmlinattn.models.layers.token_grid.IMAGE_SIZES_ATTR`).  The
backbone's forward reads them from exactly that tensor object and builds the input's
:class:`~mmlinattn.models.layers.token_grid.TokenGrid`; nothing below it sees the attribute.
"""
from typing import Optional, Sequence, Tuple

import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log

from ..models.layers.token_grid import IMAGE_SIZES_ATTR
from ..registry import HOOKS

Size = Tuple[int, int]

#: set on a data preprocessor once the hook below is registered (idempotence)
_ENABLED_FLAG = '_mmlinattn_valid_region'


def attach_image_sizes(inputs: torch.Tensor, sizes: Sequence[Size]) -> torch.Tensor:
    """Record per-image valid sizes on a batch tensor (read by the backbone's forward)."""
    setattr(inputs, IMAGE_SIZES_ATTR, tuple((int(h), int(w)) for h, w in sizes))
    return inputs


def _img_shape(sample) -> Optional[Size]:
    meta = getattr(sample, 'metainfo', sample)
    shape = meta.get('img_shape') if hasattr(meta, 'get') else None
    if shape is None or len(shape) < 2:
        return None
    return int(shape[0]), int(shape[1])


def _attach_from_samples(module, args, output):
    """Forward hook of a data preprocessor: ``img_shape`` of each data sample -> inputs."""
    if not isinstance(output, dict):
        return output
    inputs, samples = output.get('inputs'), output.get('data_samples')
    if not torch.is_tensor(inputs) or inputs.dim() != 4 or not samples:
        return output
    shapes = [_img_shape(s) for s in samples]
    if len(shapes) != inputs.shape[0] or any(s is None for s in shapes):
        return output
    big_h, big_w = inputs.shape[-2:]
    attach_image_sizes(inputs, [(min(h, big_h), min(w, big_w)) for h, w in shapes])
    return output


def enable_valid_region(model: torch.nn.Module) -> bool:
    """Make ``model``'s data preprocessor attach each image's ``img_shape`` to the batch
    tensor, so an mmlinattn backbone inside masks the padding.  Idempotent.

    Works for any OpenMMLab model whose ``data_preprocessor`` returns ``dict(inputs=...,
    data_samples=...)`` with ``img_shape`` in the samples' metainfo (mmdet's
    ``DetDataPreprocessor``, mmseg's ``SegDataPreProcessor``).  A wrapped model (DDP) is
    unwrapped through ``.module``.  Returns False when there is no data preprocessor.
    """
    model = getattr(model, 'module', model)
    pre = getattr(model, 'data_preprocessor', None)
    if not isinstance(pre, torch.nn.Module):
        return False
    if not getattr(pre, _ENABLED_FLAG, False):
        pre.register_forward_hook(_attach_from_samples)
        setattr(pre, _ENABLED_FLAG, True)
    return True


@HOOKS.register_module()
class ValidRegionHook(Hook):
    """Let mmlinattn backbones ignore batch padding, in training, validation and testing.

    mmdet / mmseg pad a batch to its largest image.  This hook makes the model's data
    preprocessor attach each image's ``img_shape`` to the batch tensor
    (:func:`enable_valid_region`); the backbone then zeroes the padding before every
    convolution and leaves it out of every global token mixer, so an image's features do not
    depend on what it is batched with.

    Config: ``custom_hooks = [dict(type='mmlinattn.ValidRegionHook')]``.
    """

    priority = 'VERY_HIGH'

    def before_run(self, runner) -> None:
        if not enable_valid_region(runner.model):
            print_log('ValidRegionHook: the model has no data_preprocessor; batch padding '
                      'is not masked', logger='current', level=30)
