"""The early-convolution stem (``stem='conv'``) of InfViT and LDN, and LDN's overlapping
down-samplers: the README's shape contract at odd sizes, every new parameter trains, and an
unknown name says what exists.  Batch padding stays out of them:
tests/backbones/test_batch_independence.py.  That they make the pyramids learn a detector
from scratch: tests/tools/test_learns_on_photos.py."""
import pytest
import torch
from archs import build, expected_shapes

from mmlinattn.models.layers import ConvStem

OPTIONS = {'InfViT': dict(stem='conv'),
           'LDN': dict(stem='conv', overlap_downsample=True)}


@pytest.mark.parametrize('family', sorted(OPTIONS))
def test_conv_stem_keeps_the_shape_contract_and_trains(family):
    model = build(family, **OPTIONS[family])
    assert isinstance(model.patch_embeds[0], ConvStem)
    for h, w in ((61, 45), (32, 96)):
        outs = model(torch.randn(2, 3, h, w))
        assert [tuple(o.shape) for o in outs] == expected_shapes(model, 2, h, w)
    model.train()
    sum(o.float().pow(2).mean() for o in model(torch.randn(2, 3, 40, 56))).backward()
    stem = dict(model.patch_embeds[0].named_parameters())
    assert stem and all(p.grad is not None and p.grad.abs().sum() > 0 for p in stem.values())


def test_ldn_overlapping_downsamplers_are_3x3_stride_2():
    model = build('LDN', overlap_downsample=True)
    for embed in model.patch_embeds[1:]:
        assert embed.conv.kernel_size == (3, 3) and embed.conv.stride == (2, 2)
    assert build('LDN').patch_embeds[1].conv.kernel_size == (2, 2)  # the default


@pytest.mark.parametrize('family', sorted(OPTIONS))
def test_unknown_stem_names_the_choices(family):
    with pytest.raises(ValueError, match=r"stem must be one of \('patch', 'conv'\)"):
        build(family, stem='convnext')
