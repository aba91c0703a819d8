"""The Triton kernels of the linear-attention core (:mod:`mmlinattn.kernels.triton_linear`),
run by Triton's interpreter on the CPU: against a dense N x M reference in float64, at the
inputs' rounding in float32 and float16, and chosen by the policy only where they may run.

The GPU itself (compilation, speed, bfloat16) is checked by dev/gpu_checks.sh:
Triton's interpreter multiplies bfloat16 tiles as the integers of their bit patterns
(2.7e10 off for a 16 x 16 product), so bfloat16 is not checked here."""
import pytest
import torch
import torch.nn.functional as F

from mmlinattn import kernels, ops
from mmlinattn.kernels import policy
from triton_helpers import interpreted_kernels

f64 = torch.float64


@pytest.fixture(scope='module')
def interpreted():
    with interpreted_kernels() as module:
        yield module


def _randn(*shape, seed=0, dtype=f64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=f64).to(dtype)


def dense_reference(q, k, v, feature_map, eps):
    """``A V / (A 1 / M + eps) / M`` with the explicit (N, M) matrix ``A = phi(Q) phi(K)^T``:
    Linear Diffusion Networks §3.3 (E6-E7) with the mean over the M keys."""
    phi = (lambda x: F.elu(x) + 1) if feature_map == 'elu' else F.relu
    a = phi(q) @ phi(k).transpose(-2, -1)
    m = k.shape[-2]
    return (a @ v / m) / (a.sum(-1, keepdim=True) / m + eps)


@pytest.mark.parametrize('feature_map', ['elu', 'relu'])
@pytest.mark.parametrize('shape', [
    (2, 3, 70, 130, 5, 7),    # head widths below a tile, 3 key programs per head
    (1, 2, 64, 64, 32, 16),   # exact tiles
    (1, 1, 1, 200, 3, 1),     # one query, one value channel
])
def test_kernels_equal_the_dense_reference_in_float64(interpreted, feature_map, shape):
    b, h, n, m, d, e = shape
    q, k = _randn(b, h, n, d), _randn(b, h, m, d, seed=1)
    v = _randn(b, h, m, e, seed=2)
    got = interpreted.triton_linear_attention(q, k, v, feature_map, eps=1e-3)
    want = dense_reference(q, k, v, feature_map, eps=1e-3)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # and the package's plain op, which the kernels stand in for
    torch.testing.assert_close(got, ops.linear_attention(q, k, v, feature_map, 1e-3),
                               rtol=1e-12, atol=1e-12)


def test_key_summary_is_the_mean_of_the_key_features(interpreted):
    k, v = _randn(2, 2, 150, 6), _randn(2, 2, 150, 4, seed=1)
    phi = F.elu(k) + 1
    want = torch.cat([phi.transpose(-2, -1) @ v, phi.sum(-2).unsqueeze(-1)], -1) / 150
    torch.testing.assert_close(interpreted.key_summary(k, v), want.flatten(0, 1),
                               rtol=1e-12, atol=1e-12)


def test_heads_axis_optional_and_output_tokens_major(interpreted):
    q, k, v = _randn(3, 40, 8), _randn(3, 50, 8, seed=1), _randn(3, 50, 6, seed=2)
    got = interpreted.triton_linear_attention(q, k, v)
    assert got.shape == (3, 40, 6)
    torch.testing.assert_close(got, dense_reference(q, k, v, 'elu', 1e-6), rtol=1e-12,
                               atol=1e-12)
    out = interpreted.triton_linear_attention(q[None], k[None], v[None])
    # (B, heads, N, e) over (B, N, heads, e) memory: merging the heads is a view
    assert out.transpose(1, 2).is_contiguous()
    # strided inputs: q, k, v as the heads' views of one projection
    qkv = _randn(2, 30, 3, 2, 8, seed=3)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    torch.testing.assert_close(interpreted.triton_linear_attention(q, k, v),
                               dense_reference(q, k, v, 'elu', 1e-6), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('dtype,tol', [(torch.float32, 2e-6), (torch.float16, 2e-3)])
def test_lower_precision_within_the_inputs_rounding(interpreted, dtype, tol):
    """float32 multiplies in float32; float16 tiles on tensor-core precision with float32
    accumulation and a float32 normaliser: within ``tol`` of the float64 result of the same
    rounded inputs, relative to its largest value (float16 itself rounds at 4.9e-4)."""
    q, k, v = (_randn(2, 2, 300, 32, seed=s, dtype=dtype) for s in range(3))
    got = interpreted.triton_linear_attention(q, k, v)
    assert got.dtype == dtype
    want = dense_reference(q.double(), k.double(), v.double(), 'elu', 1e-6)
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < tol


def test_entry_runs_the_kernels_only_where_the_policy_allows(interpreted, monkeypatch):
    """:func:`mmlinattn.kernels.fast_linear_attention` takes the kernels in eager inference on
    float32 (the interpreter on the CPU standing in for CUDA), and the chunked core under
    autograd, with padded keys, in float64, with ``MMLINATTN_TRITON=0`` or
    ``MMLINATTN_KERNELS=plain``, and on the CPU outside the tests."""
    calls = []
    real = interpreted.triton_linear_attention
    monkeypatch.setattr(interpreted, 'triton_linear_attention',
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q, k, v = (_randn(1, 2, 90, 8, seed=s, dtype=torch.float32) for s in range(3))
    want = ops.linear_attention(q.double(), k.double(), v.double())
    with torch.no_grad():
        got = kernels.fast_linear_attention(q, k, v)
    assert calls == [1]
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < 2e-6

    def taken(*args, **kw):
        calls.clear()
        kernels.fast_linear_attention(*args, **kw)
        return bool(calls)
    with torch.no_grad():
        assert not taken(q, k, v, valid=torch.ones(1, 90, dtype=torch.bool))
        assert not taken(q.double(), k.double(), v.double())
        monkeypatch.setenv(policy.TRITON_ENV, '0')
        assert not taken(q, k, v)
        monkeypatch.setenv(policy.TRITON_ENV, '1')
        monkeypatch.setenv(policy.KERNELS_ENV, 'plain')
        assert not taken(q, k, v)
        monkeypatch.delenv(policy.KERNELS_ENV)
        assert taken(q, k, v)
        monkeypatch.setattr(policy, 'TRITON_DEVICES', ('cuda', ))   # the product's setting
        assert not taken(q, k, v)
    assert not taken(q.requires_grad_(), k, v)
