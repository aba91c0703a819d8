"""An exported graph behind mmengine's model interface, so that the stock test loop,
``CocoMetric`` and ``IoUMetric`` evaluate it (``tools/test.py CONFIG model.onnx
--backend onnxruntime|openvino``).

The PyTorch model built from the config is kept for what stays outside the graph: its
data preprocessor (normalise, pad) before, and its head's post-processing after -- for
a one-stage detector ``bbox_head.predict_by_feat`` (box decoding, score threshold, NMS),
for a two-stage detector the RPN's ``predict_by_feat`` (proposals, NMS) and the RoI head's
``predict`` with its two tensor steps (``_bbox_forward``, ``_mask_forward``) run by the RoI
graphs beside the image graph (:mod:`mmlinattn.deployment.roi_graph`), for a segmentor the
resize to the image and ``postprocess_result``.  Its weights are not used: every learned
tensor comes from the graphs.
"""
import copy
import os.path as osp
from typing import List

import torch
import torch.nn.functional as F
from mmengine.model import BaseModel

from .roi_graph import roi_graph_path, roi_heads
from .runtimes import load_runtime
from .tensor_graph import kind_of


class DeployedModel(BaseModel):
    """``model``'s pre- and post-processing around the graph in ``path`` run by
    ``runtime`` (see the module docstring).  ``static_shapes`` (OpenVINO): the image graph
    is compiled per input size (:func:`.runtimes.load_runtime`); RoI graphs, whose RoI count
    changes with every image, stay dynamic.  ``precision`` (OpenVINO): ``'f32'`` or
    ``'bf16'`` for every graph (:func:`.runtimes.load_runtime`)."""

    def __init__(self, model: torch.nn.Module, path: str, runtime: str = 'onnxruntime',
                 static_shapes: bool = False, precision: str = 'f32'):
        self.kind = kind_of(model)
        if self.kind == 'backbone':
            raise ValueError(f'{path}: a backbone alone has no metric to evaluate; export '
                             'the whole detector or segmentor (without --backbone-only)')
        super().__init__(data_preprocessor=model.data_preprocessor)
        self.path, self.runtime, self.precision = path, runtime, precision
        self.run = load_runtime(path, runtime, static_shapes=static_shapes,
                                precision=precision)
        if self.kind == 'two_stage':
            model = self._route_roi_steps(copy.deepcopy(model))
        self.head_model = [model]  # a list: not a submodule, its weights are not ours

    def _route_roi_steps(self, model: torch.nn.Module) -> torch.nn.Module:
        """Make the RoI head's tensor steps run the RoI graphs (on a copy of ``model``:
        the caller's model is left as it was); everything around them stays mmdet's."""
        roi_head = model.roi_head
        paths = {head: roi_graph_path(self.path, head) for head in roi_heads(model)}
        missing = [p for p in paths.values() if not osp.isfile(p)]
        if missing:
            raise FileNotFoundError(
                f'{self.path} is the image graph of a two-stage detector, but its RoI '
                f'graphs {missing} are not beside it; export the model with '
                'tools/deployment/pytorch2onnx.py, which writes all of them')
        runs = {head: load_runtime(p, self.runtime, precision=self.precision)
                for head, p in paths.items()}

        def step(head, feats, rois):
            extractor = getattr(roi_head, f'{head}_roi_extractor')
            outs = runs[head](*feats[:extractor.num_inputs], rois)
            return [torch.from_numpy(o) for o in outs]

        def bbox_forward(x, rois):
            cls_score, bbox_pred = step('bbox', x, rois)
            return dict(cls_score=cls_score, bbox_pred=bbox_pred, bbox_feats=None)

        def mask_forward(x, rois=None, pos_inds=None, bbox_feats=None):
            return dict(mask_preds=step('mask', x, rois)[0], mask_feats=None)

        roi_head._bbox_forward = bbox_forward
        if 'mask' in runs:
            roi_head._mask_forward = mask_forward
        return model

    def forward(self, inputs, data_samples=None, mode='predict'):
        if mode != 'predict':
            raise ValueError(f'a deployed model only predicts (mode={mode!r})')
        outs = [torch.from_numpy(o) for o in self.run(self._unpadded(inputs, data_samples))]
        if self.kind == 'detector':
            return self._detections(outs, data_samples)
        if self.kind == 'two_stage':
            return self._two_stage(outs, data_samples)
        return self._segmentation(outs[0], data_samples)

    @staticmethod
    def _unpadded(inputs: torch.Tensor, data_samples) -> torch.Tensor:
        """Batch 1: the image without the preprocessor's padding (the graph takes any size,
        and eagerly the backbone masks that padding anyway: it holds no image).  A larger
        batch goes in as it is: its padding is not masked inside the graph."""
        if inputs.shape[0] == 1 and data_samples:
            h, w = data_samples[0].metainfo.get('img_shape', inputs.shape[-2:])[:2]
            inputs = inputs[..., :max(int(h), 64), :max(int(w), 64)]
        return inputs.float()

    def _detections(self, outs: List[torch.Tensor], data_samples):
        model = self.head_model[0]
        levels = len(outs) // 2
        metas = [s.metainfo for s in data_samples]
        results = model.bbox_head.predict_by_feat(outs[:levels], outs[levels:],
                                                  batch_img_metas=metas, rescale=True)
        return model.add_pred_to_datasample(data_samples, results)

    def _two_stage(self, outs: List[torch.Tensor], data_samples):
        """As mmdet's ``TwoStageDetector.predict``: proposals from the RPN outputs, then
        the RoI head (its tensor steps in the RoI graphs)."""
        model = self.head_model[0]
        levels = len(outs) // 3
        feats = tuple(outs[:levels])
        metas = [s.metainfo for s in data_samples]
        proposals = model.rpn_head.predict_by_feat(outs[levels:2 * levels],
                                                   outs[2 * levels:],
                                                   batch_img_metas=metas, rescale=False)
        results = model.roi_head.predict(feats, proposals, data_samples, rescale=True)
        return model.add_pred_to_datasample(data_samples, results)

    def _segmentation(self, logits: torch.Tensor, data_samples):
        model = self.head_model[0]
        metas = [s.metainfo for s in data_samples]
        # as mmseg's EncoderDecoder.inference ('whole' mode): logits to the padded input
        # size, then postprocess_result crops the padding and resizes to the image
        logits = F.interpolate(logits, size=metas[0]['img_shape'], mode='bilinear',
                               align_corners=model.decode_head.align_corners)
        return model.postprocess_result(logits, data_samples)
