"""Pure InfSA / Linear-InfSA ops against the equations of "Infinite Self-Attention"
(Roffo, arXiv 2603.00175, §3.2 and §3.4).

The references, :func:`pure_infsa_reference` (the dense N x N matrix with
``torch.linalg.matrix_norm``, Eq. 11-12) and :func:`linear_infsa_reference` (explicit
per-token loops, Eq. 16-21), share no code with the fast paths; inputs are float64.
"""
import pytest
import torch

from mmlinattn.kernels import fast_pure_infsa
from mmlinattn.ops.infsa import (infsa_attention_matrix, linear_infsa, linear_infsa_pooled,
                                 linear_infsa_reference, linear_infsa_weights,
                                 pure_infsa_reference)

D64 = dict(dtype=torch.float64)


def heads(t, num_heads):
    b, n, c = t.shape
    return t.view(b, n, num_heads, c // num_heads).transpose(1, 2)


# ------------------------------------------------------------------------------ Pure InfSA
@pytest.mark.parametrize('gamma', [1.0, 0.49, torch.tensor([0.7, 0.3, 0.9], **D64)])
def test_pure_matches_dense_equations(gamma):
    q, k, v = (torch.randn(2, 3, 13, 5, **D64) for _ in range(3))
    torch.testing.assert_close(fast_pure_infsa(q, k, v, gamma),
                               pure_infsa_reference(q, k, v, gamma))


def test_pure_attention_matrix_is_frobenius_normalised():
    q, k = torch.randn(2, 3, 11, 4, **D64), torch.randn(2, 3, 11, 4, **D64)
    a_hat = infsa_attention_matrix(q, k, eps=0.0)
    assert (a_hat >= 0).all()
    torch.testing.assert_close(torch.linalg.matrix_norm(a_hat, 'fro'),
                               torch.ones(2, 3, **D64))


@pytest.mark.parametrize('chunk', [1, 4, 7, 16, 17, 40])
@pytest.mark.parametrize('masked', [False, True])
def test_pure_chunked_equals_unchunked(chunk, masked):
    n = 17
    q, k, v = (torch.randn(2, 2, n, 3, **D64, requires_grad=True) for _ in range(3))
    valid = (torch.rand(2, n) > 0.3) if masked else None
    g = torch.randn(2, 2, n, 3, **D64)
    full = fast_pure_infsa(q, k, v, 0.7, valid)
    grads_full = torch.autograd.grad((full * g).sum(), (q, k, v))
    chunked = fast_pure_infsa(q, k, v, 0.7, valid, chunk_size=chunk)
    grads_chunked = torch.autograd.grad((chunked * g).sum(), (q, k, v))
    torch.testing.assert_close(chunked, full)
    for a, b in zip(grads_chunked, grads_full):
        torch.testing.assert_close(a, b)


def test_pure_chunked_never_materialises_n_by_n():
    """Peak float32 buffer in the chunked forward is O(chunk·N), not O(N²)."""
    n, chunk = 1024, 64
    q, k, v = (torch.randn(1, 1, n, 8) for _ in range(3))
    largest = []

    class Spy(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else (out, )):
                if torch.is_tensor(t):
                    largest.append(t.numel())
            return out

    with Spy():
        fast_pure_infsa(q, k, v, chunk_size=chunk)
    assert max(largest) <= chunk * n
    with Spy():
        fast_pure_infsa(q, k, v)
    assert max(largest) == n * n  # the spy does see the dense path's N x N scores


def test_pure_padding_does_not_change_valid_tokens():
    n, pad = 10, 6
    q, k, v = (torch.randn(1, 2, n, 4, **D64) for _ in range(3))
    qp, kp, vp = (torch.cat([t, 5 * torch.randn(1, 2, pad, 4, **D64)], 2) for t in (q, k, v))
    valid = torch.tensor([[True] * n + [False] * pad])
    z = fast_pure_infsa(q, k, v, 0.7)
    zp = fast_pure_infsa(qp, kp, vp, 0.7, valid)
    torch.testing.assert_close(zp[:, :, :n], z)
    assert (zp[:, :, n:] == 0).all()
    torch.testing.assert_close(fast_pure_infsa(qp, kp, vp, 0.7, valid, chunk_size=3), zp)


def test_pure_token_duplication_invariance():
    """Nearest upsampling by k scales ‖·‖_F by k and every entry of Â by 1/k: Z is unchanged
    exactly when ε = 0."""
    q, k, v = (torch.randn(2, 2, 9, 4, **D64) for _ in range(3))
    z = fast_pure_infsa(q, k, v, 0.7, eps=0.0)
    rep = 3
    zd = fast_pure_infsa(*(t.repeat_interleave(rep, 2) for t in (q, k, v)), 0.7, eps=0.0)
    torch.testing.assert_close(zd, z.repeat_interleave(rep, 2))


def test_pure_all_rectified_has_finite_gradient():
    q = torch.ones(1, 1, 5, 3, **D64, requires_grad=True)
    k = (-torch.ones(1, 1, 5, 3, **D64)).requires_grad_()  # QKᵀ < 0 everywhere
    v = torch.randn(1, 1, 5, 3, **D64, requires_grad=True)
    z = fast_pure_infsa(q, k, v)
    assert (z == 0).all()
    z.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_pure_autocast_bf16_reduces_in_float32():
    q, k, v = (torch.randn(1, 2, 300, 8).bfloat16() for _ in range(3))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        z = fast_pure_infsa(q, k, v, 0.7, chunk_size=128)
    assert z.dtype == torch.bfloat16
    ref = pure_infsa_reference(*(t.double() for t in (q, k, v)), 0.7)
    torch.testing.assert_close(z.double(), ref, rtol=1e-2, atol=1e-4)


# ------------------------------------------------------------------------------ Linear-InfSA
@pytest.mark.parametrize('gamma', [0.7, torch.tensor([0.2, 0.7, 0.95], **D64)])
@pytest.mark.parametrize('tied', [True, False])
def test_linear_matches_equations(gamma, tied):
    b, n, c, nh = 2, 9, 12, 3
    x = torch.randn(b, n, c, **D64)
    wq, wk, wv = (torch.randn(c, c, **D64) for _ in range(3))
    bq, bk, bv = (torch.randn(c, **D64) for _ in range(3))
    q = heads(x @ wq.T + bq, nh)
    k = None if tied else heads(x @ wk.T + bk, nh)
    v = heads(x @ wv.T + bv, nh)
    a_ref, h_ref = linear_infsa_reference(q, v, gamma, k)
    torch.testing.assert_close(linear_infsa_weights(q, k), a_ref)
    torch.testing.assert_close(linear_infsa(q, v, gamma, k), h_ref)
    # the pool-then-project rewrite is exact
    torch.testing.assert_close(linear_infsa_pooled(q, x, wv, bv, gamma, k), h_ref)


def test_linear_weights_are_l1_normalised_and_alpha_matches_norms():
    q = torch.randn(2, 4, 20, 6, **D64)
    a, alpha = linear_infsa_weights(q, eps=0.0, return_alpha=True)
    assert (a >= 0).all()
    torch.testing.assert_close(a.sum(-1), torch.ones(2, 4, **D64))
    norms = q.norm(dim=-1)
    torch.testing.assert_close(alpha, norms / norms.sum(-1, keepdim=True))


def test_linear_token_duplication_invariance():
    """Every token repeated k times leaves q̄ and h unchanged (each copy's α and a scale by
    1/k)."""
    b, n, c, nh = 2, 7, 8, 2
    x = torch.randn(b, n, c, **D64)
    w, bias = torch.randn(c, c, **D64), torch.randn(c, **D64)
    wv, bv = torch.randn(c, c, **D64), torch.randn(c, **D64)
    for rep in (2, 5):
        xd = x.repeat_interleave(rep, 1)
        h = linear_infsa_pooled(heads(x @ w.T + bias, nh), x, wv, bv, 0.7, eps=0.0)
        hd = linear_infsa_pooled(heads(xd @ w.T + bias, nh), xd, wv, bv, 0.7, eps=0.0)
        torch.testing.assert_close(hd, h)
        # with the paper's ε the change is of order ε
        hd_eps = linear_infsa_pooled(heads(xd @ w.T + bias, nh), xd, wv, bv, 0.7)
        torch.testing.assert_close(hd_eps, h, rtol=1e-4, atol=1e-5)


def test_linear_padding_does_not_change_result():
    b, n, pad, c, nh = 2, 11, 5, 8, 2
    x = torch.randn(b, n, c, **D64)
    xp = torch.cat([x, 3 * torch.randn(b, pad, c, **D64)], 1)
    valid = torch.zeros(b, n + pad, dtype=torch.bool)
    valid[:, :n] = True
    w, wv, bv = torch.randn(c, c, **D64), torch.randn(c, c, **D64), torch.randn(c, **D64)
    h = linear_infsa_pooled(heads(x @ w.T, nh), x, wv, bv, 0.7)
    hp = linear_infsa_pooled(heads(xp @ w.T, nh), xp, wv, bv, 0.7, valid=valid)
    torch.testing.assert_close(hp, h)
    hp_full_v = linear_infsa(heads(xp @ w.T, nh), heads(xp @ wv.T + bv, nh), 0.7, valid=valid)
    torch.testing.assert_close(hp_full_v, h)
    a = linear_infsa_weights(heads(xp @ w.T, nh), valid=valid)
    assert (a[:, :, n:] == 0).all()


def test_linear_zero_query_gradient_is_finite():
    q = torch.randn(1, 2, 6, 4, **D64)
    q[:, :, 2] = 0  # ‖Q_i‖ = 0: the norm's gradient must be 0, not NaN
    q.requires_grad_(True)
    x = torch.randn(1, 6, 8, **D64, requires_grad=True)
    h = linear_infsa_pooled(q, x, torch.randn(8, 8, **D64), torch.randn(8, **D64), 0.7)
    h.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(x.grad).all()


def test_linear_autocast_output_dtype_and_float32_math():
    x = torch.randn(1, 5000, 32)
    q = heads(x @ torch.randn(32, 32).T, 4)
    wv = torch.randn(32, 32)
    ref = linear_infsa_pooled(q.double(), x.double(), wv.double(), None, 0.7)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        h = linear_infsa_pooled(q.bfloat16(), x.bfloat16(), wv, None, 0.7)
    assert h.dtype == torch.bfloat16
    torch.testing.assert_close(h.double(), ref, rtol=2e-2, atol=2e-2)


# ------------------------------------------------------------------------------ arguments
def test_bad_arguments_raise():
    q = torch.randn(1, 2, 5, 3)
    with pytest.raises(ValueError, match='gamma'):
        fast_pure_infsa(q, q, q, torch.ones(3))
    with pytest.raises(ValueError, match='valid'):
        linear_infsa_weights(q, valid=torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match='chunk_size'):
        fast_pure_infsa(q, q, q, chunk_size=0)
    with pytest.raises(ValueError, match='shapes'):
        linear_infsa_pooled(q, torch.randn(1, 5, 6), torch.randn(5, 6))
