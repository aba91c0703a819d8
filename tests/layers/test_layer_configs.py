"""norm_cfg / act_cfg building, the shared layer helpers and the isotropic token forward."""
import pytest
import torch
from archs import TINY
import torch.nn as nn
import torch.nn.functional as F

import mmlinattn.models  # noqa: F401
from mmlinattn.kernels.residual import residual_step
from mmlinattn.models.backbones import SOFT, InfViTPlain, NaLaFormer
from mmlinattn.models.layers import (LayerNorm2d, NaLaAttention, PatchConv, TokenGrid,
                                     build_act, build_norm, check_heads, per_stage,
                                     resize_pos_embed, tokens_as_map)
from mmlinattn.models.layers.ffn import ConvFFN

SOFT_MINI, NALA_MINI = TINY['SOFT']['arch'], TINY['NaLaFormer']['arch']
FAMILIES = [(SOFT, dict(arch=SOFT_MINI)), (NaLaFormer, dict(arch=NALA_MINI))]


def _embed_norms(model):
    return [m.norm for m in model.patch_embeds.modules() if isinstance(m, PatchConv)]


# --------------------------------------------------------------------- builders
def test_build_norm_and_act_use_mmcv_names():
    assert type(build_norm(dict(type='BN'), 8)) is nn.BatchNorm2d
    assert type(build_norm(dict(type='SyncBN'), 8)) is nn.SyncBatchNorm
    gn = build_norm(dict(type='GN', num_groups=4), 8)
    assert isinstance(gn, nn.GroupNorm) and (gn.num_groups, gn.num_channels) == (4, 8)
    ln = build_norm(dict(type='LN2d', eps=1e-6), 8)
    assert isinstance(ln, LayerNorm2d) and ln.eps == 1e-6
    frozen = build_norm(dict(type='BN', requires_grad=False), 8)
    assert not any(p.requires_grad for p in frozen.parameters())
    act = build_act(dict(type='GELU', approximate='tanh'))
    assert isinstance(act, nn.GELU) and act.approximate == 'tanh'
    assert isinstance(build_act(dict(type='Swish')), nn.SiLU)
    assert isinstance(build_act(None), nn.Identity)
    with pytest.raises(ValueError, match='num_groups'):
        build_norm(dict(type='GN'), 8)
    with pytest.raises(ValueError, match="'BatchNorm'"):
        build_norm(dict(type='BatchNorm'), 8)
    with pytest.raises(TypeError, match='type'):
        build_act('relu')


def test_layer_norm_2d_is_a_channel_layer_norm():
    x = torch.randn(2, 8, 5, 7)
    norm = LayerNorm2d(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    want = F.layer_norm(x.permute(0, 2, 3, 1), (8, ), norm.weight, norm.bias, 1e-6)
    torch.testing.assert_close(norm(x), want.permute(0, 3, 1, 2), rtol=0, atol=0)


def test_resize_pos_embed_matches_timm_without_antialias_and_keeps_float64():
    from timm.layers import resample_abs_pos_embed
    pe = torch.randn(1, 16, 7, 7)
    timm_tokens = resample_abs_pos_embed(pe.flatten(2).transpose(1, 2), (10, 5), (7, 7),
                                         num_prefix_tokens=0, antialias=False)
    want = timm_tokens.transpose(1, 2).reshape(1, 16, 10, 5)
    torch.testing.assert_close(resize_pos_embed(pe, (10, 5)), want)
    # timm interpolates in float32; the checkpoint loader must not round a float64 table
    assert resize_pos_embed(pe.double(), (10, 5)).dtype == torch.float64


# --------------------------------------------------------------------- norm_cfg in backbones
@pytest.mark.parametrize('cls, kw', FAMILIES, ids=['SOFT', 'NaLaFormer'])
def test_default_norm_is_plain_batch_norm(cls, kw):
    model = cls(**kw)
    norms = _embed_norms(model)
    assert norms and all(type(n) is nn.BatchNorm2d for n in norms)
    assert all((n.eps, n.momentum, n.affine) == (1e-5, 0.1, True) for n in norms)


@pytest.mark.parametrize('cls, kw', FAMILIES, ids=['SOFT', 'NaLaFormer'])
def test_norm_cfg_picks_sync_bn_or_group_norm(cls, kw):
    torch.manual_seed(0)
    default = cls(**kw)
    torch.manual_seed(0)
    sync = cls(norm_cfg=dict(type='SyncBN'), **kw)
    assert all(type(n) is nn.SyncBatchNorm for n in _embed_norms(sync))
    assert list(sync.state_dict()) == list(default.state_dict())
    gn = cls(norm_cfg=dict(type='GN', num_groups=4), **kw)
    norms = _embed_norms(gn)
    assert all(isinstance(n, nn.GroupNorm) and n.num_groups == 4 for n in norms)
    stats = {k for k in default.state_dict()
             if k.endswith(('running_mean', 'running_var', 'num_batches_tracked'))}
    assert stats and not stats & set(gn.state_dict())
    gn.eval()
    with torch.no_grad():
        assert all(torch.isfinite(o).all() for o in gn(torch.randn(2, 3, 64, 64)))


def test_soft_act_cfg_reaches_the_stem():
    model = SOFT(arch=SOFT_MINI, act_cfg=dict(type='SiLU'))
    acts = [m.act for m in model.patch_embeds.modules() if isinstance(m, PatchConv)]
    assert len(acts) == 6 and all(isinstance(a, nn.SiLU) for a in acts)


# --------------------------------------------------------------------- shared helpers
def test_check_heads_and_per_stage():
    assert check_heads(64, 4) == 16
    for dim, heads in ((30, 4), (32, 0)):
        with pytest.raises(ValueError, match=rf'dim \({dim}\) must be divisible by num_heads'):
            check_heads(dim, heads)
    assert per_stage(4.0, 3, 'r') == [4.0] * 3
    assert per_stage('a', 2, 'm', ('a', 'b')) == ['a', 'a']
    assert per_stage((1, 2), 2, 'h') == [1, 2]
    with pytest.raises(ValueError, match=r"arch\['h'\] needs 3 entries"):
        per_stage((1, 2), 3, "arch['h']")
    with pytest.raises(ValueError, match='mixers'):
        per_stage(('a', 'c'), 2, 'mixers', ('a', 'b'))


@pytest.mark.parametrize('training', [False, True])
def test_residual_forms_equal_the_two_step_sum(training):
    """The residual seam on a mixer and an FFN (fused into the last linear in inference)
    equals ``shortcut + gamma * module(x)``."""
    torch.manual_seed(0)
    grid = TokenGrid((4, 6))
    x, shortcut = torch.randn(2, 24, 16), torch.randn(2, 24, 16)
    gamma = torch.rand(16)
    for module in (NaLaAttention(16, 2), ConvFFN(16, 32, dw_residual=True)):
        module.train(training)
        with torch.no_grad():
            want = shortcut + gamma * module(x, grid)
            torch.testing.assert_close(residual_step(x, module, grid, gamma=gamma, shortcut=shortcut), want)
            torch.testing.assert_close(residual_step(x, module, grid, shortcut=shortcut), shortcut + module(x, grid))


# --------------------------------------------------------------------- isotropic tokens
def test_plain_forward_tokens_are_the_maps_of_forward():
    torch.manual_seed(0)
    model = InfViTPlain(arch=dict(embed_dims=32, num_layers=2, num_heads=4, mlp_ratio=2.0),
                        img_size=64).eval()
    model.init_default_weights()
    x = torch.randn(2, 3, 64, 80)
    with torch.no_grad():
        tokens, grid = model.forward_tokens(x)
        (maps, ) = model(x)
    assert grid.hw == (4, 5) and tokens.shape == (2, 1 + 20, 32)
    torch.testing.assert_close(tokens_as_map(tokens[:, 1:], grid.hw), maps)
    with torch.no_grad():
        padded, _ = model.forward_tokens(x, valid_hw=[(64, 80), (48, 40)])
    torch.testing.assert_close(padded[:1], tokens[:1])
    assert not torch.allclose(padded[1:], tokens[1:])
    with pytest.raises(ValueError, match='last block'):
        InfViTPlain(arch=dict(embed_dims=32, num_layers=2, num_heads=4, mlp_ratio=2.0),
                    out_indices=(0, )).forward_tokens(x)
