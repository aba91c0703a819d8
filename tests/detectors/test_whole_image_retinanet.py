"""mmdet's RetinaNet with mmlinattn's StripedRetinaHead against mmdet's own RetinaHead on the
same weights, with a score
threshold and an ``nms_pre`` cut that many anchors pass, so each level's best are chosen across
stripes: the candidates before NMS in float64 (mmcv's NMS takes float32 only) bit-equal to
mmdet's ``predict_by_feat(with_nms=False)`` without stripes and equal to rounding with them;
the detections of ``predict`` in float32."""
import copy
import os
import os.path as osp

import pytest
import torch
from allocations import Allocations, group_norm_named
from archs import TINY
from dense_helpers import build_model, small_input_env
from mmengine.config import Config
from mmengine.registry import DefaultScope
from repo_paths import ROOT

from mmlinattn.models import striped

CONFIG = 'retinanet_ldn_small_1x.py'
GN = dict(type='GN', num_groups=4, requires_grad=True)


@pytest.fixture(scope='module', autouse=True)
def _small_inputs():
    with small_input_env():
        yield


def _models(family='LDN', stripe_rows=None, nms_pre=40, dtype=torch.float64, **head):
    """mmdet's RetinaNet with a tiny ``family`` backbone, a 16-channel FPN and head and 5
    classes, and the same RetinaNet with the StripedRetinaHead and weights.  The classifier's bias
    is 0 and its weights far from mmdet's initial ones, so the scores are spread out (no two
    within float32 rounding), many pass ``score_thr`` and ``nms_pre`` cuts every level.
    ``head``: other settings of the head (``norm_cfg``, ``feat_channels``)."""
    m = copy.deepcopy(Config.fromfile(osp.join(ROOT, 'configs', CONFIG)).model)
    arch = {k: v for k, v in TINY[family].items() if k != 'type'}
    m.backbone.update(arch, init_cfg=None, type=f'mmlinattn.{family}')
    dims = list(arch['arch']['embed_dims'])
    m.neck.update(in_channels=dims[1:], out_channels=16)
    m.bbox_head.update(num_classes=5, in_channels=16, feat_channels=16)
    m.bbox_head.update(head)
    m.test_cfg.update(nms_pre=nms_pre, score_thr=0.3, max_per_img=30)
    torch.manual_seed(0)
    plain = build_model(m, 'mmdet')
    plain.init_weights()
    plain = plain.to(dtype).eval()
    torch.nn.init.zeros_(plain.bbox_head.retina_cls.bias)
    torch.nn.init.normal_(plain.bbox_head.retina_cls.weight, std=1.0)  # scores spread apart
    m.bbox_head.type = 'mmlinattn.StripedRetinaHead'
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
        got = whole.bbox_head.predict_by_stripes(whole.extract_feat(x), metas, rescale=True,
                                                 with_nms=False)[0]
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


def test_a_group_norm_head_runs_as_mmdet(stripe_warnings):
    """mmdet's RetinaHead with ``norm_cfg=dict(type='GN')`` (its group norms read the whole
    level): in stripes of 3 rows its scores would be other ones.  The head runs as mmdet runs
    it: the detections are mmdet's, bit for bit, and it is logged once with the module's
    name."""
    plain, whole = _models(stripe_rows=3, dtype=torch.float32, norm_cfg=GN)
    x = torch.randn(1, 3, 96, 160)
    ref, got = _predict(plain, x), _predict(whole, x)
    assert len(ref[0]) > 10
    for r, g in zip(ref, got):
        assert torch.equal(r, g)
    _predict(whole, x)
    assert len(stripe_warnings) == 1
    assert group_norm_named(whole.bbox_head, stripe_warnings[0]).startswith(
        ('cls_convs.', 'reg_convs.'))


def test_a_group_norm_head_runs_whole_up_to_whole_head_bytes(monkeypatch, stripe_warnings):
    """The thresholds of a head whose norm reads the whole map, at their boundaries: stripes
    of 12 rows cover the finest level (12x20 at stride 8 of a 96x160 image), so nothing is
    cut or logged; 11 would cut it, logged.  Whole, its widest map (the classifier's 9
    anchors x 5 classes on the finest level, float32) may take WHOLE_HEAD_BYTES; a byte more
    raises, naming the module and the fixes."""
    plain, whole = _models(stripe_rows=12, dtype=torch.float32, norm_cfg=GN)
    x = torch.randn(1, 3, 96, 160)
    want = _predict(plain, x)
    widest = 9 * 5 * 12 * 20 * 4
    monkeypatch.setattr(striped, 'WHOLE_HEAD_BYTES', widest)
    for rows, logged in ((12, 0), (11, 1)):
        whole.bbox_head.test_cfg['stripe_rows'] = rows
        got = _predict(whole, x)
        assert all(torch.equal(r, g) for r, g in zip(want, got))
        assert len(stripe_warnings) == logged
    monkeypatch.setattr(striped, 'WHOLE_HEAD_BYTES', widest - 1)
    with pytest.raises(ValueError) as error:
        _predict(whole, x)
    assert group_norm_named(whole.bbox_head, str(error.value)) == 'cls_convs.0.gn'
    assert 'stripe_rows=None' in str(error.value) and "type='BN'" in str(error.value)


def test_no_whole_level_of_head_maps_while_stripes_cut_it():
    """What ``predict`` allocates on a 128x128 image (levels 16, 8, 4, 2, 1 rows high) with a
    24-channel head (the FPN's 16).  Stripes of 3 rows, each read with its 5-row halo (four
    3x3 convolutions and the classifier's): the 16-row level never has a head map whole (24
    channels, 45 scores, 36 box terms) nor its scores flattened (16 x 16 x 9 anchors, 5
    classes); the smaller levels, which one stripe's rows and halo cover, do, as every level
    does without stripes and in mmdet's own predict (the tracker sees them there).  The
    stripes start below the level's height: 16 rows run the 16-row level in one call, 15 in
    two (the second reads rows 10-15)."""
    plain, whole = _models(stripe_rows=None, dtype=torch.float32, feat_channels=24)
    x = torch.randn(1, 3, 128, 128)
    levels = (16, 8, 4, 2, 1)

    def whole_levels(shapes):
        return {h for h in levels if any(s in shapes for s in [(1, c, h, h) for c in (24, 45, 36)]
                                         + [(h * h * 9, 5)])}
    with Allocations() as mmdet:
        _predict(plain, x)
    assert whole_levels(mmdet.shapes) == set(levels)
    for rows, want in ((3, {8, 4, 2, 1}), (None, set(levels))):
        whole.bbox_head.test_cfg['stripe_rows'] = rows
        with Allocations() as ours:
            _predict(whole, x)
        assert whole_levels(ours.shapes) == want, rows
    calls, forward_single = [], whole.bbox_head.forward_single
    whole.bbox_head.forward_single = lambda f: calls.append(f.shape[-2]) or forward_single(f)
    for rows, want in ((16, [16, 8, 4, 2, 1]), (15, [16, 6, 8, 4, 2, 1])):
        whole.bbox_head.test_cfg['stripe_rows'] = rows
        calls.clear()
        _predict(whole, x)
        assert calls == want, rows


def test_bad_stripe_rows_names_the_setting():
    _, whole = _models(stripe_rows=0, dtype=torch.float32)
    with pytest.raises(ValueError, match='stripe_rows'):
        _predict(whole, torch.randn(1, 3, 64, 64))


def test_the_former_detector_type_names_its_replacement():
    m = copy.deepcopy(Config.fromfile(osp.join(ROOT, 'configs', CONFIG)).model)
    m.type = 'mmlinattn.WholeImageRetinaNet'
    with pytest.raises(ValueError, match=r"bbox_head=dict\(type='mmlinattn.StripedRetinaHead'\)"):
        build_model(m, 'mmdet')


def test_whole_image_config_changes_the_head_and_keeps_native_size():
    """configs/whole_image/retinanet_ldn_small_coco_whole.py: the parent's model with the
    head's type changed, and a test pipeline that leaves a photo at its own size (scale
    factor 1, so the boxes map back unchanged)."""
    from mmcv.transforms import Compose
    from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    cfg = Config.fromfile(osp.join(ROOT, 'configs', 'whole_image',
                                   'retinanet_ldn_small_coco_whole.py'))
    parent = Config.fromfile(osp.join(ROOT, 'configs', CONFIG))
    assert cfg.model.type == parent.model.type == 'RetinaNet'
    assert cfg.model.backbone == parent.model.backbone
    assert cfg.model.bbox_head.pop('type') == 'mmlinattn.StripedRetinaHead'
    assert parent.model.bbox_head.pop('type') == 'RetinaHead'
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
