"""A detector, segmentor or backbone as a plain tensor function for export.

``TensorGraph(model)(x)`` takes the pre-processing-normalised batch ``x`` (what the
data preprocessor hands the model) and returns a flat tuple of tensors:

* backbone: its feature maps;
* mmdet one-stage detector (RetinaNet): per level the class scores, then per level the
  box deltas (``model._forward``, mmdet's ``mode='tensor'``); box decoding and NMS stay
  in Python (``bbox_head.predict_by_feat``, :class:`mmlinattn.deployment.DeployedModel`);
* mmdet two-stage detector (Faster / Mask R-CNN): the FPN features, then per level the
  RPN class scores, then per level the RPN box deltas; proposals (NMS) are picked in
  Python and the RoI stages are graphs of their own (:mod:`mmlinattn.deployment.roi_graph`);
* mmseg encoder-decoder (UperNet, Semantic FPN): the decoder's segmentation logits at
  its output stride, resized to the input in Python.

Building one swaps the model's non-global ``nn.AdaptiveAvgPool2d`` (UperNet's pyramid
pooling) for an equal form that exports with a symbolic size
(:mod:`mmlinattn.deployment.adaptive_pool`), in place.
"""
from typing import List, Tuple

import torch
import torch.nn as nn

from .adaptive_pool import make_pools_exportable


def flatten_outputs(out) -> Tuple[torch.Tensor, ...]:
    """Nested tuples / lists of tensors -> one flat tuple, depth first."""
    if isinstance(out, torch.Tensor):
        return (out, )
    flat: List[torch.Tensor] = []
    for item in out:
        flat.extend(flatten_outputs(item))
    return tuple(flat)


#: The RoI stages a two-stage detector exports as graphs of their own
#: (:mod:`mmlinattn.deployment.roi_graph`; files beside ``model.onnx``), by head.
ROI_GRAPHS = ('bbox', 'mask')


def check_two_stage(model: nn.Module) -> None:
    """Refuse what the RoI graphs do not reproduce (cascades, other RoI layers), naming
    the alternative."""
    roi_head = getattr(model, 'roi_head', None)
    name = type(model).__name__
    if type(roi_head).__name__ != 'StandardRoIHead' or roi_head.with_shared_head:
        raise ValueError(f'{name}: only the StandardRoIHead (without a shared head) of '
                         f'Faster / Mask R-CNN is exported, not {type(roi_head).__name__}; '
                         'export the backbone (--backbone-only)')
    if getattr(model, 'rpn_head', None) is None:
        raise ValueError(f'{name}: a two-stage detector without an RPN takes its proposals '
                         'from the data; export the backbone (--backbone-only)')
    for head in ROI_GRAPHS:
        extractor = getattr(roi_head, f'{head}_roi_extractor', None)
        if extractor is None:
            continue
        for layer in extractor.roi_layers:
            if (type(layer).__name__ != 'RoIAlign' or layer.pool_mode != 'avg'
                    or not layer.aligned):
                raise ValueError(
                    f'{name}: the {head} RoI layer must be RoIAlign(pool_mode="avg", '
                    f'aligned=True) to map onto ONNX RoiAlign, got {layer!r}; export the '
                    'backbone (--backbone-only)')


def kind_of(model: nn.Module) -> str:
    """'backbone', 'detector' (one-stage), 'two_stage' (Faster / Mask R-CNN) or
    'segmentor' (ValueError for anything else)."""
    names = {cls.__name__ for cls in type(model).__mro__}
    if 'BaseSegmentor' in names:
        return 'segmentor'
    if 'TwoStageDetector' in names:
        check_two_stage(model)
        return 'two_stage'
    if 'SingleStageDetector' in names:
        return 'detector'
    if 'BackboneBase' in names or hasattr(model, 'out_indices'):
        return 'backbone'
    raise ValueError(f'{type(model).__name__} is neither an mmlinattn backbone, an mmdet '
                     'one- or two-stage detector nor an mmseg segmentor; nothing to export')


class TensorGraph(nn.Module):
    """The tensor-in, tensors-out view of ``model`` that ONNX export traces."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.kind = kind_of(model)
        make_pools_exportable(model)
        self.model = model

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        if self.kind == 'backbone':
            return flatten_outputs(self.model(x))
        if self.kind == 'two_stage':
            feats = self.model.extract_feat(x)
            return (*feats, *flatten_outputs(self.model.rpn_head(feats)))
        if self.kind == 'segmentor':
            return (self.model._forward(x, None), )
        return flatten_outputs(self.model._forward(x))
