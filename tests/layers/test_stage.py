"""A stage handed its input (``owned``) adds its position embedding into it in inference, and
on a large map writes each block's output back into it: the same map as otherwise, one map
fewer alive through the stage."""
import pytest
import torch
import torch.nn as nn

from mmlinattn.kernels import policy
from mmlinattn.models.layers import BilinearPosEmbed, BlockStage, SinCosPosEmbed2d
from mmlinattn.models.layers.token_grid import TokenGrid


class Twice(nn.Module):
    def forward(self, t, grid):
        return t * 2


@pytest.mark.parametrize('pos', [lambda: BilinearPosEmbed(8, (3, 3)),
                                 lambda: SinCosPosEmbed2d(8)], ids=['bilinear', 'sincos'])
@pytest.mark.parametrize('valid', [None, [(7, 5), (4, 3)]])
def test_owned_stage_adds_the_embedding_in_place(pos, valid):
    torch.manual_seed(0)
    stage = BlockStage([Twice()], pos_embed=pos()).eval()
    grid = TokenGrid((7, 5), valid)
    x = torch.randn(2, 8, 7, 5).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        want = stage(x, grid)
        mine = x.clone()
        got = stage(mine, grid, owned=True)
    assert torch.equal(got, want)
    assert torch.equal(mine, want / 2)  # the embedding went into the caller's map
    # with autograd the caller's map is left as it is
    leaf = x.clone().requires_grad_()
    stage(leaf, grid, owned=True).sum().backward()
    assert torch.equal(leaf.detach(), x) and leaf.grad is not None


@pytest.mark.parametrize('large', [False, True])
def test_owned_stage_writes_the_blocks_outputs_into_its_input(large, monkeypatch):
    """Above the size (here every size) the blocks' outputs go back into the caller's map,
    which the stage's output then views; below it, and without ownership, they do not."""
    if large:
        monkeypatch.setattr(policy, 'STRIPE_MAP_BYTES', 0)
    torch.manual_seed(0)
    stage = BlockStage([Twice(), Twice()], pos_embed=SinCosPosEmbed2d(8)).eval()
    x = torch.randn(1, 8, 6, 4).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        want = stage(x, None)
        mine = x.clone()
        got = stage(mine, None, owned=True)
        hooked = BlockStage([Twice(), Twice()], pos_embed=SinCosPosEmbed2d(8)).eval()
        hooked.blocks[0].register_forward_hook(lambda *a: None)
        other = x.clone()
        kept = hooked(other, None, owned=True)  # a hook on a block: no reuse
    assert torch.equal(got, want) and torch.equal(kept, want)
    assert (got.data_ptr() == mine.data_ptr()) == large
    assert kept.data_ptr() != other.data_ptr()
