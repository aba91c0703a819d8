"""The RoI stages of a two-stage detector (Faster / Mask R-CNN) as graphs of their own.

A two-stage detector picks its proposals with a data-dependent NMS between the stages, so
it is exported as up to three graphs, with NMS and box decoding in Python between them
(mmdet's own ``predict_by_feat``, see :class:`mmlinattn.deployment.DeployedModel`):

1. ``model.onnx``: image -> FPN features, RPN class scores, RPN box deltas
   (:class:`mmlinattn.deployment.TensorGraph`);
2. ``model.bbox.onnx``: (features, RoIs) -> the box head's class scores and box deltas;
3. ``model.mask.onnx`` (Mask R-CNN): (features, RoIs) -> the mask head's logits.

RoIs are ``(N, 5)``: batch index, x1, y1, x2, y2 in input pixels.  N, and the features'
H and W, are symbolic.  mmcv's ``RoIAlign`` is an extension kernel that export cannot
trace; here each level is pooled with ``torchvision.ops.roi_align`` (the same sampling:
bit-equal on the CPU), which exports as the standard ONNX ``RoiAlign``.  mmdet assigns
every RoI to one level (``map_roi_levels``) and pools only there, a data-dependent
gather; the graph pools every RoI at every level and keeps the assigned one by a 0/1
mask, which gives the same features at 4x the (small) pooling cost.
"""
import os.path as osp
from typing import Dict, List, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.logging import print_log

from .onnx_export import check_onnx, export_program_onnx, require_export_onnx
from .runtimes import load_runtime, max_relative_difference
from .tensor_graph import ROI_GRAPHS, check_two_stage, flatten_outputs


def roi_graph_path(path: str, head: str) -> str:
    """``work/model.onnx`` -> ``work/model.bbox.onnx`` (or ``.mask.onnx``)."""
    root, ext = osp.splitext(path)
    return f'{root}.{head}{ext or ".onnx"}'


def roi_features(extractor: nn.Module, feats: Sequence[torch.Tensor],
                 rois: torch.Tensor) -> torch.Tensor:
    """mmdet's ``SingleRoIExtractor(feats, rois)`` without data-dependent indexing: every
    RoI pooled at every level, the level ``map_roi_levels`` assigns kept."""
    from torchvision.ops import roi_align
    rois = rois.to(feats[0].dtype)
    levels = extractor.map_roi_levels(rois, len(feats)) if len(feats) > 1 else None
    out = None
    for i, (feat, layer) in enumerate(zip(feats, extractor.roi_layers)):
        pooled = roi_align(feat, rois, layer.output_size, layer.spatial_scale,
                           layer.sampling_ratio, True)
        if levels is None:
            return pooled
        # multiplying by 0 / 1 is exact; the sum adds zeros to the assigned level's values
        pooled = pooled * (levels == i).to(pooled.dtype)[:, None, None, None]
        out = pooled if out is None else out + pooled
    return out


class RoIGraph(nn.Module):
    """``(*features, rois) -> head outputs`` for the ``head`` ('bbox' or 'mask') of a
    StandardRoIHead: ``(cls_score, bbox_pred)`` or ``(mask_logits, )``."""

    def __init__(self, roi_head: nn.Module, head: str):
        super().__init__()
        if head not in ROI_GRAPHS:
            raise ValueError(f'head must be one of {ROI_GRAPHS}, got {head!r}')
        self.extractor = getattr(roi_head, f'{head}_roi_extractor')
        self.head = getattr(roi_head, f'{head}_head')

    @property
    def num_inputs(self) -> int:
        """How many feature levels the graph takes (the extractor's strides)."""
        return self.extractor.num_inputs

    def forward(self, *inputs: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        *feats, rois = inputs
        return flatten_outputs(self.head(roi_features(self.extractor, feats, rois)))


def example_rois(h: int, w: int, count: int, seed: int = 0) -> torch.Tensor:
    """``count`` random boxes (batch 0) of assorted sizes inside an ``h x w`` input,
    so that every FPN level gets some."""
    gen = torch.Generator().manual_seed(seed)
    size = torch.rand(count, 2, generator=gen) ** 2 * torch.tensor([w, h]) * 0.9 + 4
    corner = torch.rand(count, 2, generator=gen) * (torch.tensor([w, h]) - size).clamp(min=1)
    return torch.cat([torch.zeros(count, 1), corner, corner + size], 1)


def _rois_over(model: nn.Module, feats: Sequence[torch.Tensor], count: int,
               seed: int = 0) -> torch.Tensor:
    """:func:`example_rois` inside the input that ``feats`` (finest level first) came from."""
    stride = model.roi_head.bbox_roi_extractor.featmap_strides[0]
    h, w = (int(s * stride) for s in feats[0].shape[2:])
    return example_rois(h, w, count, seed)


def roi_inputs(feats: Sequence[torch.Tensor], graph: RoIGraph,
               rois: torch.Tensor) -> List[torch.Tensor]:
    """The graph's inputs: the levels it pools from, then the RoIs."""
    return [*feats[:graph.num_inputs], rois]


def roi_heads(model: nn.Module) -> List[str]:
    """The RoI stages ``model`` has: ['bbox'] or ['bbox', 'mask']."""
    return [h for h in ROI_GRAPHS if getattr(model.roi_head, f'with_{h}', False)]


def eager_roi_outputs(roi_head: nn.Module, head: str, feats: Sequence[torch.Tensor],
                      rois: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """What mmdet's own RoI head computes for the same inputs (mmcv's RoIAlign, the
    per-level gather): the reference of the graphs."""
    if head == 'bbox':
        out = roi_head._bbox_forward(tuple(feats), rois)
        return out['cls_score'], out['bbox_pred']
    return (roi_head._mask_forward(tuple(feats), rois)['mask_preds'], )


def export_roi_graphs(model: nn.Module, feats: Sequence[torch.Tensor], path: str, *,
                      dynamic_hw: bool = True, opset: int = 18,
                      num_rois: int = 48) -> Dict[str, str]:
    """Export each RoI stage of ``model`` beside ``path`` (:func:`roi_graph_path`), traced
    on ``feats`` (the image graph's features for the example) and ``num_rois`` random RoIs.
    The RoI count is always symbolic; the features' H and W when ``dynamic_hw``.  Each
    file passes the ONNX checker and is compared with mmdet's eager head in ONNX Runtime
    at another RoI count (and other feature sizes when dynamic).  Returns {head: file}."""
    require_export_onnx()
    check_two_stage(model)
    rois = _rois_over(model, feats, num_rois)
    written = {}
    for head in roi_heads(model):
        graph = RoIGraph(model.roi_head, head).eval()
        inputs = roi_inputs(feats, graph, rois)
        dims = [{2: torch.export.Dim(f'h{i}', min=2, max=4096),
                 3: torch.export.Dim(f'w{i}', min=2, max=4096)} if dynamic_hw else None
                for i in range(graph.num_inputs)]
        dims.append({0: torch.export.Dim('rois', min=1, max=100_000)})
        with torch.no_grad():  # dynamic_shapes: one entry, for forward's *inputs
            program = torch.export.export(graph, tuple(inputs), strict=False,
                                          dynamic_shapes=(tuple(dims), ))
        out = roi_graph_path(path, head)
        names = [f'feat{i}' for i in range(graph.num_inputs)] + ['rois']
        export_program_onnx(program, inputs, out, opset, names)
        check_onnx(out)
        written[head] = out
    _check_in_runtime(model, feats, path, dynamic_hw)
    for head, out in written.items():
        print_log(f'{type(model).__name__}: {head} RoI stage written to {out}',
                  logger='current')
    return written


def _check_in_runtime(model: nn.Module, feats: Sequence[torch.Tensor], path: str,
                      dynamic_hw: bool, tol: float = 1e-4) -> None:
    """The written RoI graphs in ONNX Runtime against mmdet's eager head at another RoI
    count, and at other feature sizes when they are symbolic.  Skipped without
    onnxruntime."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return
    gen = torch.Generator().manual_seed(0)
    checks = [feats]
    if dynamic_hw:  # each level its own size: the graph ties none of them together
        checks.append([torch.randn(f.shape[0], f.shape[1], f.shape[2] + 3, f.shape[3] + 5,
                                   generator=gen) for f in feats])
    for level_feats in checks:
        for head, diff in roi_difference(model, level_feats, path).items():
            if not diff <= tol:
                raise RuntimeError(
                    f'{roi_graph_path(path, head)}: in ONNX Runtime the {head} RoI stage '
                    f'differs from mmdet\'s eager head (relative difference {diff:.1e}) at '
                    f'features {tuple(level_feats[0].shape[2:])}; report the model')


def roi_difference(model: nn.Module, feats: Sequence[torch.Tensor], path: str,
                   runtime: str = 'onnxruntime', num_rois: int = 37,
                   seed: int = 1) -> Dict[str, float]:
    """Max relative difference of each RoI graph beside ``path`` in ``runtime`` against
    mmdet's eager RoI head, on ``feats`` and ``num_rois`` random RoIs."""
    rois = _rois_over(model, feats, num_rois, seed)
    diffs = {}
    for head in roi_heads(model):
        graph = RoIGraph(model.roi_head, head)
        run = load_runtime(roi_graph_path(path, head), runtime)
        with torch.no_grad():
            refs = eager_roi_outputs(model.roi_head, head, feats, rois)
        diffs[head] = max_relative_difference(run(*roi_inputs(feats, graph, rois)), refs)
    return diffs
