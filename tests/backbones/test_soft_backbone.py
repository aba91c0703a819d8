"""SOFT++ backbone, its attention module and the SOFT-Norm checkpoint converter."""
import functools
import math

import pytest
import torch
from archs import TINY
import torch.nn as nn
import torch.nn.functional as F
from official_layouts import soft_norm_authors_state_dict
from backbone_checks import (SIZES, check_all_params_get_grad, check_bf16_autocast,
                             check_frozen_stages, check_output_shapes, check_strict_reload)

from mmlinattn.models.backbones.soft import SOFT
from mmlinattn.models.layers import SOFTBlock, SoftmaxBlock
from mmlinattn.models.layers.soft_attention import (LandmarkSampler, SoftAttention, capped_grid,
                                                    capped_grid_slots)
from mmlinattn.models.layers.token_grid import TokenGrid
from mmlinattn.registry import MODELS

# the tiny test arch, and its SOFT-Norm twin (d_h = 16, one block per stage)
MINI = TINY['SOFT']['arch']
MINI_NORM = dict(SOFT.arch_settings['tiny-norm'], embed_dims=(32, 64, 96, 128),
                 num_heads=(2, 4, 6, 8), depths=(1, 1, 1, 1))
PAPER_ARCHS = ('tiny', 'small', 'medium', 'large')
NORM_ARCHS = ('tiny-norm', 'small-norm', 'medium-norm', 'large-norm', 'huge-norm')


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@functools.lru_cache(maxsize=None)
def meta_model(arch):
    """A named arch on the ``meta`` device: the real forward code propagates shapes without
    computing (or allocating) anything, so every arch can be checked at every size."""
    return SOFT(arch=arch, newton_iters=1).eval().to('meta')  # T does not change shapes


# --------------------------------------------------------------------- shapes
def test_must_show_small_224():
    m = MODELS.build(dict(type='SOFT', arch='small')).eval()
    with torch.no_grad():
        outs = m(torch.randn(1, 3, 224, 224))
    assert [tuple(o.shape) for o in outs] == [(1, 96, 56, 56), (1, 192, 28, 28),
                                             (1, 384, 14, 14), (1, 768, 7, 7)]
    assert all(torch.isfinite(o).all() for o in outs)


@pytest.mark.parametrize('arch', PAPER_ARCHS + NORM_ARCHS)
def test_output_shapes_every_arch(arch):
    """224^2, 511^2, 112x137, 33x33 (odd sizes: padded landmark windows, ceil strides)."""
    m = meta_model(arch)
    for h, w in SIZES:
        outs = m(torch.empty(1, 3, h, w, device='meta'))
        assert [tuple(o.shape) for o in outs] == [
            (1, c, math.ceil(h / s), math.ceil(w / s))
            for c, s in zip(m.embed_dims, (4, 8, 16, 32))], (arch, h, w)


@pytest.mark.parametrize('arch', [MINI, MINI_NORM])
def test_output_shapes_and_values(arch):
    """The same sizes computed for real (finite values), default T = 20."""
    check_output_shapes(SOFT(arch=arch))


def test_scope_prefixed_build():
    m = MODELS.build(dict(type='mmlinattn.SOFT', arch=MINI, out_indices=(1, 3)))
    assert isinstance(m, SOFT) and m.out_indices == (1, 3)
    check_output_shapes(m, sizes=[(64, 96)])


# --------------------------------------------------------------------- parameters
@pytest.mark.parametrize('arch,paper_m', [('small', 27), ('medium', 48), ('large', 85)])
def test_param_counts_match_table3(arch, paper_m):
    """Table 3 counts include the ImageNet classifier; the backbone has none, so a
    1000-class linear head (C4 * 1000 + 1000) is added analytically."""
    m = meta_model(arch)
    total = n_params(m) + m.embed_dims[-1] * 1000 + 1000
    assert abs(total / 1e6 - paper_m) / paper_m < 0.03, total


def test_tiny_as_printed_is_not_13m():
    """Table 1's Tiny depths (2, 2, 5, 2) give ~15 M with a head, not Table 3's 13 M
    (the NeurIPS depths 1-2-3-2 give 13 M); implemented as printed."""
    total = n_params(meta_model('tiny')) + 512 * 1000 + 1000
    assert 14.5e6 < total < 15.5e6


@pytest.mark.parametrize('arch,readme_m', [('tiny-norm', 13), ('small-norm', 24),
                                           ('medium-norm', 45), ('large-norm', 64),
                                           ('huge-norm', 87)])
def test_norm_arch_param_counts_match_authors_readme(arch, readme_m):
    total = n_params(meta_model(arch)) + 512 * 1000 + 1000  # their counts include the head
    assert abs(total / 1e6 - readme_m) / readme_m < 0.03, total


def test_landmark_conv_is_shared_across_heads():
    """Table 10: conv sampling adds 0.11 M on Tiny -- only possible with a d_h x d_h conv."""
    m = meta_model('tiny-norm')
    convs = [mod for mod in m.modules() if isinstance(mod, LandmarkSampler)]
    extra = sum(s.conv.weight.numel() for s in convs)
    assert all(s.conv.weight.shape[:2] == (32, 32) for s in convs)
    assert abs(extra - 0.11e6) < 0.01e6, extra


# --------------------------------------------------------------------- contract
def test_strict_reload_across_resolutions():
    check_strict_reload(lambda: SOFT(arch=MINI))
    check_strict_reload(lambda: SOFT(arch=MINI_NORM))


def test_adapt_state_dict_resizes_pos_embed():
    src = SOFT(arch=MINI, pretrain_img_size=256)
    dst = SOFT(arch=MINI)
    sd = dst.adapt_state_dict(src.state_dict())
    assert sd['stages.0.pos_embed.weight'].shape == (1, 32, 56, 56)
    dst.load_state_dict(sd, strict=True)
    ref = F.interpolate(src.stages[3].pos_embed.weight, size=(7, 7), mode='bilinear',
                        align_corners=False)
    torch.testing.assert_close(dst.stages[3].pos_embed.weight, ref)


@pytest.mark.parametrize('arch', [MINI, MINI_NORM])
def test_every_parameter_gets_a_gradient(arch):
    check_all_params_get_grad(SOFT(arch=arch, drop_path_rate=0.1))


@pytest.mark.parametrize('arch', [MINI, MINI_NORM])
def test_bf16_autocast_512(arch):
    check_bf16_autocast(SOFT(arch=arch))


@pytest.mark.parametrize('arch', [MINI, MINI_NORM])
def test_frozen_stages(arch):
    check_frozen_stages(lambda **kw: SOFT(arch=arch, **kw), frozen=1)
    m = SOFT(arch=arch, frozen_stages=1)
    m.train()
    for bn in m.patch_embeds[1].modules():
        if isinstance(bn, nn.BatchNorm2d):
            assert not bn.training


def test_with_cp_matches_plain():
    torch.manual_seed(0)
    a = SOFT(arch=MINI_NORM)
    b = SOFT(arch=MINI_NORM, with_cp=True)
    b.load_state_dict(a.state_dict())
    a.eval(), b.eval()
    x = torch.randn(1, 3, 64, 64, requires_grad=True)
    for oa, ob in zip(a(x), b(x)):
        torch.testing.assert_close(oa, ob)


@pytest.mark.parametrize('kw', [dict(sym_norm=False), dict(newton_init='paper'),
                                dict(landmark_ln_gelu=False), dict(newton_iters=5),
                                dict(newton_init='scaled', newton_ridge=0.01),
                                dict(landmark_grid='crop')])
def test_options_run(kw):
    check_output_shapes(SOFT(arch=MINI, **kw), sizes=[(70, 90)])


def test_bad_arguments():
    with pytest.raises(ValueError, match='unknown arch'):
        SOFT(arch='gigantic')
    with pytest.raises(ValueError, match='divisible'):
        SOFT(arch=dict(MINI, num_heads=(3, 2, 3, 4)))
    with pytest.raises(ValueError, match='attn_types'):
        SOFT(arch=dict(MINI, attn_types=('soft', 'soft', 'soft', 'linear')))
    with pytest.raises(ValueError, match='newton_init'):
        SOFT(arch=MINI, newton_init='fast')
    with pytest.raises(ValueError, match='max_landmarks'):
        SOFT(arch=MINI, max_landmarks=0)
    with pytest.raises(ValueError, match='landmark grid'):
        SOFT(arch=MINI, landmark_grid='floor')


# --------------------------------------------------------------------- landmarks
def test_capped_grid():
    assert capped_grid(7, 7, 64) == (7, 7)
    assert capped_grid(32, 32, 64) == (8, 8)
    for h, w, cap in [(32, 48, 64), (1, 1000, 64), (100, 3, 10), (33, 17, 49)]:
        gh, gw = capped_grid(h, w, cap)
        assert 1 <= gh <= h and 1 <= gw <= w and gh * gw <= cap
        assert gh * gw > cap // 2  # uses most of the budget


def test_capped_grid_is_the_largest_rows_that_fit():
    """h' = the largest g with g^2 w <= h M, by search (no float sqrt to round)."""
    for h, w, cap in [(32, 48, 64), (10, 10, 49), (33, 17, 49), (7, 300, 49), (300, 7, 49)]:
        gh, gw = capped_grid(h, w, cap)
        if h * w > cap:
            g = max(k for k in range(1, cap + 1) if k * k * w <= h * cap) if w <= h * cap \
                else 1
            assert gh == min(h, g), (h, w, cap)
        assert gw == min(w, cap // gh)


@pytest.mark.parametrize('h,w,cap', [(3, 4, 16), (4, 3, 12), (5, 3, 12), (32, 32, 49),
                                     (17, 23, 49), (7, 300, 49), (1, 1, 4), (13, 2, 8)])
def test_capped_grid_slots_are_adaptive_pooling(h, w, cap):
    """The slot form used in traced graphs: the same grid and the same averages as
    ``F.adaptive_avg_pool2d`` onto :func:`capped_grid`, in its first h' w' slots."""
    x = torch.randn(2, 5, h, w, dtype=torch.float64)
    pool_h, pool_w, used = capped_grid_slots(h, w, cap, x)
    gh, gw = capped_grid(h, w, cap)
    assert used.tolist() == [j < gh * gw for j in range(cap)]
    slots = (x @ pool_w.T * pool_h.T).sum(-2)
    expected = F.adaptive_avg_pool2d(x, (gh, gw)).flatten(2)
    torch.testing.assert_close(slots[..., :gh * gw], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('hw', [(16, 16), (17, 23), (9, 9), (3, 5)])
def test_landmarks_pad_never_crop(hw):
    s = LandmarkSampler(8, ratio=8)
    q = torch.randn(2, 3, hw[0] * hw[1], 8)
    lm = s(q, hw)
    assert lm.shape == (2, 3, math.ceil(hw[0] / 8) * math.ceil(hw[1] / 8), 8)
    # The last landmark sees the bottom-right token: changing it changes that landmark.
    q2 = q.clone()
    q2[:, :, -1] += 1.0
    assert not torch.allclose(s(q2, hw)[:, :, -1], lm[:, :, -1])


@pytest.mark.parametrize('hw', [(16, 16), (17, 23), (9, 9)])
def test_landmarks_crop_drops_the_last_rows_and_columns(hw):
    """``grid='crop'`` is the stride-r conv on the map as it is (the authors' code): a grid
    of floor(H / r) x floor(W / r) that the last H mod r rows / W mod r columns never reach."""
    s = LandmarkSampler(8, ratio=8, grid='crop')
    q = torch.randn(2, 3, hw[0] * hw[1], 8)
    lm = s(q, hw)
    assert lm.shape == (2, 3, (hw[0] // 8) * (hw[1] // 8), 8)
    assert s.landmark_grid(hw) == (hw[0] // 8, hw[1] // 8)
    q2 = q.clone().reshape(2, 3, *hw, 8)
    q2[:, :, 8 * (hw[0] // 8):] += 1.0
    q2[:, :, :, 8 * (hw[1] // 8):] += 1.0
    torch.testing.assert_close(s(q2.flatten(2, 3), hw), lm, rtol=0, atol=0)
    pad = LandmarkSampler(8, ratio=8)
    pad.load_state_dict(s.state_dict())
    if hw[0] % 8 == 0 and hw[1] % 8 == 0:
        torch.testing.assert_close(pad(q, hw), lm, rtol=0, atol=0)
    with pytest.raises(ValueError, match='at least 8 x 8'):
        s(torch.randn(1, 1, 35, 8), (5, 7))


def test_landmarks_match_per_head_conv_reference():
    """Conv r x r / stride r with one weight shared by all heads, then LN + GELU."""
    torch.manual_seed(0)
    s = LandmarkSampler(4, ratio=2).double()
    q = torch.randn(1, 3, 6 * 4, 4, dtype=torch.float64)
    out = s(q, (6, 4))
    for head in range(3):
        x = q[0, head].reshape(6, 4, 4).permute(2, 0, 1)[None]
        ref = F.conv2d(x, s.conv.weight, stride=2).flatten(2).transpose(1, 2)
        ref = F.gelu(F.layer_norm(ref, (4, ), s.norm.weight, s.norm.bias))
        torch.testing.assert_close(out[0, head], ref[0])


def test_max_landmarks_caps_m():
    s = LandmarkSampler(8, ratio=2, max_landmarks=16)
    assert s(torch.randn(1, 2, 64 * 48, 8), (64, 48)).shape[2] <= 16
    assert s(torch.randn(1, 2, 6 * 6, 8), (6, 6)).shape[2] == 9  # fits: unchanged
    plain = LandmarkSampler(8, ratio=2)
    plain.load_state_dict(s.state_dict())
    q = torch.randn(1, 2, 36, 8)
    torch.testing.assert_close(s(q, (6, 6)), plain(q, (6, 6)))


def test_backbone_max_landmarks():
    m = SOFT(arch=MINI, max_landmarks=4).eval()
    seen = []
    for mod in m.modules():
        if isinstance(mod, LandmarkSampler):
            mod.register_forward_hook(lambda _m, _i, o: seen.append(o.shape[2]))
    check_output_shapes(m, sizes=[(160, 128)])
    assert seen and max(seen) <= 4


# --------------------------------------------------------------------- attention module
def test_soft_attention_module_matches_dense_reference():
    """Wiring: shared W_q = W_k, q * d_h^-1/4, landmarks, Eq. 17, proj (float64)."""
    torch.manual_seed(0)
    dim, heads, (h, w) = 16, 2, (6, 4)
    att = SoftAttention(dim, heads, sr_ratio=2).double()
    nn.init.constant_(att.sampler.norm.weight, 2.0)  # spread landmarks: A well conditioned
    x = torch.randn(2, h * w, dim, dtype=torch.float64)
    d = dim // heads
    q = (x @ att.qk.weight.T + att.qk.bias).view(2, h * w, heads, d).transpose(1, 2)
    v = (x @ att.v.weight.T + att.v.bias).view(2, h * w, heads, d).transpose(1, 2)
    lm = att.sampler(q * d ** -0.25, (h, w))
    # Eq. 5 on the *unscaled* q with d_e = d_h: the landmarks live in the scaled space.
    lm_unscaled = lm * d ** 0.25
    k1 = torch.exp(-(q[..., :, None, :] - lm_unscaled[..., None, :, :]).square().sum(-1)
                   / (2 * d ** 0.5))
    a = torch.exp(-(lm_unscaled[..., :, None, :] - lm_unscaled[..., None, :, :]).square()
                  .sum(-1) / (2 * d ** 0.5))
    dm = torch.diag_embed(a.sum(-1) ** -0.5)
    s_hat = k1 @ dm @ torch.linalg.pinv(a) @ dm @ k1.transpose(-1, -2)
    ref = (s_hat @ v).transpose(1, 2).reshape(2, h * w, dim) @ att.proj.weight.T + att.proj.bias
    torch.testing.assert_close(att(x, TokenGrid((h, w))), ref, rtol=1e-7, atol=1e-7)


def test_v_conv_is_per_head_depthwise():
    torch.manual_seed(0)
    att = SoftAttention(12, 3, sr_ratio=1, v_conv_size=3).double()
    assert att.v_conv.weight.shape == (3, 1, 3, 3)
    v = torch.randn(2, 3, 5 * 4, 4, dtype=torch.float64)
    out = att._conv_v(v, TokenGrid((5, 4)))
    for b in range(2):
        for head in range(3):
            for c in range(4):
                x = v[b, head, :, c].reshape(1, 1, 5, 4)
                ref = F.conv2d(x, att.v_conv.weight[head:head + 1], padding=1).flatten()
                torch.testing.assert_close(out[b, head, :, c], ref)


# --------------------------------------------------------------------- authors' checkpoints
@pytest.mark.parametrize('arch', ['tiny-norm', 'medium-norm'])
def test_converter_consumes_every_key_and_fills_every_parameter(arch):
    model = SOFT(arch=arch, convert_weights=True)
    theirs = soft_norm_authors_state_dict(SOFT.arch_settings[arch])
    ours = model.convert_checkpoint(theirs)
    own = model.state_dict()
    assert set(ours) == set(own), (sorted(set(ours) - set(own))[:5],
                                   sorted(set(own) - set(ours))[:5])
    assert all(ours[k].shape == own[k].shape for k in own)
    model.load_state_dict(ours, strict=True)
    # Every value of theirs ends up somewhere (head excepted): count the elements.
    used = sum(v.numel() for k, v in theirs.items() if not k.startswith('head.'))
    # cls_token and the class slot of pos_embed4 fold into one (1, 1, C) tensor.
    assert sum(v.numel() for v in ours.values()) == used - model.embed_dims[-1]
    # Spot-check the layout changes.
    c4 = model.embed_dims[-1]
    torch.testing.assert_close(ours['stages.3.blocks.0.attn.qkv.weight'],
                               torch.cat([theirs['block4.0.attn.q.weight'],
                                          theirs['block4.0.attn.kv.weight']]))
    pe = theirs['pos_embed1']  # token (i, j) of the 56 x 56 grid is row i * 56 + j
    torch.testing.assert_close(ours['stages.0.pos_embed.weight'][0, :, 3, 5], pe[0, 3 * 56 + 5])
    torch.testing.assert_close(ours['stages.3.pos_embed.weight'][0, :, 6, 2],
                               theirs['pos_embed4'][0, 1 + 6 * 7 + 2])
    torch.testing.assert_close(ours['stages.3.cls_token'],
                               theirs['cls_token'] + theirs['pos_embed4'][:, :1])
    assert ours['out_norms.3.weight'].shape == (c4, )


def test_converter_through_init_cfg(tmp_path):
    arch = 'tiny-norm'
    path = tmp_path / 'soft_tiny_norm.pth.tar'
    torch.save({'state_dict': soft_norm_authors_state_dict(SOFT.arch_settings[arch]), 'epoch': 1}, path)
    model = SOFT(arch=arch, convert_weights=True,
                 init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    ref = SOFT(arch=arch, convert_weights=True).convert_checkpoint(
        soft_norm_authors_state_dict(SOFT.arch_settings[arch]))
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, ref[k])


def test_converter_rejects_other_depths_and_paper_archs():
    sd = soft_norm_authors_state_dict(dict(SOFT.arch_settings['small-norm'], depths=(1, 3, 20, 4)))
    with pytest.raises(ValueError, match=r'\(1, 3, 20, 4\)'):
        SOFT(arch='small-norm').convert_checkpoint(sd)
    with pytest.raises(ValueError, match='-norm'):
        SOFT(arch='small').convert_checkpoint(sd)


def _authors_soft_block(sd, p, x, hw, heads, ratio):
    """The authors' post-norm SOFT-Norm block, re-derived from their code, with an exact
    pseudo-inverse (float64): LN(x + ff(attn)), LN(x + ff2(gelu_tanh(ff1(x))))."""
    b, n, c = x.shape
    d = c // heads

    def lin(name, t):
        return t @ sd[name + '.weight'].T + sd[name + '.bias']

    q = lin(p + 'mha.W_q', x).reshape(b, n, heads, d).transpose(1, 2) / d ** 0.25
    v = lin(p + 'mha.W_v', x).reshape(b, n, heads, d).transpose(1, 2)
    ql = q.reshape(b * heads, hw[0], hw[1], d).permute(0, 3, 1, 2)
    ql = F.conv2d(ql, sd[p + 'mha.attn.Qlandmark_op.weight'], stride=ratio)
    ql = ql.flatten(2).transpose(1, 2).reshape(b, heads, -1, d)
    ql = F.gelu(F.layer_norm(ql, (d, ), sd[p + 'mha.attn.Qnorm_act.0.weight'],
                             sd[p + 'mha.attn.Qnorm_act.0.bias']))
    k1 = torch.exp(-torch.cdist(q, ql).square() / 2)
    k2 = torch.exp(-torch.cdist(ql, ql).square() / 2)
    dd = k2.sum(-1, keepdim=True).rsqrt()
    out = (k1 @ (dd * torch.linalg.pinv(k2) * dd.transpose(-1, -2))) @ (k1.transpose(-1, -2) @ v)
    vv = v.reshape(b, heads, hw[0], hw[1], d).permute(0, 4, 1, 2, 3).reshape(b * d, heads, *hw)
    ks = sd[p + 'mha.attn.conv.weight'].shape[-1]
    vv = F.conv2d(vv, sd[p + 'mha.attn.conv.weight'], padding=ks // 2, groups=heads)
    out = out + vv.reshape(b, d, heads, n).permute(0, 2, 3, 1)
    out = lin(p + 'mha.ff', out.transpose(1, 2).reshape(b, n, c))
    x = F.layer_norm(x + out, (c, ), sd[p + 'norm1.weight'], sd[p + 'norm1.bias'])
    y = lin(p + 'ff2', F.gelu(lin(p + 'ff1', x), approximate='tanh'))
    return F.layer_norm(x + y, (c, ), sd[p + 'norm2.weight'], sd[p + 'norm2.bias'])


def test_converted_blocks_compute_the_authors_functions():
    """One converted SOFT-Norm block and one softmax block against float64 references of
    the authors' forward passes."""
    torch.manual_seed(0)
    arch = dict(SOFT.arch_settings['tiny-norm'], embed_dims=(64, 64, 64, 64),
                num_heads=(2, 2, 2, 2), depths=(1, 1, 1, 1))
    theirs = {k: v.double() if v.is_floating_point() else v
              for k, v in soft_norm_authors_state_dict(arch).items()}
    p = 'block2.0.att.'
    for k in list(theirs):
        if k.startswith(p) and ('W_' in k or 'ff' in k or 'mha.attn.conv' in k):
            theirs[k] = theirs[k] * 0.1
    theirs[p + 'mha.attn.Qnorm_act.0.weight'] = torch.full((32, ), 2.0, dtype=torch.float64)
    model = SOFT(arch=arch, convert_weights=True).double()
    model.load_state_dict(model.convert_checkpoint(theirs), strict=True)

    blk = model.stages[1].blocks[0]
    assert isinstance(blk, SOFTBlock) and blk.post_norm
    x = torch.randn(2, 8 * 8, 64, dtype=torch.float64)
    torch.testing.assert_close(blk(x, TokenGrid((8, 8))),
                               _authors_soft_block(theirs, p, x, (8, 8), 2, 4),
                               rtol=1e-6, atol=1e-6)

    blk4 = model.stages[3].blocks[0]
    assert isinstance(blk4, SoftmaxBlock)
    x = torch.randn(2, 10, 64, dtype=torch.float64)
    s = 'block4.0.'

    def lin(name, t):
        return t @ theirs[s + name + '.weight'].T + theirs[s + name + '.bias']

    def split(t):
        return t.reshape(2, 10, 2, 32).transpose(1, 2)

    y = F.layer_norm(x, (64, ), theirs[s + 'norm1.weight'], theirs[s + 'norm1.bias'], 1e-6)
    kv = lin('attn.kv', y)
    q, k, v = split(lin('attn.q', y)), split(kv[..., :64]), split(kv[..., 64:])
    att = ((q @ k.transpose(-1, -2)) / 32 ** 0.5).softmax(-1) @ v
    x1 = x + lin('attn.proj', att.transpose(1, 2).reshape(2, 10, 64))
    y = F.layer_norm(x1, (64, ), theirs[s + 'norm2.weight'], theirs[s + 'norm2.bias'], 1e-6)
    ref = x1 + lin('mlp.fc2', F.gelu(lin('mlp.fc1', y)))
    torch.testing.assert_close(blk4(x, TokenGrid((3, 3))), ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize('post_norm', [False, True])
def test_block_inference_accumulates_both_residuals_in_the_gemms(post_norm, gemm_spy):
    """Pre-LN eager inference: the attention's proj and the MLP's fc2 accumulate into the
    residual stream by their GEMMs; the same output as the plain sum, run under autograd.
    The post-norm layout keeps the plain form."""
    torch.manual_seed(0)
    block = SOFTBlock(8, 2, sr_ratio=2, mlp_ratio=2.0, drop_path=0.1,
                      post_norm=post_norm).double().eval()
    grid = TokenGrid((4, 6), [(4, 6), (3, 4)])
    x = torch.randn(2, 24, 8, dtype=torch.float64)
    x0 = x.clone()
    with torch.no_grad():
        fused = block(x, grid)
    assert len(gemm_spy) == (0 if post_norm else 2) and torch.equal(x, x0)
    plain = block(x.clone().requires_grad_(), grid)
    torch.testing.assert_close(fused, plain.detach(), rtol=0, atol=1e-12)
