"""WholeImageEncoderDecoder against mmseg's own whole-image inference (EncoderDecoder.predict)
on the same weights, in float64: the stripes of a resize, the running argmax and the class
chunks bit-equal to PyTorch's whole-map calls; the segmentor's class map equal to mmseg's, and
its logits bit-equal without stripes and equal to rounding with them."""
import copy
import os.path as osp
from functools import lru_cache

import pytest
import torch
import torch.nn.functional as F
from allocations import Allocations, group_norm_named
from archs import TINY
from dense_helpers import build_model, small_input_env
from mmengine.config import Config
from mmengine.registry import DefaultScope
from repo_paths import ROOT

from mmlinattn.models import striped
from mmlinattn.models.segmentors.stripes import Conv, Full, Resize, materialize, running_argmax
from mmlinattn.models.striped import conv_halo

UPERNET = 'upernet_ldn_small_ade20k_160k.py'
SEMFPN = 'semfpn_ldn_small_ade20k_40k.py'
GN = dict(type='GN', num_groups=4, requires_grad=True)


@pytest.fixture(scope='module', autouse=True)
def _small_inputs():
    with small_input_env():
        yield


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('channels_last', [False, True])
@pytest.mark.parametrize('h,w,f,out_w,mode', [
    (16, 16, 4, 64, 'bilinear'),     # the head's x4 to the image
    (47, 33, 2, 66, 'bilinear'),     # odd sizes, the top-down x2
    (12, 100, 8, 800, 'bilinear'),   # wide: PyTorch's generic kernel
    (5, 7, 4, 29, 'bilinear'),       # a width that is no multiple
    (30, 30, 1, 61, 'bilinear'),     # height kept, width resized
    (20, 30, 4, 120, 'nearest'),     # mmseg FPN's top-down
    (7, 9, 3, 27, 'bilinear'),       # not a power of two: resized whole, sliced
])
def test_resize_stripes_are_bit_equal(dtype, channels_last, h, w, f, out_w, mode):
    x = torch.randn(1, 6, h, w, dtype=dtype, generator=torch.Generator().manual_seed(h * w))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    ac = False if mode == 'bilinear' else None
    ref = F.interpolate(x, (h * f, out_w), mode=mode, align_corners=ac)
    for rows in (1, 3, 5, 16):
        assert torch.equal(materialize(Resize(Full(x), (h * f, out_w), mode, ac), rows), ref)


def test_conv_stripes_read_their_halo_and_refuse_a_strided_conv():
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1),
                               torch.nn.Conv2d(4, 4, 5, padding=4, dilation=2)).double()
    assert conv_halo(conv) == 1 + 4
    x = torch.randn(1, 3, 23, 9, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(materialize(Conv(conv, Full(x), 5), 4), conv(x),
                                   rtol=0, atol=1e-12)
        # one halo row short: the rows next to each cut read the conv's zero padding
        assert not torch.allclose(materialize(Conv(conv, Full(x), 4), 4), conv(x))
    with pytest.raises(ValueError, match='stripe_rows=None'):
        conv_halo(torch.nn.Conv2d(3, 4, 3, stride=2, padding=1))


def test_running_argmax_is_torch_argmax_with_ties_and_nan():
    x = torch.randint(0, 3, (2, 37, 9, 11)).double()  # many ties
    x[0, 5, 2, 3] = x[1, 30, 0, 0] = float('nan')
    for k in (1, 4, 7, 37):
        got = running_argmax(((c, x[:, c:c + k]) for c in range(0, 37, k)), None)
        assert torch.equal(got, x.argmax(1, keepdim=True))


@lru_cache(maxsize=None)
def _config(name):
    return Config.fromfile(osp.join(ROOT, 'configs', name))


def _models(name, family, stripe_rows, classes=150, head=None, neck=None, striped=True):
    """mmseg's EncoderDecoder of config ``name`` with a tiny ``family`` backbone and head, and
    the WholeImageEncoderDecoder with the same weights, float64, its neck and decode head the
    striped ones (``striped``) or mmseg's.  ``head`` and ``neck``: settings of the decode head
    and the neck (e.g. their ``norm_cfg``)."""
    m = copy.deepcopy(_config(name).model)
    arch = {k: v for k, v in TINY[family].items() if k != 'type'}
    m.backbone.update(arch, init_cfg=None, type=f'mmlinattn.{family}')
    dims = list(arch['arch']['embed_dims'])
    if 'neck' in m:
        m.neck.update(in_channels=dims, out_channels=16)
        m.neck.update(neck or {})
        m.decode_head.update(in_channels=[m.neck.out_channels] * 4, channels=8)
    else:
        m.decode_head.update(in_channels=dims, channels=16)
    m.decode_head.update(num_classes=classes, **(head or {}))
    m.pop('auxiliary_head', None)
    torch.manual_seed(0)
    plain = build_model(m, 'mmseg').double().eval()
    m.update(type='mmlinattn.WholeImageEncoderDecoder',
             test_cfg=dict(mode='whole', stripe_rows=stripe_rows, class_chunk=8))
    if striped:
        m.decode_head.type = f'mmlinattn.Striped{m.decode_head.type}'
        if 'neck' in m:
            m.neck.type = f'mmlinattn.Striped{m.neck.type}'
    whole = build_model(m, 'mmseg').double().eval()
    whole.load_state_dict(plain.state_dict())
    return plain, whole


def _predict(model, x, samples=None):
    with torch.no_grad(), DefaultScope.overwrite_default_scope('mmseg'):
        return [s.pred_sem_seg.data for s in model.predict(x, copy.deepcopy(samples))]


@pytest.mark.parametrize('name', [UPERNET, SEMFPN])
def test_equals_mmseg_whole_mode_bit_for_bit_without_stripes(name):
    plain, whole = _models(name, 'LDN', stripe_rows=None)
    x = torch.randn(1, 3, 72, 100, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(whole.head_logits(x),
                           plain.decode_head.forward(plain.extract_feat(x)))
    assert torch.equal(_predict(whole, x)[0], _predict(plain, x)[0])


@pytest.mark.parametrize('name', [UPERNET, SEMFPN])
def test_equals_mmseg_whole_mode_with_stripes(name):
    """Stripes of 5 and 7 rows on a 72x100 image (18x25 at stride 4); mmseg's metadata with
    padding, a flip and a smaller original size, so the chunked crop / flip / resize run."""
    from mmseg.structures import SegDataSample
    plain, whole = _models(name, 'LDN', stripe_rows=5)
    x = torch.randn(1, 3, 72, 100, dtype=torch.float64)
    sample = SegDataSample(metainfo=dict(img_shape=(68, 96), pad_shape=(72, 100),
                                         ori_shape=(50, 61), padding_size=[0, 4, 0, 4],
                                         flip=True, flip_direction='horizontal'))
    with torch.no_grad():
        ref = plain.decode_head.forward(plain.extract_feat(x))
        for rows in (5, 7):
            whole.test_cfg['stripe_rows'] = rows
            torch.testing.assert_close(whole.head_logits(x), ref, rtol=0, atol=1e-12)
    assert torch.equal(_predict(whole, x, [sample])[0], _predict(plain, x, [sample])[0])


@pytest.mark.parametrize('name, part', [(UPERNET, 'head'), (SEMFPN, 'head'), (SEMFPN, 'neck')])
def test_a_group_norm_in_the_stride_4_part_runs_whole_as_mmseg(name, part, stripe_warnings):
    """A group norm reads the whole map: in stripes of 3 rows its statistics would be each
    stripe's, and the class map another.  The head runs whole (bit-equal to mmseg, the class
    map equal), logged once with the module's name."""
    plain, whole = _models(name, 'LDN', stripe_rows=3, **{part: dict(norm_cfg=GN)})
    x = torch.randn(1, 3, 64, 96, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(whole.head_logits(x),
                           plain.decode_head.forward(plain.extract_feat(x)))
    assert torch.equal(_predict(whole, x)[0], _predict(plain, x)[0])
    assert len(stripe_warnings) == 1
    module = group_norm_named(whole, stripe_warnings[0])
    assert module.startswith('decode_head' if part == 'head' else 'neck')
    assert 'runs whole' in stripe_warnings[0]


def test_a_group_norm_head_runs_whole_up_to_whole_head_bytes(monkeypatch, stripe_warnings):
    """The thresholds of a head whose norm reads the whole map, at their boundaries: stripes
    that cover the stride-4 map (16 rows) mean no stripes, nothing logged; 15 rows would cut
    it, logged.  Whole, the widest stride-4 map (fpn_bottleneck's input: 4 levels of 16
    channels, 16x24, float64) may take WHOLE_HEAD_BYTES; a byte more raises, naming the
    module and the fixes."""
    plain, whole = _models(UPERNET, 'LDN', stripe_rows=16, classes=7, head=dict(norm_cfg=GN))
    x = torch.randn(1, 3, 64, 96, dtype=torch.float64)
    want = _predict(plain, x)[0]
    widest = 4 * 16 * 16 * 24 * 8
    monkeypatch.setattr(striped, 'WHOLE_HEAD_BYTES', widest)
    assert torch.equal(_predict(whole, x)[0], want)
    assert stripe_warnings == []
    whole.test_cfg['stripe_rows'] = 15
    assert torch.equal(_predict(whole, x)[0], want)
    assert len(stripe_warnings) == 1
    monkeypatch.setattr(striped, 'WHOLE_HEAD_BYTES', widest - 1)
    with pytest.raises(ValueError) as error:
        _predict(whole, x)
    assert group_norm_named(whole, str(error.value)) == 'decode_head.fpn_bottleneck.gn'
    assert 'stripe_rows=None' in str(error.value) and "type='BN'" in str(error.value)
    whole.test_cfg['stripe_rows'] = None  # the fix the message names: whole, asked for
    assert torch.equal(_predict(whole, x)[0], want)


@pytest.mark.parametrize('name', [UPERNET, SEMFPN])
def test_no_full_size_logits_nor_whole_stride_4_head_maps(name):
    """What the predicts allocate on a 256x32 image (64x8 at stride 4, 8 rows at stride 32,
    so a stripe's resize reads a few source rows, not all), 150 classes: never a tensor of
    classes x H x W (mmseg's own predict does: the tracker sees it).  In stripes of 4 rows,
    no stride-4 map of the head's own widths whole (UperNet: 24 channels, 96 concatenated;
    Semantic FPN: the neck's 24, the head's 12); 63 rows cut the map, but the first stripe's
    halo reads all of it; 64 rows or None: whole.  The logits at stride 4 are computed in
    stripes below 64 rows (an empty map, then each stripe's rows), in one piece from 64 on
    (one map, no copy)."""
    if name == UPERNET:
        plain, whole = _models(name, 'LDN', stripe_rows=None, head=dict(channels=24))
        widths = {24, 96}
    else:
        plain, whole = _models(name, 'LDN', stripe_rows=None, head=dict(channels=12),
                               neck=dict(out_channels=24))
        widths = {24, 12}
    x = torch.randn(1, 3, 256, 32, dtype=torch.float64)
    full_logits = 150 * 256 * 32
    with Allocations() as mmseg:
        _predict(plain, x)
    assert mmseg.largest() >= full_logits
    for rows, whole_maps, logit_rows in ((4, False, [4] * 16 + [64]), (63, True, [1, 63, 64]),
                                         (64, True, [64]), (None, True, [64])):
        whole.test_cfg['stripe_rows'] = rows
        with Allocations() as ours:
            _predict(whole, x)
        assert ours.largest() < full_logits
        stride_4 = [s for s in ours.shapes if len(s) == 4 and s[3] == 8]
        head_maps = [s for s in stride_4 if s[2] == 64 and s[1] in widths]
        assert bool(head_maps) == whole_maps, (rows, head_maps)
        assert sorted(s[2] for s in stride_4 if s[1] == 150) == logit_rows, rows


@pytest.mark.parametrize('family', ['SOFT', 'NaLaFormer', 'InfViT'])
def test_every_family_predicts_as_mmseg(family):
    plain, whole = _models(UPERNET, family, stripe_rows=4, classes=7)
    x = torch.randn(1, 3, 64, 96, dtype=torch.float64)
    assert torch.equal(_predict(whole, x)[0], _predict(plain, x)[0])


@pytest.mark.parametrize('name', [UPERNET, SEMFPN])
def test_mmseg_heads_run_whole_and_say_so(name, monkeypatch):
    """The segmentor with mmseg's own neck and head (no row graph): they run whole, bit-equal
    to mmseg, logged once naming them and the striped types."""
    import mmengine.logging

    from mmlinattn.models import striped as striped_module
    logged = []
    monkeypatch.setattr(striped_module, '_LOGGED', set())
    plain, whole = _models(name, 'LDN', stripe_rows=5, striped=False)
    monkeypatch.setattr(mmengine.logging, 'print_log', lambda msg, **kw: logged.append(msg))
    x = torch.randn(1, 3, 64, 96, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(whole.head_logits(x),
                               plain.decode_head.forward(plain.extract_feat(x)))
    assert len(logged) == 1
    assert ('neck (FPN) and ' if name == SEMFPN else 'decode_head') in logged[0]
    assert 'mmlinattn.StripedUPerHead' in logged[0] and 'mmlinattn.StripedFPN' in logged[0]


def test_bad_test_cfg_names_the_setting():
    _, whole = _models(UPERNET, 'LDN', stripe_rows=0)
    with pytest.raises(ValueError, match='stripe_rows'):
        _predict(whole, torch.randn(1, 3, 64, 64, dtype=torch.float64))


@pytest.mark.parametrize('name', ['upernet_ldn_small_ade20k_whole.py',
                                  'semfpn_ldn_small_ade20k_whole.py'])
def test_whole_image_configs_change_the_segmentor_and_keep_native_size(name):
    cfg = Config.fromfile(osp.join(ROOT, 'configs', 'whole_image', name))
    parent = _config(name.replace('_whole', '_160k' if 'upernet' in name else '_40k'))
    assert cfg.model.type == 'mmlinattn.WholeImageEncoderDecoder'
    assert parent.model.type == 'EncoderDecoder'
    for loader in (cfg.val_dataloader, cfg.test_dataloader):
        assert [t['type'] for t in loader.dataset.pipeline] == [
            'LoadImageFromFile', 'LoadAnnotations', 'PackSegInputs']
    assert cfg.model.backbone == parent.model.backbone
    for part in ('neck', 'decode_head'):  # the striped form of the parent's, same settings
        if part in parent.model:
            assert cfg.model[part].pop('type') == f'mmlinattn.Striped{parent.model[part].type}'
            assert cfg.model[part] == {k: v for k, v in parent.model[part].items()
                                       if k != 'type'}
        else:
            assert part not in cfg.model
