"""The GELU run in the epilogue of its linear / depthwise conv, and a linear's bias in its own
(oneDNN post-ops): the same values as the plain ops, taken only in eager float32 CPU
inference, and the plain ops for good where the fused ones are missing or wrong."""
import collections
import platform

import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

import mmlinattn.kernels.onednn as onednn
from mmlinattn.kernels.policy import FUSE_GELU_ENV
from mmlinattn.kernels import branch_output, residual_step
from mmlinattn.models.layers.channels_last import conv_tokens
from mmlinattn.models.layers.ffn import ConvFFN, Mlp
from mmlinattn.models.layers.token_grid import TokenGrid

X86_LINUX = platform.system() == 'Linux' and platform.machine() in ('x86_64', 'AMD64')


@pytest.fixture
def calls(monkeypatch):
    """How often each fused op ran (the first-use check run before, not counted)."""
    onednn._fused_ops_work()
    counts = collections.Counter()
    for name in ('_linear_gelu', '_conv_gelu', '_linear_bias'):
        def spy(*args, _f=getattr(onednn, name), _name=name):
            counts[_name] += 1
            return _f(*args)
        monkeypatch.setattr(onednn, name, spy)
    return counts


def _plain(monkeypatch):
    monkeypatch.setattr(onednn, '_fused_ops_work', lambda: False)


def test_fused_ops_work_on_the_ci_machine():
    # on x86-64 Linux PyTorch's CPU build carries oneDNN: the fast path must not be lost
    if not X86_LINUX:
        pytest.skip('oneDNN post-ops are only required on x86-64 Linux')
    assert onednn._fused_ops_work()


@pytest.mark.parametrize('approximate', ['none', 'tanh'])
def test_linear_act_equals_the_plain_ops(approximate, calls):
    torch.manual_seed(0)
    fc, act = nn.Linear(24, 72), nn.GELU(approximate=approximate)
    x = torch.randn(2, 50, 24) * 3
    with torch.no_grad():
        out = onednn.linear_act(x, fc, act)
        expected = act(fc(x))
    assert calls['_linear_gelu'] == (1 if onednn._fused_ops_work() else 0)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize('residual', [False, True])
@pytest.mark.parametrize('padded', [False, True])
def test_conv_tokens_with_gelu_equals_the_plain_ops(residual, padded, calls, monkeypatch):
    torch.manual_seed(0)
    conv, act = nn.Conv2d(40, 40, 3, 1, 1, groups=40), nn.GELU()
    grid = TokenGrid((7, 9), valid_hw=[(7, 9), (5, 6)] if padded else None)
    x = torch.randn(2, 63, 40)
    with torch.no_grad():
        out = conv_tokens(conv, x, grid, residual=residual, act=act)
        fused = calls['_conv_gelu']
        _plain(monkeypatch)
        expected = act(conv_tokens(conv, x, grid, residual=residual))
    # a residual conv with padding to zero adds x after the conv: no single primitive then
    if X86_LINUX:
        assert fused == (0 if residual and padded else 1)
    assert out.is_contiguous()
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize('with_norm', [True, False])
@pytest.mark.parametrize('act_before_dw', [False, True])
def test_conv_ffn_inference_equals_the_plain_ops(act_before_dw, with_norm, calls, monkeypatch):
    """fc1 with the GELU, or (GELU after the conv) with its bias, in one oneDNN primitive,
    whether the FFN normalises its input itself (``norm``) or is given it normalised."""
    torch.manual_seed(0)
    ffn = ConvFFN(32, 96, dw_residual=act_before_dw, act_before_dw=act_before_dw).eval()
    norm, gamma = nn.LayerNorm(32) if with_norm else None, torch.rand(32)
    grid = TokenGrid((6, 8))
    x = torch.randn(1, 48, 32)
    with torch.no_grad():
        out = residual_step(x, ffn, grid, norm, gamma)
        counts = dict(calls)
        _plain(monkeypatch)
        expected = residual_step(x, ffn, grid, norm, gamma)
    if X86_LINUX:
        # without the GELU in fc1, fc1 is a plain linear: its bias goes into its epilogue
        assert counts == ({'_linear_gelu': 1} if act_before_dw
                          else {'_linear_bias': 1, '_conv_gelu': 1})
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


def test_mlp_inference_equals_the_plain_ops(calls, monkeypatch):
    torch.manual_seed(0)
    mlp = Mlp(32, 128, act_layer=nn.GELU).eval()
    x = torch.randn(3, 20, 32)
    with torch.no_grad():
        out = branch_output(mlp, x, None)
        counts = dict(calls)
        expected = mlp(x)   # the plain forward
    if X86_LINUX:
        assert counts == {'_linear_gelu': 1}
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


class _Seam(nn.Module):
    def __init__(self, branch):
        super().__init__()
        self.branch = branch

    def forward(self, t):
        return branch_output(self.branch, t, None)


@pytest.mark.parametrize('case', ['autograd', 'float64', 'autocast', 'flop_counter', 'trace',
                                  'relu', 'hook', 'switched_off'])
def test_plain_ops_elsewhere(case, calls, monkeypatch):
    torch.manual_seed(0)
    mlp = Mlp(16, 48, act_layer=nn.ReLU if case == 'relu' else nn.GELU).eval()
    x = torch.randn(2, 10, 16)
    if case == 'float64':
        mlp, x = mlp.double(), x.double()
    def fast(t):  # the seam's form of the branch (the plain forward runs no fused op)
        return branch_output(mlp, t, None)
    if case == 'autograd':
        out = fast(x)
        assert out.grad_fn is not None
    elif case == 'autocast':
        with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
            fast(x)
    elif case == 'flop_counter':
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            fast(x)
        # both linears counted: 2 * tokens * (16 * 48 + 48 * 16)
        assert counter.get_total_flops() == 2 * 20 * 2 * 16 * 48
    elif case == 'trace':
        with torch.no_grad():
            traced = torch.jit.trace(_Seam(mlp), x, check_trace=False)
        assert 'mkldnn' not in str(traced.inlined_graph)
    elif case == 'hook':   # a forward hook on fc1 expects fc1 to be called
        seen = []
        mlp.fc1.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
        with torch.no_grad():
            fast(x)
        assert seen == [(2, 10, 48)]
    else:
        if case == 'switched_off':
            monkeypatch.setenv(FUSE_GELU_ENV, '0')
        with torch.no_grad():
            fast(x)
    assert sum(calls.values()) == 0


@pytest.mark.parametrize('op', ['_linear_gelu', '_linear_bias'])
@pytest.mark.parametrize('failure', ['raises', 'differs'])
def test_broken_fused_ops_fall_back_to_the_plain_ones(failure, op, monkeypatch):
    def broken(x, weight, *args):
        if failure == 'raises':
            raise RuntimeError('no such op')
        return torch.zeros(*x.shape[:-1], weight.shape[0])
    monkeypatch.setattr(onednn, op, broken)
    onednn._fused_ops_work.cache_clear()
    try:
        assert not onednn._fused_ops_work()
        fc, act = nn.Linear(8, 12), nn.GELU()
        x = torch.randn(4, 8)
        with torch.no_grad():
            torch.testing.assert_close(onednn.linear_act(x, fc, act), act(fc(x)))
            torch.testing.assert_close(onednn.fused_linear(x, fc.weight, fc.bias), fc(x))
    finally:
        onednn._fused_ops_work.cache_clear()


@pytest.mark.parametrize('with_bias', [True, False])
def test_fused_linear_equals_f_linear(with_bias, calls):
    """In float32 CPU inference the oneDNN linear runs and gives ``F.linear``'s values (to
    float32 rounding: another summation order); under autograd ``F.linear`` runs."""
    torch.manual_seed(0)
    x, w = torch.randn(2, 300, 48), torch.randn(40, 48)
    b = torch.randn(40) if with_bias else None
    with torch.no_grad():
        out = onednn.fused_linear(x, w, b)
    if X86_LINUX:
        assert calls['_linear_bias'] == 1
    torch.testing.assert_close(out, torch.nn.functional.linear(x, w, b), rtol=1e-5, atol=1e-5)
    w.requires_grad_()
    assert onednn.fused_linear(x, w, b).grad_fn is not None
    assert calls['_linear_bias'] == (1 if X86_LINUX else 0)


def test_qkv_projection_in_inference_and_with_a_hook(calls):
    """The q/k/v projection of the LDN / InfViT mixers goes through the oneDNN linear in
    inference, and calls the module (whose forward hook then sees it) when hooked."""
    from mmlinattn.models.layers.qkv import QKVMixer
    torch.manual_seed(0)
    mixer = QKVMixer(32, 4).eval()
    x = torch.randn(1, 20, 32)
    with torch.no_grad():
        q, k, v = mixer.qkv_heads(x)
        want = mixer.qkv(x).view(1, 20, 3, 4, 8).permute(2, 0, 3, 1, 4)
    assert calls['_linear_bias'] == (1 if X86_LINUX else 0)
    for got, ref in zip((q, k, v), want):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    seen = []
    mixer.qkv.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    with torch.no_grad():
        mixer.qkv_heads(x)
    assert seen == [(1, 20, 96)] and calls['_linear_bias'] == (1 if X86_LINUX else 0)


@pytest.mark.parametrize('case', ['float64', 'autocast', 'switched_off', 'strided'])
def test_fused_linear_keeps_f_linear_elsewhere(case, calls, monkeypatch):
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 16, 24), torch.randn(8, 24), torch.randn(8)
    if case == 'float64':
        x, w, b = x.double(), w.double(), b.double()
    if case == 'strided':
        x = torch.randn(3, 24, 16).transpose(1, 2)
    if case == 'switched_off':
        monkeypatch.setenv(FUSE_GELU_ENV, '0')
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16,
                                         enabled=case == 'autocast'):
        out = onednn.fused_linear(x, w, b)
        want = torch.nn.functional.linear(x, w, b)
    assert calls['_linear_bias'] == 0
    assert out.dtype == want.dtype
    torch.testing.assert_close(out, want, rtol=0, atol=0)
