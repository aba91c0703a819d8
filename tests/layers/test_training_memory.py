"""Training forms that keep less for the backward, with the plain gradients: a norm before
linears and a LayerScale folded into a linear (:mod:`mmlinattn.kernels.residual`) keep one
token-sized tensor fewer each, NaLaFormer's block four, and a conv stem that recomputes its
activations one map per unit."""
import contextlib
from unittest import mock

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from autograd_helpers import MATMULS, CountOps, kept_bytes

import mmlinattn.kernels as kernels
import mmlinattn.kernels.residual as fused
from mmlinattn.models.layers import ConvStem, NaLaBlock, TokenGrid

X_SHAPE = (2, 30, 8)


def _perturbed(module):
    """Parameters away from their init (norm weights 1, biases 0, equal LayerScales), so
    every term of every gradient counts."""
    torch.manual_seed(5)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.rand_like(p) - 0.5)
    return module


def _grads(fn, params, *inputs):
    """Output and gradients of ``fn(*inputs)`` w.r.t. the inputs and ``params``."""
    inputs = [t.detach().requires_grad_() for t in inputs]
    out = fn(*inputs)
    out = torch.cat([o.flatten() for o in out]) if isinstance(out, tuple) else out
    grads = torch.autograd.grad(out, inputs + list(params),
                                torch.randn(out.shape, dtype=out.dtype,
                                            generator=torch.Generator().manual_seed(3)))
    return out.detach(), grads


def _plain_linears(norm, x, linear, parts=1):
    y = x if norm is None else norm(x)
    return tuple(F.linear(y, w, b) for w, b in zip(linear.weight.chunk(parts),
                                                   linear.bias.chunk(parts)))


@pytest.mark.parametrize('parts', [1, 4])
def test_normed_linears_keep_the_input_not_the_normed_input(parts):
    """``split(linear(LN(x)))``: the plain outputs and gradients (x, the norm's and the
    linear's parameters) to 1e-12 in float64, one input-sized tensor fewer kept, and no more
    matrix products in the backward than plain autograd's."""
    torch.manual_seed(0)
    norm = _perturbed(nn.LayerNorm(8).double())
    linear = _perturbed(nn.Linear(8, 4 * parts).double())
    params = list(norm.parameters()) + list(linear.parameters())
    x = torch.randn(X_SHAPE, dtype=torch.float64)
    ref_out, ref = _grads(lambda t: _plain_linears(norm, t, linear, parts), params, x)
    out, got = _grads(lambda t: fused.normed_linears(norm, t, linear, parts), params, x)
    torch.testing.assert_close(out, ref_out, rtol=1e-14, atol=1e-14)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)

    xg = x.clone().requires_grad_()
    kept, matmuls = {}, {}
    for name, fn in (('plain', _plain_linears), ('fused', fused.normed_linears)):
        outs = []
        kept[name] = kept_bytes(lambda: outs.append(fn(norm, xg, linear, parts)))
        with CountOps(*MATMULS) as counter:
            sum(o.sum() for o in outs[0]).backward()
        matmuls[name] = counter.total
    assert kept['plain'] - kept['fused'] >= 0.9 * x.numel() * 8, kept
    assert matmuls['fused'] == matmuls['plain'] > 0, matmuls


def test_normed_linears_without_autograd_or_under_autocast_are_the_plain_ops():
    """The custom backward only runs where it rounds like the plain ops: not in inference
    (nothing to keep) and not under autocast (the plain ops' casts)."""
    norm, linear = nn.LayerNorm(8), nn.Linear(8, 16)
    x = torch.randn(X_SHAPE, requires_grad=True)
    with mock.patch.object(fused._NormedLinears, 'apply') as custom:
        with torch.no_grad():
            fused.normed_linears(norm, x, linear, 2)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            outs = fused.normed_linears(norm, x, linear, 2)
        custom.assert_not_called()
    assert outs[0].dtype == torch.bfloat16
    with mock.patch.object(fused._NormedLinears, 'apply') as custom:
        fused.normed_linears(norm, x, linear, 2)
        custom.assert_called_once()


@pytest.mark.parametrize('drop_path', [None, 0.5])
def test_layer_scale_in_the_weight_gives_the_plain_gradients(drop_path):
    """``shortcut + drop_path(gamma * linear(y))`` in training: the same output and gradients
    (to 1e-12, float64) with gamma folded into the weight, one ``y``-sized tensor fewer
    kept, and under autocast nothing folded."""
    from timm.layers import DropPath
    torch.manual_seed(0)
    linear = _perturbed(nn.Linear(8, 8).double())
    gamma = nn.Parameter(torch.rand(8, dtype=torch.float64))
    dp = None if drop_path is None else DropPath(drop_path)
    # 600 tokens: the folded weight (8 x 8, kept instead) is small against a token tensor
    shortcut, y = (torch.randn(2, 300, 8, dtype=torch.float64) for _ in range(2))
    params = [gamma] + list(linear.parameters())

    def plain(s, t):
        torch.manual_seed(1)   # the same DropPath mask
        z = gamma * linear(t)
        return s + (z if dp is None else dp(z))

    def folded(s, t):
        torch.manual_seed(1)
        return fused.residual_branch(s, linear, t, gamma, dp, training=True)
    ref_out, ref = _grads(plain, params, shortcut, y)
    out, got = _grads(folded, params, shortcut, y)
    torch.testing.assert_close(out, ref_out, rtol=1e-14, atol=1e-14)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)

    yg = y.clone().requires_grad_()
    kept = {name: kept_bytes(lambda: fn(shortcut, yg)) for name, fn in (('plain', plain),
                                                                        ('folded', folded))}
    assert kept['plain'] - kept['folded'] >= 0.9 * y.numel() * 8, kept
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert fused.layer_scaled_linear(linear.float(), gamma.float(), y.float())[2] is not None


@contextlib.contextmanager
def _plain_block_forms():
    """Within: blocks normalise before their linears and scale their branches the plain way
    (what autograd kept before these forms)."""
    unfolded = lambda linear, gamma, y: (linear.weight, linear.bias, gamma)  # noqa: E731
    with contextlib.ExitStack() as stack:
        # the layers call the seam's entry: patched in the set (read-only to attributes)
        stack.enter_context(mock.patch.dict(vars(kernels.seam), normed_linears=_plain_linears))
        for target, form in (('mmlinattn.kernels.residual.normed_linears', _plain_linears),
                             ('mmlinattn.kernels.residual.layer_scaled_linear', unfolded)):
            stack.enter_context(mock.patch(target, form))
        yield


def test_nalaformer_block_keeps_four_token_tensors_fewer():
    """A NaLaFormer block in training (float64): the plain form's output and gradients to
    1e-12, and four (B, N, C) tensors fewer kept for the backward (two normalised inputs, two
    LayerScale products), less the two folded weights and biases kept instead."""
    torch.manual_seed(0)
    block = _perturbed(NaLaBlock(32, 2, mlp_ratio=3, layer_scale_init_value=0.7,
                                 fuse=False)).double()
    x = torch.randn(2, 16 * 16, 32, dtype=torch.float64)
    grid = TokenGrid((16, 16))

    def run():
        xg = x.clone().requires_grad_()
        return (*_grads(lambda t: block(t, grid), list(block.parameters()), x),
                kept_bytes(lambda: block(xg, grid)))
    out, got, kept = run()
    with _plain_block_forms():
        ref_out, ref, kept_plain = run()
    torch.testing.assert_close(out, ref_out, rtol=1e-13, atol=1e-13)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)
    folded = sum(p.numel() for p in (*block.attn.proj.parameters(),
                                     *block.ffn.fc2.parameters())) * 8
    assert kept_plain - kept >= 4 * x.numel() * 8 - folded, (kept_plain, kept, folded)


def test_conv_stem_recomputes_its_activations_not_its_convs():
    """NaLaFormer's stem (conv-BN-GELU x 3, conv-BN) with ``recompute_act``: the plain output,
    gradients (float64, 1e-12) and BatchNorm running statistics (updated once), one
    GELU-output map fewer kept per recomputed unit, and no conv run again in the backward."""
    gelu = dict(type='GELU')
    stems = {}
    for recompute in (False, True):
        torch.manual_seed(0)
        stems[recompute] = _perturbed(ConvStem(3, (8, 8, 8, 16), (2, 1, 1, 2),
                                               (gelu, gelu, gelu, None), norm_cfg=dict(type='BN'),
                                               recompute_act=recompute)).double().train()
    x = torch.randn(2, 3, 20, 18, dtype=torch.float64)
    grid = TokenGrid((20, 18))
    results = {}
    for recompute, stem in stems.items():
        out, grads = _grads(lambda t: stem(t, grid)[0], list(stem.parameters()), x)
        stats = [b.clone() for b in stem.buffers()]
        xg = x.clone().requires_grad_()
        outs = []
        kept = kept_bytes(lambda: outs.append(stem(xg, grid)[0]))
        with CountOps('convolution', 'convolution_backward') as counter:
            outs[0].sum().backward()
        results[recompute] = out, grads, stats, kept, tuple(counter.counts.values())
    (out, grads, stats, kept, convs), (ref_out, ref, ref_stats, ref_kept, ref_convs) = (
        results[True], results[False])
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)
    for b, r in zip(stats, ref_stats):   # running means, variances, batch counts
        torch.testing.assert_close(b, r, rtol=0, atol=0)
    gelu_map = 2 * 8 * 10 * 9 * 8        # a unit's output at stride 2, float64
    assert ref_kept - kept >= 3 * gelu_map, (ref_kept, kept)
    assert convs == ref_convs == (0, 4), (convs, ref_convs)   # (forward, backward) convs
