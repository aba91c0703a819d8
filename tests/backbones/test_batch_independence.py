"""Batch-independent predictions (``docs/advanced/batch_independence.md``).

mmdet / mmseg pad a batch to its largest image.  With the image's valid size (``valid_hw``,
or ``img_shape`` attached by the data preprocessor hook), every family's features inside the
image must be the same alone (padded to the size divisor), batched with a larger image, and
without any padding at all.  Without it they differ: the "before" numbers.
"""
import types

import pytest
import torch
import torch.nn as nn
from archs import FAMILIES, build
from reliability_helpers import alone_and_batched, max_valid_diff, pad_to, round_up

from mmlinattn.engine import ValidRegionHook
from mmlinattn.engine.valid_region_hook import enable_valid_region
from mmlinattn.models.backbones.soft import SOFT
from mmlinattn.models.layers.token_grid import IMAGE_SIZES_ATTR

SMALL, BIG = (72, 88), (128, 160)

# every family with its default options, plus the options that add other global or
# spatial operators (softmax stages, class tokens, V convolutions, wider stencils, Pure InfSA,
# convolutional stems)
CASES = [(f, {}) for f in FAMILIES] + [
    ('SOFT', dict(arch=dict(SOFT.arch_settings['tiny-norm'], embed_dims=(32, 64, 96, 128),
                            num_heads=(2, 4, 6, 8), depths=(1, 1, 1, 1)))),
    ('NaLaFormer', dict(attn_types='official')),
    ('LDN', dict(taps='k3', n_steps=2)),
    ('InfViT', dict(stage_mixers=('linear', 'linear', 'pure', 'pure'))),
    ('InfViTPlain', dict(mixer='pure')),
    ('LDN', dict(stem='conv', overlap_downsample=True)),   # the early-convolution stems
    ('InfViT', dict(stem='conv')),
]
IDS = [f'{f}-{"-".join(k) or "default"}' for f, k in CASES]


@pytest.fixture(scope='module')
def images():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 3, *SMALL, generator=g, dtype=torch.float64),
            torch.randn(1, 3, *BIG, generator=g, dtype=torch.float64))


@pytest.mark.parametrize('family, kwargs', CASES, ids=IDS)
def test_backbone_alone_vs_batched(family, kwargs, images):
    img, other = images
    model = build(family, **kwargs).double()
    alone, batch = alone_and_batched(img, other)
    with torch.no_grad():
        before = max_valid_diff(model, model(alone), model(batch), SMALL)
        masked_alone = model(alone, valid_hw=[SMALL])
        after = max_valid_diff(model, masked_alone, model(batch, valid_hw=[SMALL, BIG]), SMALL)
        unpadded = max_valid_diff(model, masked_alone, model(img), SMALL)
    assert before > 1e-3, before              # the padding does leak without the mask
    assert after < 1e-10, after               # float64 round-off only
    assert unpadded < 1e-10, unpadded         # and equal to the un-padded image
    for out, i in zip(masked_alone, model.out_indices):   # returned padding is zero
        s = model.strides[i]
        assert not out[:, :, -(-SMALL[0] // s):].any()
        assert not out[:, :, :, -(-SMALL[1] // s):].any()


@pytest.mark.parametrize('family', FAMILIES)
def test_with_cp_recomputes_under_the_same_mask(family, images):
    """Activation checkpointing recomputes blocks in the backward pass, outside the forward
    call: the recomputation must use the same padding mask (same gradients as without)."""
    img, other = images
    _, batch = alone_and_batched(img.float(), other.float())
    grads = []
    for with_cp in (False, True):
        model = build(family, with_cp=with_cp, drop_path_rate=0.0).train()
        outs = model(batch.requires_grad_(), valid_hw=[SMALL, BIG])
        sum(o.square().mean() for o in outs).backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, msg=name)


def test_valid_hw_equal_to_input_is_a_no_op(images):
    model = build('NaLaFormer').double()
    x = pad_to(images[0], (round_up(SMALL[0]), round_up(SMALL[1])))
    with torch.no_grad():
        for a, b in zip(model(x), model(x, valid_hw=[tuple(x.shape[-2:])])):
            assert torch.equal(a, b)


# --------------------------------------------------------------------- through mmdet / mmseg
@pytest.mark.parametrize('family', FAMILIES)
def test_mmdet_retinanet_alone_vs_batched(family):
    """A real mmdet RetinaNet (random init, fixed seed, score_thr=0) with the family's tiny
    backbone: DetDataPreprocessor -> enable_valid_region -> backbone.  Backbone maps match to
    float32 round-off; head logits match away from the bottom / right edge, where mmdet's
    FPN and head convolutions themselves see the padding (docs/advanced/batch_independence.md)."""
    from benchlib.batch_independence import build_detector, detector_cfg, measure

    from archs import TINY
    backbone = dict(arch=TINY[family]['arch'])
    if family == 'InfViTPlain':
        backbone['out_indices'] = (2, )
    model = build_detector(detector_cfg(family, backbone))
    g = torch.Generator().manual_seed(1)
    img = torch.randint(0, 256, (3, 120, 152), generator=g, dtype=torch.uint8)
    other = torch.randint(0, 256, (3, 200, 232), generator=g, dtype=torch.uint8)
    before = measure(model, img, other)
    enable_valid_region(model)
    after = measure(model, img, other)
    assert before['backbone'] > 1e-3, before
    assert after['backbone'] < 1e-4, after          # float32 round-off (relative)
    assert after['head_interior'] < 1e-3, after
    assert after['head_interior'] < before['head_interior'] / 100, (before, after)


def test_mmseg_preprocessor_attaches_img_shape():
    from mmengine.structures import PixelData
    from mmseg.models.data_preprocessor import SegDataPreProcessor
    from mmseg.structures import SegDataSample
    holder = nn.Module()
    holder.data_preprocessor = SegDataPreProcessor(  # training: pad to size; test: divisor
        mean=[0, 0, 0], std=[1, 1, 1], size=(96, 96), seg_pad_val=255,
        test_cfg=dict(size_divisor=32))
    hook = ValidRegionHook()
    hook.before_run(types.SimpleNamespace(model=types.SimpleNamespace(module=holder)))
    shapes = [(50, 70), (90, 40)]
    samples = []
    for h, w in shapes:
        s = SegDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w)))
        s.gt_sem_seg = PixelData(data=torch.zeros(1, h, w, dtype=torch.long))
        samples.append(s)
    data = dict(inputs=[torch.zeros(3, h, w, dtype=torch.uint8) for h, w in shapes],
                data_samples=samples)
    out = holder.data_preprocessor(data, training=True)
    assert tuple(out['inputs'].shape[-2:]) == (96, 96)
    assert getattr(out['inputs'], IMAGE_SIZES_ATTR) == tuple(shapes)
    # mmseg tests one image at a time, padded to the size divisor: that padding is masked too
    one = dict(inputs=data['inputs'][:1], data_samples=samples[:1])
    out = holder.data_preprocessor(one, training=False)
    assert tuple(out['inputs'].shape[-2:]) == (64, 96)
    assert getattr(out['inputs'], IMAGE_SIZES_ATTR) == (shapes[0], )
