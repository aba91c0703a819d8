"""The dispatch of the fast forms (:mod:`mmlinattn.kernels.dispatch`): each form's availability
is asked once per backbone forward, its verifier per call; each verifier rejects the calls
its form cannot take; a form picked in float64 equals the plain ops."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from archs import build

from mmlinattn.kernels import branch_output, dispatch, policy
from mmlinattn.kernels.chunked import triton_allowed
from mmlinattn.kernels.compiled import compiled_allowed
from mmlinattn.kernels.depthwise import custom_depthwise_backward, depthwise_slices
from mmlinattn.kernels.onednn import onednn_allowed
from mmlinattn.kernels.recompute import checkpointed, recomputes
from mmlinattn.kernels.residual import (gemm_accumulates, layer_scale_folded, normed_linears,
                                        norm_recomputed, residual_branch, residual_linear)
from mmlinattn.models.layers.ffn import ConvFFN
from mmlinattn.models.layers.token_grid import TokenGrid


def _count_asks(monkeypatch):
    """Per form: how often its availability and its verifier are asked."""
    asked = {}
    for name, form in dispatch.FORMS.items():
        asked[name] = [0, 0]

        def available(ctx, _real=form.available, _n=asked[name]):
            _n[0] += 1
            return _real(ctx)

        def verify(*args, _real=form.verify, _n=asked[name], **kwargs):
            _n[1] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(form, 'available', available)
        monkeypatch.setattr(form, 'verify', verify)
    return asked


def test_a_dispatch_runs_its_choice_and_a_rule_only_runs_forms(monkeypatch):
    """A dispatch calls the fast function where the rule is available and the call verified,
    the plain one elsewhere (a plain context, a rejected call); a rule answers no call."""
    monkeypatch.setattr(dispatch, 'FORMS', {})
    rule = dispatch.FastForm('a test form', policy.plain_unavailable, lambda x: x > 0)
    ran = []
    entry = rule.dispatch(lambda x: ran.append('plain') or -x)(lambda x: ran.append('fast') or x)
    assert (entry(2), entry(-3)) == (2, 3) and ran == ['fast', 'plain']
    plain = policy.read_context()._replace(plain=True)
    policy.run_in(plain, entry, 5)
    assert ran[-1] == 'plain'
    with pytest.raises(TypeError):
        rule(1)   # no call site asks a rule yes or no: it runs a dispatch


@pytest.mark.parametrize('family', ['NaLaFormer', 'LDN'])
def test_a_forward_asks_each_availability_once(family, monkeypatch):
    model = build(family)
    x = torch.randn(1, 3, 48, 64)
    asked = _count_asks(monkeypatch)
    with torch.no_grad():
        model(x)
    outs = model.train()(x)
    # two forwards: at most one availability question per form and forward; the verifiers
    # run per call (oneDNN is asked for every linear and GELU)
    assert all(n_available <= 2 for n_available, _ in asked.values()), str(asked)
    assert asked['oneDNN epilogues'][0] == 2
    assert asked['oneDNN epilogues'][1] > 4
    sum(o.mean() for o in outs).backward()    # recomputations run outside the forward
    # outside a forward each question reads a context of its own
    before = asked['oneDNN epilogues'][0]
    onednn_allowed.runs(x)
    onednn_allowed.runs(x)
    assert asked['oneDNN epilogues'][0] == before + 2


def test_every_form_is_off_in_a_plain_context_and_eager_forms_in_a_graph():
    plain = policy.read_context()._replace(plain=True)
    assert all(form.available(plain) for form in dispatch.FORMS.values())
    graph = policy.read_context()._replace(traced=True, special=True, jit_tracing=True)
    eager_only = ['depthwise channel slices', 'depthwise residual fold', 'recomputed stretches',
                  'norm recomputed in the backward', 'compiled loops', 'oneDNN epilogues',
                  'residual accumulated by the GEMM', 'Triton linear attention',
                  'loops and branches over sizes']
    for name in eager_only:
        assert dispatch.FORMS[name].available(graph), name
    assert 'torch.jit.trace' in dispatch.FORMS['custom autograd Functions'].available(graph)
    everywhere = policy.read_context()._replace(plain=False, off=frozenset())
    # the memory forms may run in a graph too (a graph keeps the checkpoint)
    assert dispatch.FORMS['activation checkpointing'].available(graph) is None
    assert dispatch.FORMS['LayerScale folded into the weight'].available(graph) is None
    off = everywhere._replace(off=frozenset([policy.FUSE_GELU_ENV, policy.COMPILE_ENV]))
    assert 'MMLINATTN_FUSE_GELU' in dispatch.FORMS['oneDNN epilogues'].available(off)
    assert 'MMLINATTN_COMPILE' in dispatch.FORMS['compiled loops'].available(off)


def test_verifiers_reject_what_their_form_cannot_take():
    x = torch.randn(2, 5, 8)
    lin = nn.Linear(8, 8)
    hooked = nn.Linear(8, 8)
    hooked.register_forward_hook(lambda *a: None)
    gamma = torch.ones(8)
    conv5 = nn.Conv2d(4, 4, 5, padding=2, groups=4)
    conv3 = nn.Conv2d(4, 4, 3, padding=1, groups=4)
    m = torch.randn(1, 4, 8, 8)
    with torch.no_grad():
        assert onednn_allowed.verify(x, (lin, ))
        assert not onednn_allowed.verify(x.double(), (lin, ))                 # not float32
        assert not onednn_allowed.verify(x, (nn.Linear(8, 8).double(), ))    # mixed dtypes
        assert not onednn_allowed.verify(x, (hooked, ))                       # a hook
        with torch.autocast('cpu', dtype=torch.bfloat16):
            assert not onednn_allowed.verify(x, (lin, ))
        assert gemm_accumulates.verify(x, lin, x)
        assert not gemm_accumulates.verify(x, hooked, x)
        assert not gemm_accumulates.verify(x.double(), lin, x.double())       # mixed dtypes
        assert compiled_allowed.verify(x) or not policy.toolchain_available('cpu')
        assert not compiled_allowed.verify(torch.empty(2, device='meta'))     # no toolchain
        assert not triton_allowed.verify(x, x, x)                             # the CPU
        assert not triton_allowed.verify(x.cuda() if torch.cuda.is_available() else x,
                                         x.double(), x)                       # mixed dtypes
        assert not custom_depthwise_backward.verify(conv5, m)                 # no autograd
        assert not recomputes.verify(x) and not checkpointed.verify(x)
    assert not onednn_allowed.verify(x, (lin, ))                              # autograd
    assert not compiled_allowed.verify(x, gamma.requires_grad_())
    assert compiled_allowed.verify(x, gamma, allow_grad=True) or \
        not policy.toolchain_available('cpu')
    assert layer_scale_folded.verify(lin, gamma, torch.randn(2, 9, 8))
    assert not layer_scale_folded.verify(lin, None, torch.randn(2, 9, 8))     # no LayerScale
    assert not layer_scale_folded.verify(lin, gamma, torch.randn(1, 8, 8))    # rows <= inputs
    ln = nn.LayerNorm(8)
    assert norm_recomputed.verify(ln, x, lin)
    assert not norm_recomputed.verify(nn.GroupNorm(1, 8), x, lin)
    assert not norm_recomputed.verify(nn.LayerNorm(8, elementwise_affine=False), x, lin)
    assert not norm_recomputed.verify(ln, x, nn.Linear(8, 8, bias=False))
    assert recomputes.verify(x, gamma) and checkpointed.verify(x, gamma)
    assert not custom_depthwise_backward.verify(conv3, m)                     # 3x3: PyTorch's
    assert not custom_depthwise_backward.verify(conv5.double(), m)            # mixed dtypes
    assert not depthwise_slices.verify(conv3, m)                              # the CPU
    assert not depthwise_slices.verify(conv3, m.to('meta'))                   # small
    assert depthwise_slices.verify(conv3, torch.empty(2**16, 2**15 + 1, device='meta'))


def test_forms_picked_in_float64_equal_the_plain_ops():
    torch.manual_seed(0)
    x, y = torch.randn(2, 9, 8, dtype=torch.float64), torch.randn(2, 9, 6, dtype=torch.float64)
    lin = nn.Linear(6, 8).double()
    gamma = torch.rand(8, dtype=torch.float64)
    with torch.no_grad():    # inference: the residual accumulated by the GEMM
        assert gemm_accumulates.runs(x, lin, y)
        torch.testing.assert_close(residual_linear(x, lin, y, gamma),
                                   x + gamma * F.linear(y, lin.weight, lin.bias),
                                   rtol=1e-12, atol=1e-12)
    # training: the LayerScale folded into the weight ...
    y = y.requires_grad_()
    assert layer_scale_folded.runs(lin, gamma, y)
    fast = residual_branch(x, lin, y, gamma, training=True)
    want = x + gamma * F.linear(y, lin.weight, lin.bias)
    torch.testing.assert_close(fast, want, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(fast, (y, lin.weight), g),
                               torch.autograd.grad(want, (y, lin.weight), g),
                               rtol=1e-10, atol=1e-12)
    # ... and the norm recomputed in the backward
    ln = nn.LayerNorm(6).double()
    nn.init.normal_(ln.weight)
    assert norm_recomputed.runs(ln, y, lin)
    fast = normed_linears(ln, y, lin)[0]
    want = F.linear(F.layer_norm(y, (6, ), ln.weight, ln.bias, ln.eps), lin.weight, lin.bias)
    torch.testing.assert_close(fast, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(fast, (y, ln.weight), g),
                               torch.autograd.grad(want, (y, ln.weight), g),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('act_before_dw', [False, True])
@pytest.mark.parametrize('recompute', ['none', 'last', 'all'])
def test_conv_ffn_plain_forward_composed_by_the_seam(act_before_dw, recompute):
    """ConvFFN writes its plain forward once; the seam's composition (fused, recomputed)
    equals the ops written out, in float64, with its gradients."""
    torch.manual_seed(0)
    ffn = ConvFFN(8, 16, dw_residual=True, act_before_dw=act_before_dw,
                  recompute=recompute).double()
    grid = TokenGrid((4, 5))
    x = torch.randn(2, 20, 8, dtype=torch.float64, requires_grad=True)

    def reference(t):
        h = F.linear(t, ffn.fc1.weight, ffn.fc1.bias)

        def dw(u):
            m = u.transpose(1, 2).reshape(2, 16, 4, 5)
            return u + F.conv2d(m, ffn.dwconv.weight, ffn.dwconv.bias, padding=1,
                                groups=16).flatten(2).transpose(1, 2)
        h = dw(F.gelu(h)) if act_before_dw else F.gelu(dw(h))
        return F.linear(h, ffn.fc2.weight, ffn.fc2.bias)
    out = branch_output(ffn, x, grid)
    want = reference(x)
    torch.testing.assert_close(ffn(x, grid), want, rtol=1e-12, atol=1e-12)  # the plain forward
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(out)
    torch.testing.assert_close(torch.autograd.grad(out, x, g)[0],
                               torch.autograd.grad(want, x, g)[0], rtol=1e-10, atol=1e-12)
