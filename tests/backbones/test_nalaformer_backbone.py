"""NaLaFormer backbone, block and attention module."""
import math

import pytest
import torch
from archs import TINY
from autograd_helpers import kept_bytes, plain_autograd_core
import torch.nn.functional as F
from backbone_checks import (check_all_params_get_grad, check_bf16_autocast,
                             check_frozen_stages, check_output_shapes, check_strict_reload)

from mmlinattn.models.backbones import NaLaFormer
from mmlinattn.models.layers import (NaLaAttention, NaLaBlock, TokenGrid, apply_rope,
                                     rope_2d_angles)
from mmlinattn.registry import MODELS

MINI = TINY['NaLaFormer']['arch']


def build_mini(**kwargs):
    return NaLaFormer(arch=dict(MINI), **kwargs)


def test_tiny_224_channels_and_strides():
    model = MODELS.build(dict(type='NaLaFormer', arch='tiny')).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 224, 224))
    assert [tuple(o.shape) for o in outs] == [(1, 64, 56, 56), (1, 128, 28, 28),
                                              (1, 256, 14, 14), (1, 512, 7, 7)]


@pytest.mark.parametrize('kwargs', [dict(), dict(attn_types='official'),
                                    dict(kernel='relu_split', attn_types='softmax')])
def test_output_shapes(kwargs):
    check_output_shapes(build_mini(**kwargs))


# Table 1 (params, M) and an independent hand count of the authors' official configs, both
# with the ImageNet head.  Table 1's "15M" for T is 15.9M for the authors' own config (their
# code and the hand count agree), so T is checked as 15.x M (Table 1 truncated).
PAPER_PARAMS = {'tiny': (15, 15.9), 'small': (26, 25.7), 'base': (52, 52.0),
                'large': (95, 95.4)}


def classifier_head_params(c4: int, proj: int = 1024, classes: int = 1000) -> int:
    """Authors' head (their code): Linear(C4, 1024) + BN(1024) + Conv1x1(1024, classes)."""
    return (c4 * proj + proj) + 2 * proj + (proj * classes + classes)


@pytest.mark.parametrize('arch', list(PAPER_PARAMS))
def test_param_counts_with_head_match_table1(arch):
    model = NaLaFormer(arch=arch)
    backbone = sum(p.numel() for p in model.parameters())
    out_norms = sum(p.numel() for p in model.out_norms.parameters())  # ours, not theirs
    total = (backbone - out_norms + classifier_head_params(model.embed_dims[-1])) / 1e6
    paper, hand = PAPER_PARAMS[arch]
    assert abs(total - hand) < 0.1, total
    if arch == 'tiny':
        assert math.floor(total) == paper, total
    else:
        assert abs(total - paper) / paper < 0.05, total


@pytest.mark.parametrize('attn_types', ['nala', 'official'])
def test_strict_reload_across_resolutions(attn_types):
    check_strict_reload(lambda: build_mini(attn_types=attn_types))


@pytest.mark.parametrize('kwargs', [dict(), dict(attn_types='official'),
                                    dict(kernel='relu_split')])
def test_all_params_get_grad(kwargs):
    check_all_params_get_grad(build_mini(**kwargs))


@pytest.mark.parametrize('attn_types', ['nala', 'official'])
def test_bf16_autocast_512(attn_types):
    check_bf16_autocast(build_mini(attn_types=attn_types), size=(512, 512))


def test_frozen_stages():
    check_frozen_stages(build_mini, frozen=1)


def test_official_attn_types_build_and_run():
    model = MODELS.build(dict(type='NaLaFormer', arch=dict(MINI), attn_types='official'))
    assert model.attn_types == ('nala', 'nala', 'softmax', 'softmax')
    for stage, kind in zip(model.stages, model.attn_types):
        assert all(blk.attn.attn_type == kind for blk in stage.blocks)
    assert all(blk.attn.attn_type == 'nala' for s in build_mini().stages for blk in s.blocks)
    with torch.no_grad():
        outs = model.eval()(torch.randn(2, 3, 96, 64))
    assert [tuple(o.shape[-2:]) for o in outs] == [(24, 16), (12, 8), (6, 4), (3, 2)]


@pytest.mark.parametrize('bad', ['linear', ('nala', 'softmax'), ('nala', ) * 3 + ('relu', )])
def test_bad_attn_types(bad):
    with pytest.raises(ValueError, match='attn_types'):
        build_mini(attn_types=bad)


def test_bad_arch():
    with pytest.raises(ValueError, match='tiny'):
        NaLaFormer(arch='huge')
    with pytest.raises(ValueError, match='mlp_ratios'):
        NaLaFormer(arch=dict(MINI, mlp_ratios=(4, 4)))
    with pytest.raises(ValueError, match='num_heads'):
        NaLaFormer(arch=dict(MINI, num_heads=(1, 2, 5, 4)))


def test_arch_hyperparameters():
    tiny = NaLaFormer(arch='tiny')
    assert tiny.drop_path_rate == pytest.approx(0.1)
    assert tiny.stages[-1].blocks[-1].drop_path.drop_prob == pytest.approx(0.1)
    assert NaLaFormer(arch='tiny', drop_path_rate=0.0).stages[-1].blocks[-1].drop_path \
        .__class__.__name__ == 'Identity'
    blk = tiny.stages[2].blocks[0]
    assert blk.attn.num_heads == 4 and blk.attn.head_dim == 64
    assert blk.ffn.fc1.out_features == 1024
    torch.testing.assert_close(blk.gamma1, torch.ones(256))
    base = NaLaFormer(arch='base')
    assert base.stages[0].blocks[0].attn.head_dim == 96
    assert base.stages[1].blocks[0].gamma2[0].item() == 1.0
    assert base.stages[2].blocks[0].gamma1[0].item() == pytest.approx(1e-6)


# ---------------------------------------------------------------------- attention module
@pytest.mark.parametrize('attn_type', ['nala', 'softmax'])
def test_attention_permutation_equivariant_without_positional_terms(attn_type):
    attn = NaLaAttention(32, 2, attn_type=attn_type, lepe=False, rope=False).double()
    hw = TokenGrid((5, 6))
    x = torch.randn(2, 30, 32, dtype=torch.float64)
    perm = torch.randperm(30)
    torch.testing.assert_close(attn(x[:, perm], hw), attn(x, hw)[:, perm])
    # control: the positional terms break it
    pos = NaLaAttention(32, 2, attn_type=attn_type, lepe=attn_type == 'nala').double()
    assert not torch.allclose(pos(x[:, perm], hw), pos(x, hw)[:, perm], atol=1e-6)


def test_softmax_branch_is_rope_softmax_attention():
    attn = NaLaAttention(32, 2, attn_type='softmax', lepe=False).double()
    h, w = 3, 5
    x = torch.randn(1, h * w, 32, dtype=torch.float64)
    q, k, v, g = attn.qkvg(x).chunk(4, dim=-1)
    heads = [t.view(1, h * w, 2, 16).transpose(1, 2) for t in (q, k, v)]
    ang = rope_2d_angles(h, w, 16).double()
    qr, kr = apply_rope(heads[0], ang), apply_rope(heads[1], ang)
    o = torch.softmax(qr @ kr.transpose(-2, -1) / 4.0, dim=-1) @ heads[2]
    o = o.transpose(1, 2).reshape(1, h * w, 32)
    ref = attn.proj(attn.norm(o) * F.silu(g))
    torch.testing.assert_close(attn(x, TokenGrid((h, w))), ref)


def test_rope_is_relative_and_norm_preserving():
    h, w, d = 6, 7, 16
    ang = rope_2d_angles(h, w, d).double()
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
    qs = apply_rope(q.expand(h * w, d), ang)
    ks = apply_rope(k.expand(h * w, d), ang)
    torch.testing.assert_close(qs.norm(dim=-1), q.norm().expand(h * w))
    idx = lambda r, c: r * w + c  # noqa: E731
    # score depends only on the (row, col) offset between the two tokens
    s1 = qs[idx(1, 2)] @ ks[idx(3, 1)]
    s2 = qs[idx(3, 5)] @ ks[idx(5, 4)]
    torch.testing.assert_close(s1, s2)
    assert not torch.allclose(s1, qs[idx(1, 2)] @ ks[idx(3, 2)])
    with pytest.raises(ValueError, match='head_dim'):
        rope_2d_angles(2, 2, 6)


def test_block_runs_on_non_square_grid_and_gamma_none():
    blk = NaLaBlock(32, 2, mlp_ratio=2.0, layer_scale_init_value=None).eval()
    assert blk.gamma1 is None
    x = torch.randn(2, 3 * 11, 32)
    assert blk(x, TokenGrid((3, 11))).shape == x.shape
    with pytest.raises(ValueError, match='grid'):
        blk(x, TokenGrid((4, 8)))


def _plain_block(blk, x, hw):
    """The NaLaFormer block of App. A.2 / Fig. 2a written with standard NCHW convs and one
    op per term (no folded identities, no fused residuals, no split projections)."""
    from mmlinattn.kernels import fast_nala_attention

    def conv(c, t):
        b, n, ch = t.shape
        m = t.transpose(1, 2).reshape(b, ch, *hw)
        return F.conv2d(m, c.weight, c.bias, padding=c.padding, groups=c.groups) \
            .flatten(2).transpose(1, 2)

    a, f = blk.attn, blk.ffn
    x = x + conv(blk.cpe1, x)
    h = blk.norm1(x)
    q, k, v, g = (h @ a.qkvg.weight.T + a.qkvg.bias).chunk(4, dim=-1)
    b, n, c = h.shape
    heads = [t.reshape(b, n, a.num_heads, -1).transpose(1, 2) for t in (q, k, v)]
    o = fast_nala_attention(*heads, fuse=False).transpose(1, 2).reshape(b, n, c)
    o = o + conv(a.lepe, v)
    o = a.proj(a.norm(o) * F.silu(g))
    x = x + blk.gamma1 * o
    x = x + conv(blk.cpe2, x)
    y = F.gelu(f.fc1(blk.norm2(x)))
    y = f.fc2(y + conv(f.dwconv, y))
    return x + blk.gamma2 * y


@pytest.mark.parametrize('grad', [False, True])
def test_block_equals_its_plain_formulation(grad):
    """The fast block (identity folded into the depthwise kernels; without autograd the
    LayerScale residuals inside the output GEMMs, with it addcmul residuals; q, k, v and the
    gate from their own rows of the fused projection; chunked attention) computes the same
    function as the term-by-term formulation, with and without autograd."""
    torch.manual_seed(1)
    blk = NaLaBlock(32, 2, mlp_ratio=2.0, layer_scale_init_value=0.7).double().eval()
    for p in blk.parameters():  # non-trivial values everywhere (biases start at zero)
        p.data.add_(0.05 * torch.randn_like(p))
    x = torch.randn(2, 5 * 7, 32, dtype=torch.float64, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        got = blk(x, TokenGrid((5, 7)))
        ref = _plain_block(blk, x, (5, 7))
    torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
    if grad:
        inputs = [x, *blk.parameters()]
        grad_out = torch.randn_like(got)
        for a, b in zip(torch.autograd.grad(got, inputs, grad_out),
                        torch.autograd.grad(ref, inputs, grad_out)):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_block_training_keeps_fewer_activations():
    """In training the block recomputes the attention's feature maps, its norm and gate, and
    the FFN's activation and depthwise conv in the backward: what autograd keeps from the
    forward is about 2 / 3 of the plain formulation's."""
    torch.manual_seed(0)
    blk = NaLaBlock(32, 1, mlp_ratio=3.5).train()
    x = torch.randn(1, 32 * 32, 32, requires_grad=True)

    def kept(fn):   # in tensors the size of x
        return kept_bytes(fn) / x.numel() / 4
    fast = kept(lambda: blk(x, TokenGrid((32, 32))))
    with plain_autograd_core():
        plain = kept(lambda: _plain_block(blk, x, (32, 32)))
    assert fast < 0.7 * plain, (fast, plain)


@pytest.mark.parametrize('gamma', [False, True])
@pytest.mark.parametrize('bias', [False, True])
def test_residual_linear_equals_the_two_step_form(gamma, bias):
    from mmlinattn.kernels.residual import residual_linear
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 4, bias=bias).double()
    x, y = torch.randn(2, 9, 4, dtype=torch.float64), torch.randn(2, 9, 6, dtype=torch.float64)
    g = torch.rand(4, dtype=torch.float64) if gamma else None
    x0 = x.clone()
    with torch.no_grad():
        got = residual_linear(x, lin, y, g)
        ref = x + (lin(y) if g is None else g * lin(y))
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    assert torch.equal(x, x0)            # the residual input is not written to


def test_residual_linear_under_autocast_is_the_autocast_two_step_form():
    from mmlinattn.kernels.residual import residual_linear
    torch.manual_seed(0)
    lin, g = torch.nn.Linear(6, 4), torch.rand(4)
    x, y = torch.randn(2, 9, 4), torch.randn(2, 9, 6).bfloat16()   # y from a bf16 op
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        got = residual_linear(x, lin, y, g)
        ref = torch.addcmul(x, g, lin(y))
    assert got.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_conv_tokens_folds_the_identity_only_without_padding():
    from mmlinattn.models.layers.channels_last import conv_tokens
    from mmlinattn.models.layers.token_grid import TokenGrid
    conv = torch.nn.Conv2d(6, 6, 3, padding=1, groups=6).double()
    x = torch.randn(2, 4 * 5, 6, dtype=torch.float64)
    full = TokenGrid((4, 5))

    def plain(grid):
        m = x.transpose(1, 2).reshape(2, 6, 4, 5)
        return x + conv(grid.zero_padding(m)).flatten(2).transpose(1, 2)
    torch.testing.assert_close(conv_tokens(conv, x, full, residual=True), plain(full))
    # a padded batch: the second image is 2 x 3 of the 4 x 5 grid; the conv reads zeros
    # outside it, while the residual keeps the input (as x + conv(zero_padding(x)))
    padded = TokenGrid((4, 5), [(4, 5), (2, 3)])
    got = conv_tokens(conv, x, padded, residual=True)
    torch.testing.assert_close(got, plain(padded))
    assert not torch.allclose(got, conv_tokens(conv, x, full, residual=True))
    strided = torch.nn.Conv2d(6, 6, 3, stride=2, padding=1, groups=6).double()
    assert conv_tokens(strided, x, full).shape == (2, 2 * 3, 6)


def test_fused_backbone_equals_eager(monkeypatch):
    """The default inference path (compiled NaLa feature maps) against the eager maps of
    the same weights, at two resolutions."""
    from mmlinattn.kernels.policy import COMPILE_ENV
    monkeypatch.setenv(COMPILE_ENV, '1')
    fused = NaLaFormer('tiny').eval()
    eager = NaLaFormer('tiny', fuse_feature_maps=False).eval()
    eager.load_state_dict(fused.state_dict())
    with torch.no_grad():
        for hw in ((96, 128), (160, 96)):
            x = torch.randn(1, 3, *hw)
            for a, b in zip(fused(x), eager(x)):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
