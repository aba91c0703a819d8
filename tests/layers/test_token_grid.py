"""TokenGrid: the explicit grid (and padding masks) every stage, block and mixer receives."""
import math

import pytest
import torch
from archs import TINY

from mmlinattn.models.backbones import InfViT
from mmlinattn.models.layers.token_grid import TokenGrid


def test_downsample_is_the_ceil_rule_and_composes():
    grid = TokenGrid((67, 90), [(67, 90), (33, 41)])
    for s in (2, 4, 8, 16, 32):
        down = grid.downsample(s)
        assert down.hw == (math.ceil(67 / s), math.ceil(90 / s))
        assert down.valid_hw[1] == (math.ceil(33 / s), math.ceil(41 / s))
    # a stride-4 stem then stride-2 down-samplers give the stride-32 grid of the input
    chained = grid.downsample(4).downsample(2).downsample(2).downsample(2)
    direct = grid.downsample(32)
    assert (chained.hw, chained.valid_hw) == (direct.hw, direct.valid_hw)
    # a cropping conv (SOFT's authors' landmarks): floor grid, valid sizes clipped to it
    crop = grid.downsample(8, crop=True)
    assert crop.hw == (8, 11) and crop.valid_hw == ((8, 11), (5, 6))


def test_full_images_need_no_mask_and_cost_nothing():
    x = torch.randn(2, 3, 4, 5)
    for grid in (TokenGrid((4, 5)), TokenGrid((4, 5), [(4, 5), (4, 5)])):
        assert not grid.padded
        assert grid.zero_padding(x) is x
        assert grid.token_mask() is None and grid.map_mask() is None
    # padded at the input, full at a coarser stride: no mask there either
    assert not TokenGrid((64, 64), [(64, 64), (63, 61)]).downsample(4).padded


def test_masks_are_built_once_per_grid():
    grid = TokenGrid((4, 5), [(4, 5), (2, 3)])
    t = grid.token_mask(torch.device('cpu'))
    assert t is grid.token_mask(torch.device('cpu'))
    assert grid.map_mask(torch.device('cpu'), torch.float64) is \
        grid.map_mask(torch.device('cpu'), torch.float64)
    assert t.shape == (2, 20) and t[0].all() and t[1].sum() == 6
    assert t[1].view(4, 5)[:2, :3].all()


def test_valid_tokens_counts_prefix_tokens_as_valid_and_checks_shapes():
    grid = TokenGrid((2, 3), [(2, 3), (1, 2)])
    mask = grid.valid_tokens(torch.zeros(2, 1 + 6, 8))   # a class token first
    assert mask[:, 0].all() and mask[1, 1:].tolist() == [True, True, False, False, False, False]
    with pytest.raises(ValueError, match='batch size 3'):
        grid.valid_tokens(torch.zeros(3, 6, 8))
    with pytest.raises(ValueError, match='do not fill'):
        grid.valid_tokens(torch.zeros(2, 5, 8))


def test_zero_padding_batch_major_leading_multiple():
    grid = TokenGrid((3, 3), [(3, 3), (1, 2)])
    x = torch.ones(2 * 4, 5, 3, 3)                      # (B * heads, d, H, W)
    y = grid.zero_padding(x).view(2, 4, 5, 3, 3)
    assert y[0].all() and y[1, :, :, :1, :2].all() and y[1].sum() == 4 * 5 * 2
    with pytest.raises(ValueError, match='multiple'):
        grid.zero_padding(torch.ones(3, 5, 3, 3))
    with pytest.raises(ValueError, match='not on the grid'):
        grid.zero_padding(torch.ones(2, 5, 3, 4))


def test_blocks_get_the_grid_of_their_stage():
    """The backbone resolves the grid once and hands each stage's grid to every block."""
    model = InfViT(arch=TINY['InfViT']['arch']).eval()
    seen = []
    for blk in (s.blocks[0] for s in model.stages):
        blk.register_forward_pre_hook(lambda m, args: seen.append(args[1]))
    with torch.no_grad():
        model(torch.randn(2, 3, 64, 96), valid_hw=[(64, 96), (40, 50)])
    assert all(isinstance(g, TokenGrid) for g in seen)
    assert [g.hw for g in seen] == [(16, 24), (8, 12), (4, 6), (2, 3)]
    assert [g.valid_hw[1] for g in seen] == [(10, 13), (5, 7), (3, 4), (2, 2)]
