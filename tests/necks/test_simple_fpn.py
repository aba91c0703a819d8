"""SimpleFeaturePyramid: ViTDet's four branches on one stride-16 map."""
import math

import pytest
import torch
import torch.nn.functional as F
from archs import build

from mmlinattn.models.necks import SimpleFeaturePyramid


def test_branch_widths_sizes_and_known_values():
    """x4 / x2 / x1 / x0.5 give C/4, C/2, C, C channels at 4x, 2x, 1x, ceil(1/2) the size;
    x1 is the input itself and x0.5 its 2x2 max-pool (odd sizes keep the last row)."""
    neck = SimpleFeaturePyramid(in_channels=32).eval()
    x = torch.randn(2, 32, 5, 7)
    with torch.no_grad():
        outs = neck([x])
    assert neck.out_channels == [8, 16, 32, 32]
    assert [tuple(o.shape) for o in outs] == [(2, 8, 20, 28), (2, 16, 10, 14), (2, 32, 5, 7),
                                              (2, 32, 3, 4)]
    assert torch.equal(outs[2], x)
    padded = F.pad(x, (0, 1, 0, 1), value=-math.inf)
    assert torch.equal(outs[3], F.max_pool2d(padded, 2, 2))


def test_out_channels_projects_every_branch_and_all_params_learn():
    neck = SimpleFeaturePyramid(in_channels=32, out_channels=24, scale_factors=(2, 0.5))
    outs = neck((torch.randn(1, 32, 4, 6), ))
    assert neck.out_channels == [24, 24]
    assert [tuple(o.shape) for o in outs] == [(1, 24, 8, 12), (1, 24, 2, 3)]
    sum(o.square().mean() for o in outs).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in neck.parameters())


def test_in_index_none_feeds_one_input_per_branch():
    neck = SimpleFeaturePyramid(in_channels=16, scale_factors=(1, 1), in_index=None)
    a, b = torch.randn(1, 16, 3, 3), torch.randn(1, 16, 3, 3)
    outs = neck([a, b])
    assert torch.equal(outs[0], a) and torch.equal(outs[1], b)
    with pytest.raises(ValueError, match='one input per scale factor'):
        neck([a])


@pytest.mark.parametrize('kwargs, match', [
    (dict(in_channels=30), 'divisible by 4'),
    (dict(in_channels=32, scale_factors=(3, )), 'scale_factors must be drawn'),
    (dict(in_channels=32, scale_factors=()), 'scale_factors must be drawn'),
])
def test_bad_arguments_name_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SimpleFeaturePyramid(**kwargs)


def test_isotropic_backbone_plus_neck_gives_a_stride_4_to_32_pyramid():
    """InfViTPlain (stride 16) + the neck: the pyramid a detector's FPN expects, at
    ceil(H / s) for s = 4, 8, 16, 32 on a padded-to-32 input."""
    backbone = build('InfViTPlain', out_indices=(-1, ))
    neck = SimpleFeaturePyramid(in_channels=backbone.embed_dims[-1]).eval()
    h, w = 64, 96
    with torch.no_grad():
        outs = neck(backbone(torch.randn(1, 3, h, w)))
    assert [tuple(o.shape[-2:]) for o in outs] == [(h // s, w // s) for s in (4, 8, 16, 32)]
