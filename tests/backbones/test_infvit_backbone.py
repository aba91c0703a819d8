"""InfViT (pyramid), InfViTPlain (the paper's isotropic ViT), their InfSA mixers and the
SimpleFeaturePyramid neck."""
import pytest
import torch
from archs import TINY

import mmlinattn.models  # noqa: F401
from backbone_checks import (check_all_params_get_grad, check_bf16_autocast,
                             check_frozen_stages, check_output_shapes, check_strict_reload)
from mmlinattn.models.backbones.infvit import InfViT, InfViTPlain
from mmlinattn.models.layers import InfSABlock, InfSAGamma, LinearInfSA, PureInfSA, TokenGrid
from mmlinattn.registry import MODELS

TINY_PYR = TINY['InfViT']['arch']
TINY_PLAIN = dict(embed_dims=32, num_layers=3, num_heads=4, mlp_ratio=2.0)


def pyramid(**kw):
    kw.setdefault('arch', TINY_PYR)
    kw.setdefault('stage_mixers', ('linear', 'linear', 'linear', 'pure'))
    return InfViT(**kw)


def plain(**kw):
    kw.setdefault('arch', TINY_PLAIN)
    kw.setdefault('out_indices', (0, 2))
    return InfViTPlain(**kw)


# ------------------------------------------------------------------------------ mixers
def test_linear_infsa_same_vector_for_every_token():
    attn = LinearInfSA(32, 4)
    out = attn(torch.randn(2, 50, 32))
    assert out.shape == (2, 50, 32)
    torch.testing.assert_close(out, out[:, :1].expand_as(out), rtol=0, atol=0)
    assert not torch.allclose(out[0], out[1])


def test_linear_infsa_pool_then_project_equals_full_values():
    fast = LinearInfSA(24, 3, learn_gamma=True).double()
    slow = LinearInfSA(24, 3, learn_gamma=True, pool_then_project=False).double()
    slow.load_state_dict(fast.state_dict())
    x = torch.randn(2, 40, 24, dtype=torch.float64)
    torch.testing.assert_close(fast(x), slow(x))


@pytest.mark.parametrize('cls', [LinearInfSA, PureInfSA])
def test_mixer_padding_does_not_change_valid_tokens(cls):
    attn = cls(16, 2).double().eval()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    xp = torch.cat([x, torch.randn(2, 7, 16, dtype=torch.float64)], 1)
    valid = TokenGrid((1, 19), [(1, 12)] * 2)   # the first 12 of 19 tokens
    torch.testing.assert_close(attn(xp, valid)[:, :12], attn(x))


def test_gamma_modes_and_learnable_gamma_in_graph():
    assert InfSAGamma(4, 0.7, 'power', layer_index=3)() == pytest.approx(0.7 ** 3)
    assert InfSAGamma(4, 0.7, 'const', layer_index=3)() == pytest.approx(0.7)
    g = InfSAGamma(4, 0.7, 'power', layer_index=2, learnable=True)
    val = g()
    assert val.shape == (4, ) and val.requires_grad
    torch.testing.assert_close(val, torch.full((4, ), 0.49))
    attn = LinearInfSA(16, 4, gamma=0.6, learn_gamma=True)
    attn(torch.randn(1, 9, 16)).pow(2).sum().backward()
    assert attn.gamma.logit.grad is not None and attn.gamma.logit.grad.abs().sum() > 0
    with pytest.raises(ValueError, match='gamma_mode'):
        InfSAGamma(4, 0.7, 'sum')
    with pytest.raises(ValueError, match='learnable gamma'):
        InfSAGamma(4, 1.2, learnable=True)


def test_mixer_gamma_scales_output_linearly():
    """Z = γ Â V: with the output projection's bias removed, γ scales the output."""
    for cls in (LinearInfSA, PureInfSA):
        a = cls(16, 2, gamma=0.5).double()
        b = cls(16, 2, gamma=0.25).double()
        b.load_state_dict(a.state_dict())
        for m in (a, b):
            torch.nn.init.zeros_(m.proj.bias)
        x = torch.randn(1, 10, 16, dtype=torch.float64)
        torch.testing.assert_close(b(x), 0.5 * a(x))


def test_block_checks_mixer_name():
    with pytest.raises(ValueError, match='mixer'):
        InfSABlock(16, 2, mixer='softmax')


# ------------------------------------------------------------------------------ InfViT
def test_registry_build_tiny_must_show():
    model = MODELS.build(dict(type='InfViT', arch='tiny')).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 224, 224))
    assert [tuple(o.shape) for o in outs] == [(1, 64, 56, 56), (1, 128, 28, 28),
                                             (1, 320, 14, 14), (1, 512, 7, 7)]
    assert model.num_heads == [4, 8, 20, 32]  # head dim 16


@pytest.mark.parametrize('arch,depths', [('tiny', (2, 2, 2, 2)), ('small', (3, 4, 6, 3)),
                                         ('base', (3, 4, 18, 3))])
def test_arch_table(arch, depths):
    model = InfViT(arch=arch)
    assert model.embed_dims == [64, 128, 320, 512] and tuple(model.depths) == depths
    blocks = [b for s in model.stages for b in s.blocks]
    assert len(blocks) == sum(depths)
    assert [s.blocks[0].ffn.fc1.out_features for s in model.stages] == [512, 1024, 1280, 2048]


def test_output_shapes_tiny_with_pure_last_stage():
    model = InfViT(arch='tiny', stage_mixers=('linear', 'linear', 'linear', 'pure'))
    assert isinstance(model.stages[3].blocks[0].attn, PureInfSA)
    assert isinstance(model.stages[2].blocks[0].attn, LinearInfSA)
    check_output_shapes(model)


def test_output_shapes_out_indices_subset():
    check_output_shapes(pyramid(out_indices=(1, 3), use_dwconv=False))


def test_pyramid_strict_reload_across_resolutions():
    check_strict_reload(lambda: pyramid(learn_gamma=True))


def test_pyramid_all_params_get_grad_learnable_gamma():
    model = pyramid(learn_gamma=True, gamma_mode='power', drop_path_rate=0.1)
    assert sum('gamma.logit' in n for n, _ in model.named_parameters()) == 5
    check_all_params_get_grad(model)


def test_pyramid_bf16_autocast_512():
    check_bf16_autocast(pyramid(pure_chunk_size=128))


def test_pyramid_frozen_stages_and_with_cp():
    check_frozen_stages(pyramid, frozen=1)
    a, b = pyramid(), pyramid(with_cp=True)
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 3, 64, 64, requires_grad=True)
    for oa, ob in zip(a(x), b(x)):
        torch.testing.assert_close(oa, ob)
    sum(o.sum() for o in b(x)).backward()
    assert all(p.grad is not None for p in b.stages.parameters())


def test_pyramid_gamma_power_counts_blocks_over_stages():
    model = pyramid(gamma_mode='power')
    exps = [b.attn.gamma.exponent for s in model.stages for b in s.blocks]
    assert exps == [1, 2, 3, 4, 5]


def test_pyramid_bad_arguments():
    with pytest.raises(ValueError, match='unknown arch'):
        InfViT(arch='huge')
    with pytest.raises(ValueError, match='stage_mixers'):
        InfViT(stage_mixers=('linear', 'pure'))
    with pytest.raises(ValueError, match='head_dim'):
        InfViT(arch=TINY_PYR, head_dim=32)


# ------------------------------------------------------------------------------ InfViTPlain
@pytest.mark.parametrize('mixer', ['linear', 'pure'])
def test_plain_output_shapes(mixer):
    model = plain(mixer=mixer)
    assert model.strides == (16, 16, 16)
    check_output_shapes(model)


def test_plain_strict_reload_across_resolutions():
    check_strict_reload(lambda: plain(mixer='pure', learn_gamma=True), (64, 64), (160, 96))


@pytest.mark.parametrize('mixer', ['linear', 'pure'])
def test_plain_all_params_get_grad(mixer):
    model = plain(mixer=mixer, learn_gamma=True, out_indices=(-1, ))
    assert model.patch_embeds[0].cls_token.requires_grad
    check_all_params_get_grad(model)


def test_plain_bf16_autocast_512():
    check_bf16_autocast(plain(mixer='pure', pure_chunk_size=256))


def test_plain_frozen_stages():
    check_frozen_stages(plain, frozen=1)
    model = plain(frozen_stages=0).train()
    assert not model.patch_embeds[0].cls_token.requires_grad


def test_plain_position_embedding_interpolated_not_cropped():
    model = plain().eval()
    pe = model.patch_embeds[0].pos_embed
    assert pe.weight.shape == (1, 32, 14, 14)
    with torch.no_grad():
        pe.weight.normal_()
    x = torch.zeros(1, 32, 20, 9)
    resized = torch.nn.functional.interpolate(pe.weight, size=(20, 9), mode='bicubic',
                                              align_corners=False)
    torch.testing.assert_close(pe(x), resized)


def test_plain_pretrained_with_other_position_grid(tmp_path):
    src = plain(img_size=64)
    path = tmp_path / 'plain.pth'
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in src.state_dict().items()}},
               path)
    dst = plain(img_size=224, init_cfg=dict(type='Pretrained', checkpoint=str(path),
                                            prefix='backbone.'))
    dst.init_weights()
    for k, v in src.state_dict().items():
        if 'pos_embed' not in k:
            torch.testing.assert_close(dst.state_dict()[k], v)
    assert dst.patch_embeds[0].pos_embed.weight.shape == (1, 32, 14, 14)


def test_plain_linear_and_pure_differ_by_one_projection_per_block():
    for arch, width, layers in ((TINY_PLAIN, 32, 3), ('l4', 768, 4)):
        counts = {m: sum(p.numel() for p in InfViTPlain(arch=arch, mixer=m).parameters())
                  for m in ('linear', 'pure')}
        assert counts['pure'] - counts['linear'] == layers * (width * width + width)


def test_plain_arch_table():
    for name, (width, layers, heads) in {'l4': (768, 4, 64), 'l24': (768, 24, 16),
                                         'l4-wide': (1024, 4, 64),
                                         'l24-wide': (1024, 24, 16)}.items():
        arch = InfViTPlain.resolve_arch(name)
        assert (arch['embed_dims'], arch['num_layers'], arch['num_heads']) == (width, layers,
                                                                              heads)
    model = InfViTPlain(arch='l4')
    assert model.stages[0].attn.head_dim == 12  # "64 heads, d_h = 12" (§3.4)
    assert model.stages[0].ffn.fc1.out_features == 4 * 768


def test_plain_bad_arguments():
    with pytest.raises(ValueError, match='num_heads'):
        InfViTPlain(arch=dict(embed_dims=30, num_layers=2, num_heads=4, mlp_ratio=4.0))
    with pytest.raises(ValueError, match='mixer'):
        InfViTPlain(arch=TINY_PLAIN, mixer='softmax')
    with pytest.raises(ValueError, match='out_indices'):
        InfViTPlain(arch=TINY_PLAIN, out_indices=(3, ))


# ------------------------------------------------------------------------------ neck
@pytest.mark.parametrize('out_channels', [None, 24])
def test_plain_with_simple_feature_pyramid_strides(out_channels):
    backbone = plain(out_indices=(-1, )).eval()
    neck = MODELS.build(dict(type='SimpleFeaturePyramid', in_channels=32,
                             out_channels=out_channels)).eval()
    widths = [24] * 4 if out_channels else [8, 16, 32, 32]
    assert neck.out_channels == widths
    for h, w in ((224, 224), (256, 320), (64, 96)):
        with torch.no_grad():
            outs = neck(backbone(torch.randn(1, 3, h, w)))
        assert len(outs) == 4
        for o, s, c in zip(outs, (4, 8, 16, 32), widths):
            assert tuple(o.shape) == (1, c, h // s, w // s)


def test_simple_feature_pyramid_odd_sizes_and_one_input_per_scale():
    neck = MODELS.build(dict(type='SimpleFeaturePyramid', in_channels=32, in_index=None,
                             scale_factors=(4, 2, 1, 0.5)))
    feats = tuple(torch.randn(1, 32, 7, 9) for _ in range(4))  # 112 x 137 at stride 16
    outs = neck(feats)
    # deconvolution gives 4 * ceil(H / 16) rows; max-pool keeps ceil(H / 32)
    assert [tuple(o.shape[-2:]) for o in outs] == [(28, 36), (14, 18), (7, 9), (4, 5)]
    with pytest.raises(ValueError, match='one input per scale'):
        neck(feats[:2])
    with pytest.raises(ValueError, match='scale_factors'):
        MODELS.build(dict(type='SimpleFeaturePyramid', in_channels=32, scale_factors=(3, )))



@pytest.mark.parametrize('dwconv', [True, False])
def test_block_inference_puts_the_ffn_residual_into_fc2(dwconv, gemm_spy):
    """In eager inference the FFN's residual (Mix-FFN or plain MLP: the one residual seam) is
    accumulated by fc2's GEMM: the same block output as the plain sum, run under autograd."""
    torch.manual_seed(0)
    block = InfSABlock(8, 2, mixer='pure', mlp_ratio=2.0, dwconv=dwconv,
                       drop_path=0.1).double().eval()
    grid = TokenGrid((4, 5), [(4, 5), (2, 3)])
    x = torch.randn(2, 20, 8, dtype=torch.float64)
    with torch.no_grad():
        fused = block(x, grid)
    assert len(gemm_spy) == 1
    plain = block(x.clone().requires_grad_(), grid)
    torch.testing.assert_close(fused, plain.detach(), rtol=0, atol=1e-12)
