"""WholeImageRetinaNet against mmdet's own RetinaNet on the same weights, with a score
threshold and an ``nms_pre`` cut that many anchors pass, so each level's best are chosen across
stripes: the candidates before NMS in float64 (mmcv's NMS takes float32 only) bit-equal to
mmdet's ``predict_by_feat(with_nms=False)`` without stripes and equal to rounding with them;
the detections of ``predict`` in float32."""
import copy
import os
import os.path as osp

import pytest
import torch
from archs import TINY
from dense_helpers import build_model, small_input_env
from mmengine.config import Config
from mmengine.registry import DefaultScope
from repo_paths import ROOT

CONFIG = 'retinanet_ldn_small_1x.py'


@pytest.fixture(scope='module', autouse=True)
def _small_inputs():
    with small_input_env():
        yield


def _models(family='LDN', stripe_rows=None, nms_pre=40, dtype=torch.float64):
    """mmdet's RetinaNet with a tiny ``family`` backbone, a 16-channel FPN and head and 5
    classes, and the WholeImageRetinaNet with the same weights.  The classifier's bias
    is 0 and its weights far from mmdet's initial ones, so the scores are spread out (no two
    within float32 rounding), many pass ``score_thr`` and ``nms_pre`` cuts every level."""
    m = copy.deepcopy(Config.fromfile(osp.join(ROOT, 'configs', CONFIG)).model)
    arch = {k: v for k, v in TINY[family].items() if k != 'type'}
    m.backbone.update(arch, init_cfg=None, type=f'mmlinattn.{family}')
    dims = list(arch['arch']['embed_dims'])
    m.neck.update(in_channels=dims[1:], out_channels=16)
    m.bbox_head.update(num_classes=5, in_channels=16, feat_channels=16)
    m.test_cfg.update(nms_pre=nms_pre, score_thr=0.3, max_per_img=30)
    torch.manual_seed(0)
    plain = build_model(m, 'mmdet')
    plain.init_weights()
    plain = plain.to(dtype).eval()
    torch.nn.init.zeros_(plain.bbox_head.retina_cls.bias)
    torch.nn.init.normal_(plain.bbox_head.retina_cls.weight, std=1.0)  # scores spread apart
    m.update(type='mmlinattn.WholeImageRetinaNet')
    m.test_cfg['stripe_rows'] = stripe_rows
    whole = build_model(m, 'mmdet').to(dtype).eval()
    whole.load_state_dict(plain.state_dict())
    return plain, whole


def _samples(h, w):
    from mmdet.structures import DetDataSample
    return [DetDataSample(metainfo=dict(img_shape=(h, w), pad_shape=(h, w),
                                        ori_shape=(h // 2, w // 2), scale_factor=(2.0, 2.0)))]


def _candidates(plain, whole, x):
    """The rescaled boxes, scores and labels before NMS: mmdet's, then the stripes'."""
    samples = _samples(*x.shape[2:])
    metas = [samples[0].metainfo]
    with torch.no_grad(), DefaultScope.overwrite_default_scope('mmdet'):
        feats = plain.extract_feat(x)
        ref = plain.bbox_head.predict_by_feat(*plain.bbox_head(feats), batch_img_metas=metas,
                                              rescale=True, with_nms=False)[0]
        priors = whole.bbox_head.prior_generator.grid_priors(
            [f.shape[-2:] for f in feats], dtype=x.dtype, device=x.device)
        got = whole.predict_image(list(whole.extract_feat(x)), priors, metas[0], True,
                                  whole.bbox_head.test_cfg['stripe_rows'], with_nms=False)
    return [(r.bboxes, r.scores, r.labels) for r in (ref, got)]


def _predict(model, x):
    with torch.no_grad(), DefaultScope.overwrite_default_scope('mmdet'):
        out = model.predict(x, _samples(*x.shape[2:]))[0].pred_instances
    return out.bboxes, out.scores, out.labels


def test_candidates_equal_mmdet_bit_for_bit_without_stripes():
    plain, whole = _models(stripe_rows=None)
    ref, got = _candidates(plain, whole, torch.randn(1, 3, 96, 128, dtype=torch.float64))
    assert len(ref[0]) > 100  # five levels, 40 from each of the larger ones
    for r, g in zip(ref, got):
        assert torch.equal(r, g)


@pytest.mark.parametrize('rows', [1, 3, 5])
def test_candidates_equal_mmdet_with_stripes(rows):
    """Stripes of 1-5 rows on a 96x160 image (12x20 at stride 8 down to 1x2 at stride 128):
    every stripe reads its 5-row halo; each level's best 40 come from several stripes."""
    plain, whole = _models(stripe_rows=rows)
    ref, got = _candidates(plain, whole, torch.randn(1, 3, 96, 160, dtype=torch.float64))
    assert torch.equal(ref[2], got[2])
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=1e-10)
    torch.testing.assert_close(got[1], ref[1], rtol=0, atol=1e-12)


def test_nms_pre_off_keeps_what_mmdet_keeps():
    """``nms_pre=-1``: mmdet keeps all but the last of the sorted valid scores."""
    plain, whole = _models(stripe_rows=2, nms_pre=-1)
    ref, got = _candidates(plain, whole, torch.randn(1, 3, 64, 64, dtype=torch.float64))
    assert len(ref[0]) > 100
    assert torch.equal(ref[2], got[2])
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=1e-10)


def test_detections_equal_mmdet_predict():
    """The whole ``predict``, NMS and ``max_per_img`` included, in float32."""
    plain, whole = _models(stripe_rows=3, dtype=torch.float32)
    x = torch.randn(1, 3, 96, 160)
    ref, got = _predict(plain, x), _predict(whole, x)
    assert len(ref[0]) > 10  # many candidates survived NMS
    assert torch.equal(ref[2], got[2])
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=1e-3)
    torch.testing.assert_close(got[1], ref[1], rtol=0, atol=1e-5)


def test_bad_stripe_rows_names_the_setting():
    _, whole = _models(stripe_rows=0, dtype=torch.float32)
    with pytest.raises(ValueError, match='stripe_rows'):
        _predict(whole, torch.randn(1, 3, 64, 64))


def test_whole_image_config_changes_the_detector_and_keeps_native_size():
    """configs/whole_image/retinanet_ldn_small_coco_whole.py: the parent's model with the
    detector type changed, and a test pipeline that leaves a photo at its own size (scale
    factor 1, so the boxes map back unchanged)."""
    from mmcv.transforms import Compose
    from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    cfg = Config.fromfile(osp.join(ROOT, 'configs', 'whole_image',
                                   'retinanet_ldn_small_coco_whole.py'))
    parent = Config.fromfile(osp.join(ROOT, 'configs', CONFIG))
    assert cfg.model.type == 'mmlinattn.WholeImageRetinaNet'
    assert parent.model.type == 'RetinaNet'
    assert cfg.model.backbone == parent.model.backbone
    assert cfg.model.bbox_head == parent.model.bbox_head
    photo = osp.join(ROOT, 'data', 'photos', 'bccd', 'images', 'test')
    name = sorted(os.listdir(photo))[0]
    pipeline = [t for t in cfg.test_dataloader.dataset.pipeline if t.type != 'LoadAnnotations']
    with DefaultScope.overwrite_default_scope('mmdet'):
        out = Compose(pipeline)(dict(img_path=osp.join(photo, name), img_id=0))
    meta = out['data_samples'].metainfo
    assert meta['img_shape'] == meta['ori_shape'] == (240, 320)
    assert tuple(out['inputs'].shape[1:]) == (240, 320)
    assert tuple(meta['scale_factor']) == (1.0, 1.0)
