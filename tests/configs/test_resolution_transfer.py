"""Resolution transfer end to end, for every family, through the real configs and the real
mmdet / mmseg models:

* a segmentor trained (optimizer steps from the config's own ``optim_wrapper``) on 64x64
  crops evaluates at a larger, non-square 96x192 with mmseg's whole-image inference and
  with sliding-window inference (and a one-window slide equals whole inference);
* a detector trained at 64x64 predicts at 100x150 (padded to 128x160), boxes inside the
  image;
* a segmentor checkpoint trained on 64x64 crops gives its backbone, through ``init_cfg``
  with ``prefix='backbone.'``, to the config at another crop size (and another stored
  position-embedding grid where the family has one): every tensor loads, strictly.
"""
import os.path as osp

import pytest
import torch
from mmengine.config import Config, ConfigDict
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope

from dense_helpers import (build_model, det_batch, num_classes_of, seg_batch,
                           shrink_seg_model_cfg, small_input_env)
from repo_paths import ROOT

# family -> (detector config, segmentor config, backbone args that change the stored grid)
CASES = {
    'soft': ('retinanet_soft_tiny_1x.py', 'semfpn_soft_tiny_ade20k_40k.py',
             dict(pretrain_img_size=320)),
    'nalaformer': ('retinanet_nalaformer_tiny_1x.py', 'semfpn_nalaformer_tiny_ade20k_40k.py',
                   {}),
    'infvit': ('retinanet_infvit_tiny_1x.py', 'semfpn_infvit_tiny_ade20k_40k.py', {}),
    'ldn': ('retinanet_ldn_tiny_1x.py', 'semfpn_ldn_tiny_ade20k_40k.py', {}),
    'infvitplain': ('retinanet_infvitplain_l4_1x.py', 'upernet_infvitplain_l4_ade20k_160k.py',
                    dict(img_size=(384, 512))),
}
FAMILIES = sorted(CASES)
TRAIN = 64


@pytest.fixture(scope='module', autouse=True)
def _fast_config_loading():
    with small_input_env():
        yield


def _cfg(name: str) -> Config:
    return Config.fromfile(osp.join(ROOT, 'configs', name))


def _train(model, cfg, data, steps: int = 2):
    """``steps`` optimizer steps through mmengine's ``train_step`` with the config's
    optimizer wrapper (paramwise settings included)."""
    model.train()
    optim = build_optim_wrapper(model, cfg.optim_wrapper)
    scope = cfg.default_scope
    with DefaultScope.overwrite_default_scope(scope):
        for _ in range(steps):
            log = model.train_step(data, optim)
    assert all(torch.isfinite(v) for v in log.values()), log
    return model


def _test(model, data, scope):
    model.eval()
    with DefaultScope.overwrite_default_scope(scope), torch.no_grad():
        return model.test_step(data)


@pytest.mark.parametrize('family', FAMILIES)
def test_segmentor_small_crops_to_large_whole_and_slide(family):
    from mmseg.evaluation import IoUMetric
    cfg = _cfg(CASES[family][1])
    model_cfg = shrink_seg_model_cfg(cfg.model, (TRAIN, TRAIN))
    torch.manual_seed(0)
    model = build_model(model_cfg, 'mmseg')
    n_cls = num_classes_of(model_cfg)
    _train(model, cfg, seg_batch(TRAIN, TRAIN, n_cls))

    h, w = 96, 192
    data = seg_batch(h, w, n_cls, batch=1)
    model.test_cfg = ConfigDict(mode='whole')
    whole = _test(model, data, 'mmseg')[0]
    assert tuple(whole.pred_sem_seg.data.shape) == (1, h, w)
    assert tuple(whole.seg_logits.data.shape) == (n_cls, h, w)
    assert torch.isfinite(whole.seg_logits.data).all()

    model.test_cfg = ConfigDict(mode='slide', crop_size=(TRAIN, TRAIN), stride=(48, 48))
    slide = _test(model, data, 'mmseg')[0]  # 2 x 4 overlapping 64x64 windows
    assert tuple(slide.pred_sem_seg.data.shape) == (1, h, w)
    assert torch.isfinite(slide.seg_logits.data).all()
    assert not torch.allclose(slide.seg_logits.data, whole.seg_logits.data), \
        'windows see less context than the whole image'

    model.test_cfg = ConfigDict(mode='slide', crop_size=(h, w), stride=(h, w))
    one = _test(model, data, 'mmseg')[0]  # a single window is whole-image inference
    torch.testing.assert_close(one.seg_logits.data, whole.seg_logits.data, rtol=1e-4,
                               atol=1e-5)

    metric = IoUMetric(iou_metrics=['mIoU'])
    metric.dataset_meta = dict(classes=[str(i) for i in range(n_cls)])
    metric.process(data, [whole.to_dict(), slide.to_dict()])
    res = metric.compute_metrics(metric.results)
    assert 0.0 <= res['mIoU'] <= 100.0


def _trained_detector(family):
    cfg = _cfg(CASES[family][0])
    torch.manual_seed(0)
    model = build_model(cfg.model, 'mmdet')
    return _train(model, cfg, det_batch(TRAIN, TRAIN, with_mask=False), steps=1), cfg


@pytest.mark.parametrize('family', FAMILIES)
def test_detector_trained_at_one_scale_predicts_at_another(family):
    model, cfg = _trained_detector(family)
    h, w = 100, 150  # not a multiple of 32: the preprocessor pads to 128 x 160
    data = det_batch(h, w, with_mask=False)
    pred = _test(model, data, 'mmdet')[0]
    assert tuple(pred.batch_input_shape) == (128, 160)
    boxes = pred.pred_instances.bboxes
    assert 0 < len(boxes) <= cfg.model.test_cfg.max_per_img
    assert torch.isfinite(boxes).all() and torch.isfinite(pred.pred_instances.scores).all()
    assert (boxes[:, 0::2] >= 0).all() and (boxes[:, 0::2] <= w).all()
    assert (boxes[:, 1::2] >= 0).all() and (boxes[:, 1::2] <= h).all()


@pytest.mark.parametrize('family', FAMILIES)
def test_backbone_checkpoint_loads_strictly_at_another_resolution(family, tmp_path):
    cfg = _cfg(CASES[family][1])
    torch.manual_seed(0)
    small = build_model(shrink_seg_model_cfg(cfg.model, (TRAIN, TRAIN)), 'mmseg')
    n_cls = num_classes_of(cfg.model)
    _train(small, cfg, seg_batch(TRAIN, TRAIN, n_cls), steps=1)
    path = str(tmp_path / 'segmentor.pth')
    torch.save({'state_dict': small.state_dict()}, path)
    saved = {k[len('backbone.'):]: v for k, v in small.state_dict().items()
             if k.startswith('backbone.')}

    # the same config at another crop size (and another stored grid where there is one)
    model_cfg = shrink_seg_model_cfg(cfg.model, (96, 128))
    model_cfg.backbone.update(CASES[family][2])
    model_cfg.backbone.init_cfg = dict(type='Pretrained', checkpoint=path, prefix='backbone.')
    seg = build_model(model_cfg, 'mmseg')
    seg.init_weights()

    bb = seg.backbone
    own = {k: v.clone() for k, v in bb.state_dict().items()}
    resized = [k for k in saved if saved[k].shape != own[k].shape]
    assert bool(resized) == bool(CASES[family][2]), resized  # only the stored grids differ
    adapted = bb.adapt_state_dict(saved)
    assert sorted(adapted) == sorted(own)
    for k, v in adapted.items():  # init_cfg loaded every tensor
        torch.testing.assert_close(own[k], v, rtol=0, atol=0, msg=k)
    bb.load_state_dict(adapted, strict=True)  # no missing / unexpected / mismatched key

    pred = _test(seg, seg_batch(96, 160, n_cls, batch=1), 'mmseg')[0]
    assert tuple(pred.pred_sem_seg.data.shape) == (1, 96, 160)
