"""Every entry of the fast-path wing (:mod:`mmlinattn.kernels`) against the plain op of
:mod:`mmlinattn.ops` it stands in for, in float64, in every mode of :mod:`.policy`:

* eager inference (no autograd: in-place, ``out=`` and chunked forms),
* eager training (autograd: custom backwards, recomputation): outputs and input gradients,
* traced (``torch.compile`` with dynamo's eager backend: the graph-safe forms),
* plain (``MMLINATTN_KERNELS=plain``): the entry *is* the plain op, bit for bit.

Small thresholds (:mod:`.policy`'s sizes) make the chunked forms run at test sizes."""
import pytest
import torch
import torch.nn.functional as F

from mmlinattn import kernels, ops
from mmlinattn.kernels import policy
from mmlinattn.ops.diffusion import stencil_kernel

f64 = torch.float64


def _randn(*shape, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g, dtype=f64) * scale


def _soft(pinv, masks=False, sym_norm=True):
    b, h, n, m, d = 2, 2, 30, 6, 8
    args = [_randn(b, h, n, d, scale=0.6), _randn(b, h, m, d, scale=0.6, seed=1),
            _randn(b, h, n, 4, seed=2)]
    kw = dict(pinv=pinv, sym_norm=sym_norm)
    if masks:
        kw.update(valid=torch.arange(n) < torch.tensor([[n], [n - 7]]),
                  landmark_valid=torch.arange(m) < torch.tensor([[m], [m - 2]]))
    return kernels.fast_soft_attention, ops.soft_attention, args, kw


def _nala(kernel, masks=False):
    b, h, n, d = 2, 2, 300, 8          # 300 tokens: two chunks of the core at its minimum
    args = [_randn(b, h, n, d), _randn(b, h, n, d, seed=1), _randn(b, h, n, 4, seed=2)]
    kw = dict(kernel=kernel)
    if kernel == 'relu_split_rope':
        from mmlinattn.models.layers import rope_2d_angles
        kw['rope_angles'] = rope_2d_angles(15, 20, d, dtype=f64)
    if masks:
        kw['valid'] = torch.arange(n) < torch.tensor([[n], [n - 40]])
    return kernels.fast_nala_attention, ops.nala_attention, args, kw


def _ldn(feature_map, masks=False):
    b, h, n, d = 2, 2, 300, 8
    args = [_randn(b, h, n, d), _randn(b, h, n, d, seed=1), _randn(b, h, n, 5, seed=2)]
    kw = dict(feature_map=feature_map)
    if masks:
        kw['valid'] = torch.arange(n) < torch.tensor([[n], [n - 40]])
    return kernels.fast_linear_attention, ops.linear_attention, args, kw


def _diffusion(taps, n_steps, masks=False):
    g = 2
    p = torch.softmax(_randn(g, 8 if taps == 'k3' else 4), -1)
    args = [_randn(2, 6, 7, 9), stencil_kernel(p, taps), torch.tensor([0.4, 0.7], dtype=f64)]
    kw = dict(n_steps=n_steps)
    if masks:
        valid = torch.zeros(2, 1, 7, 9, dtype=f64)
        valid[0], valid[1, :, :5, :6] = 1, 1
        kw['valid'] = valid
    return kernels.fast_grid_diffusion, ops.grid_diffusion, args, kw


def _pure(chunk_size):
    args = [_randn(2, 2, 40, 8), _randn(2, 2, 40, 8, seed=1), _randn(2, 2, 40, 8, seed=2)]
    return kernels.fast_pure_infsa, ops.pure_infsa, args, dict(gamma=0.7, chunk_size=chunk_size)


def _kernel_rows():
    args = [_randn(2, 3, 20, 8, scale=0.5), _randn(2, 3, 7, 8, scale=0.5, seed=1)]
    return kernels.soft.fast_gaussian_kernel, ops.gaussian_kernel, args, dict(denom=2.0)


CASES = {
    'soft newton': lambda: _soft('newton'),
    'soft newton masked': lambda: _soft('newton', masks=True),
    'soft cholesky masked': lambda: _soft('cholesky', masks=True),
    'soft plain-SOFT': lambda: _soft('newton', sym_norm=False),
    'gaussian kernel': _kernel_rows,
    'nala cos_sin': lambda: _nala('cos_sin'),
    'nala cos_sin masked': lambda: _nala('cos_sin', masks=True),
    'nala relu_split': lambda: _nala('relu_split'),
    'nala relu_split_rope': lambda: _nala('relu_split_rope'),
    'ldn elu masked': lambda: _ldn('elu', masks=True),
    'ldn relu': lambda: _ldn('relu'),
    'diffusion cross4': lambda: _diffusion('cross4', 1),
    'diffusion k3 masked 2 steps': lambda: _diffusion('k3', 2, masks=True),
    'pure infsa chunked': lambda: _pure(16),
    'pure infsa whole': lambda: _pure(None),
}
MODES = ('eager inference', 'eager training', 'plain')
TRACED_CASES = ('soft newton masked', 'nala cos_sin masked', 'nala relu_split_rope',
                'ldn elu masked', 'diffusion k3 masked 2 steps', 'pure infsa chunked')


@pytest.fixture(autouse=True)
def _small_thresholds(monkeypatch):
    """SOFT's P in token chunks of about 11 tokens, each per-head product as one mm."""
    monkeypatch.setattr(policy, 'SOFT_CHUNK_ELEMENTS', 2 * 2 * 6 * 10)
    monkeypatch.setattr(policy, 'SOFT_CHUNK_TARGET', 2 * 2 * 6 * 11)
    monkeypatch.setattr(policy, 'MM_LOOP_FLOPS', 1)


def _grads(out, args):
    g = _randn(*out.shape, seed=7)
    return torch.autograd.grad(out, [a for a in args if a.requires_grad], g)


@pytest.mark.parametrize('mode', MODES)
@pytest.mark.parametrize('case', list(CASES))
def test_kernel_equals_the_plain_op(case, mode, monkeypatch):
    fast, plain, args, kw = CASES[case]()
    with torch.no_grad():
        want = plain(*args, **kw)
    if mode == 'plain':
        monkeypatch.setenv(policy.KERNELS_ENV, 'plain')
        with torch.no_grad():
            assert policy.mode(*args) is policy.Mode.PLAIN
            assert torch.equal(fast(*args, **kw), want)
        return
    if mode == 'eager inference':
        with torch.no_grad():
            assert policy.mode(*args) is policy.Mode.EAGER_INFERENCE
            got = fast(*args, **kw)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        return
    leaves = [a.clone().requires_grad_(a.is_floating_point() and a.dim() >= 3) for a in args]
    assert policy.mode(*leaves) is policy.Mode.EAGER_TRAINING
    got = fast(*leaves, **kw)
    torch.testing.assert_close(got.detach(), want, rtol=1e-10, atol=1e-12)
    plain_leaves = [a.detach().clone().requires_grad_(a.requires_grad) for a in leaves]
    for a, b in zip(_grads(got, leaves), _grads(plain(*plain_leaves, **kw), plain_leaves)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize('case', TRACED_CASES)
def test_traced_kernel_equals_the_plain_op(case):
    """Inside a ``torch.compile`` graph (dynamo's eager backend: the graph-safe forms, one
    case per entry, as dynamo's tracing takes seconds) the plain op's values."""
    fast, plain, args, kw = CASES[case]()
    with torch.no_grad():
        want = plain(*args, **kw)
    seen = []

    def traced(*a):
        seen.append(policy.mode(*a))
        return fast(*a, **kw)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(traced, backend='eager', fullgraph=True)(*args)
    assert seen == [policy.Mode.TRACED]
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_every_switch_is_declared_once():
    """The switches the package reads are the table's, each with a default and a meaning."""
    assert set(policy.SWITCHES) == {policy.COMPILE_ENV, policy.FUSE_GELU_ENV,
                                    policy.KERNELS_ENV, policy.TRITON_ENV}
    assert all(len(v) == 2 and v[1] for v in policy.SWITCHES.values())


def test_plain_switch_turns_off_the_layer_forms_too(monkeypatch):
    """Under ``MMLINATTN_KERNELS=plain`` the oneDNN linear, the folded residual conv and the
    GEMM-accumulated residual step are the plain torch ops, bit for bit."""
    from mmlinattn.kernels.depthwise import depthwise_same
    from mmlinattn.kernels.onednn import fused_linear
    from mmlinattn.kernels.residual import residual_linear
    monkeypatch.setenv(policy.KERNELS_ENV, 'plain')
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 6)
    conv = torch.nn.Conv2d(6, 6, 3, padding=1, groups=6)
    x, y = torch.randn(2, 10, 6), torch.randn(2, 10, 8)
    m = torch.randn(2, 6, 5, 4).contiguous(memory_format=torch.channels_last)
    gamma = torch.rand(6)
    with torch.no_grad():
        assert torch.equal(fused_linear(y, lin.weight, lin.bias), F.linear(y, lin.weight,
                                                                           lin.bias))
        assert torch.equal(residual_linear(x, lin, y, gamma), torch.addcmul(x, gamma, lin(y)))
        act = torch.nn.GELU()
        assert torch.equal(depthwise_same(conv, m, m, act, fold=True), act(m + conv(m)))
