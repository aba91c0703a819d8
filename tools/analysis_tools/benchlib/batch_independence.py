"""How much one image's detections change when it is batched with a larger image (mmdet
pads a batch to its largest image): a real mmdet RetinaNet per family runs ``test_step`` on
the image alone and batched, and the differences inside the image's valid region are
measured (``tools/analysis_tools/measure_batch_independence.py`` prints them per family,
``docs/advanced/batch_independence.md`` explains them).  Imports mmdet when used.
"""
import copy
import math
import os.path as osp
from typing import Dict, List, Optional

import torch

__all__ = ['CONFIGS', 'RESNET18', 'detector_cfg', 'build_detector', 'detector_batch',
           'measure']

#: the repository's configs/ (configs are looked up there)
CONFIG_DIR = osp.abspath(osp.join(osp.dirname(__file__), '..', '..', '..', 'configs'))

CONFIGS = {
    'SOFT': 'retinanet_soft_tiny_1x.py',
    'NaLaFormer': 'retinanet_nalaformer_tiny_1x.py',
    'InfViT': 'retinanet_infvit_tiny_1x.py',
    'InfViTPlain': 'retinanet_infvitplain_l4_1x.py',
    'LDN': 'retinanet_ldn_tiny_1x.py',
    'ResNet18': 'retinanet_soft_tiny_1x.py',  # mmdet's backbone swapped in below
}
RESNET18 = dict(type='ResNet', depth=18, num_stages=4, out_indices=(1, 2, 3), frozen_stages=-1,
                norm_cfg=dict(type='BN', requires_grad=True), norm_eval=True, style='pytorch',
                init_cfg=None)


def detector_cfg(family: str, backbone: Optional[dict] = None):
    """The model config of ``family``'s RetinaNet with ``score_thr=0`` (every detection
    kept), no pretrained weights, and optionally a replaced backbone (its neck inputs
    follow the backbone's ``embed_dims``)."""
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(CONFIG_DIR, CONFIGS[family])).model
    cfg.test_cfg.score_thr = 0.0
    if family == 'ResNet18':
        cfg.backbone = copy.deepcopy(RESNET18)
        cfg.neck.in_channels = [128, 256, 512]
    else:
        cfg.backbone.init_cfg = None
        cfg.backbone.drop_path_rate = 0.0
    if backbone is not None:
        cfg.backbone.update(backbone)
        import mmlinattn.models  # noqa: F401
        from mmlinattn.registry import MODELS
        probe = MODELS.build(dict(cfg.backbone))   # type='mmlinattn.X' from any scope
        dims = [probe.embed_dims[i] for i in probe.out_indices]
        neck = cfg.neck[0] if isinstance(cfg.neck, list) else cfg.neck
        neck.in_channels = dims[0] if isinstance(cfg.neck, list) else dims
        if isinstance(cfg.neck, list):
            cfg.neck[1].in_channels = [dims[0] // 2, dims[0], dims[0]]
    return cfg


def build_detector(cfg, seed: int = 0):
    from mmlinattn.engine.runner import build_in_scope
    torch.manual_seed(seed)
    return build_in_scope(cfg, 'mmdet').eval()


def detector_batch(images: List[torch.Tensor]) -> dict:
    """mmdet test-step input for uint8 CHW images (already at their test size).  mmdet's
    sample class is looked up by the library's name, as :func:`build_detector` builds the
    model, never imported by this package."""
    import importlib
    DetDataSample = importlib.import_module('mmdet.structures').DetDataSample
    samples = []
    for i, img in enumerate(images):
        h, w = img.shape[-2:]
        samples.append(DetDataSample(metainfo=dict(
            img_id=i, img_shape=(h, w), ori_shape=(h, w), scale_factor=(1.0, 1.0))))
    return dict(inputs=list(images), data_samples=samples)


def _run(model, images) -> dict:
    got = {}
    hooks = [model.backbone.register_forward_hook(lambda m, a, o: got.__setitem__('feats', o)),
             model.bbox_head.register_forward_hook(lambda m, a, o: got.__setitem__('head', o))]
    try:
        with torch.no_grad():
            got['dets'] = model.test_step(detector_batch(images))[0].pred_instances
    finally:
        for h in hooks:
            h.remove()
    return got


def _valid_diff(maps_a, maps_b, hw, strides, band: int = 0):
    worst, scale = 0.0, 0.0
    for a, b, s in zip(maps_a, maps_b, strides):
        vh, vw = math.ceil(hw[0] / s) - band, math.ceil(hw[1] / s) - band
        if vh <= 0 or vw <= 0:
            continue
        d = (a[0, :, :vh, :vw].double() - b[0, :, :vh, :vw].double()).abs().max().item()
        worst = max(worst, d)
        scale = max(scale, a[0, :, :vh, :vw].abs().max().item())
    return worst, scale


def _det_metrics(da, db) -> Dict[str, float]:
    sa = da.scores.sort(descending=True).values
    sb = db.scores.sort(descending=True).values
    n = min(len(sa), len(sb))
    score = (sa[:n] - sb[:n]).abs().max().item() if n else 0.0
    found = 0
    for box, label in zip(da.bboxes, da.labels):
        same = (db.labels == label) & ((db.bboxes - box).abs().max(-1).values <= 0.01)
        found += bool(same.any())
    return dict(score=score, boxes=found / max(len(da.bboxes), 1))


def measure(model, img: torch.Tensor, other: torch.Tensor, band: int = 6) -> Dict[str, float]:
    """Alone-vs-batched differences of ``img`` (uint8 CHW) for one detector."""
    alone, batched = _run(model, [img]), _run(model, [img, other])
    hw = tuple(img.shape[-2:])
    bb = model.backbone
    strides = [bb.strides[i] for i in bb.out_indices] if hasattr(bb, 'out_indices') and \
        hasattr(bb, 'embed_dims') else [8, 16, 32]
    feat, feat_scale = _valid_diff(alone['feats'], batched['feats'], hw, strides)
    head_strides = model.bbox_head.prior_generator.strides
    head_strides = [s[0] if isinstance(s, (tuple, list)) else s for s in head_strides]
    head, _ = _valid_diff(alone['head'][0], batched['head'][0], hw, head_strides)
    head_in, _ = _valid_diff(alone['head'][0], batched['head'][0], hw, head_strides, band)
    out = dict(backbone=feat / max(feat_scale, 1e-12), head=head, head_interior=head_in)
    out.update(_det_metrics(alone['dets'], batched['dets']))
    return out
