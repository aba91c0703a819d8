"""SOFT / SOFT++ ops (mmlinattn.ops.soft) against the dense float64 references next to them
("Softmax-free Linear Transformers", arXiv 2207.03341: Eq. 5, 9, 10, 12, 17)."""
import pytest
import torch
from torch.autograd import gradcheck
from torch.overrides import TorchFunctionMode

from mmlinattn.ops.soft import (gaussian_kernel, gaussian_kernel_reference, newton_init_alpha,
                                newton_schulz_pinv, newton_schulz_reference, pairwise_sqdist,
                                soft_attention, soft_attention_reference, symmetric_normalize)


def spd(m, cond=10.0, batch=(), seed=0):
    """Random SPD matrices with eigenvalues spread over [1, cond], float64."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(*batch, m, m, generator=g, dtype=torch.float64))
    lam = torch.linspace(1.0, cond, m, dtype=torch.float64)
    return q @ torch.diag_embed(lam.expand(*batch, m)) @ q.transpose(-1, -2)


def kernel_matrix(m, d=8, scale=1.0, batch=(), seed=0):
    """A Gaussian-kernel bottleneck matrix exp(-||x_i - x_j||^2 / 2) (diag 1), float64."""
    g = torch.Generator().manual_seed(seed)
    x = scale * torch.randn(*batch, m, d, generator=g, dtype=torch.float64)
    return gaussian_kernel_reference(x, x, denom=2.0)


# --------------------------------------------------------------------- kernel
def test_gaussian_kernel_matches_eq5():
    a = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    b = torch.randn(2, 3, 5, 16, dtype=torch.float64)
    # the default bandwidth is Eq. 5's 2 sqrt(d_e)
    torch.testing.assert_close(gaussian_kernel(a, b),
                               gaussian_kernel_reference(a, b, denom=2 * 16 ** 0.5))
    torch.testing.assert_close(gaussian_kernel(a, b, denom=2.0),
                               torch.exp(-pairwise_sqdist(a, b) / 2))


def test_sqdist_never_negative():
    # Large common offset: |a|^2 + |b|^2 - 2ab cancels catastrophically in float32.
    a = 1000 + torch.randn(64, 32)
    d = pairwise_sqdist(a, a)
    assert (d >= 0).all()
    assert (gaussian_kernel(a, a, denom=2.0) <= 1).all()


def test_sqdist_bad_shapes():
    with pytest.raises(ValueError, match='feature dims'):
        pairwise_sqdist(torch.randn(3, 4), torch.randn(3, 5))


# --------------------------------------------------------------------- Newton-Schulz
@pytest.mark.parametrize('m', [3, 16, 49, 100])
def test_newton_matches_pinv_spd(m):
    a = spd(m, cond=10.0, batch=(2, ), seed=m)
    out = newton_schulz_pinv(a)                 # T = 20
    ref = torch.linalg.pinv(a)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize('m', [8, 49])
def test_newton_matches_pinv_kernel_matrix(m):
    a = kernel_matrix(m, scale=1.5, batch=(3, ), seed=m)
    assert torch.linalg.cond(a).max() < 50  # well conditioned for this scale
    torch.testing.assert_close(newton_schulz_pinv(a), torch.linalg.pinv(a), rtol=1e-8,
                               atol=1e-8)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_identity_maps_to_identity_exactly(dtype):
    eye = torch.eye(13, dtype=dtype).expand(2, 3, 13, 13)
    assert torch.equal(newton_schulz_pinv(eye), eye)


def test_paper_init_fails_on_identity():
    """The authors' halving rule accepts alpha = 2 for A = I and Newton then returns 0
    -- the reason 'safe' is the default."""
    eye = torch.eye(6, dtype=torch.float64)
    assert newton_init_alpha(eye, 'paper').item() == 2.0
    assert torch.equal(newton_schulz_pinv(eye, init='paper'), torch.zeros(6, 6,
                                                                         dtype=torch.float64))


def test_paper_init_converges_on_kernel_matrix():
    a = kernel_matrix(20, scale=0.7, seed=3)
    torch.testing.assert_close(newton_schulz_pinv(a, 40, init='paper'), torch.linalg.pinv(a),
                               rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize('init', ['safe', 'paper', 'scaled'])
def test_alpha_is_per_matrix(init):
    """No batch-global alpha: each matrix's step and result ignore the rest of the batch."""
    batch = torch.stack([kernel_matrix(10, scale=0.3, seed=1),
                         kernel_matrix(10, scale=2.0, seed=2), 5 * spd(10, seed=3)])
    alphas = newton_init_alpha(batch, init)
    for i in range(3):
        assert alphas[i] == newton_init_alpha(batch[i], init)
        torch.testing.assert_close(newton_schulz_pinv(batch, init=init)[i],
                                   newton_schulz_pinv(batch[i], init=init), rtol=0, atol=0)


@pytest.mark.parametrize('init', ['safe', 'paper', 'scaled'])
def test_alpha_has_no_data_dependent_python_control_flow(init):
    """vmap refuses Python branching on tensor values (``if t.any()``, ``.item()``), so
    this passing shows the init needs no host synchronisation."""
    batch = torch.stack([kernel_matrix(7, seed=s) for s in range(4)])
    torch.testing.assert_close(torch.vmap(lambda a: newton_init_alpha(a, init))(batch),
                               newton_init_alpha(batch, init))


@pytest.mark.parametrize('kind', ['spd', 'kernel_ill'])
def test_residual_decreases_monotonically(kind):
    """Prop. 2: ||A A_k A - A|| / ||A|| decreases with k."""
    if kind == 'spd':
        a = spd(30, cond=100.0, seed=4)
    else:  # close landmarks: an ill-conditioned kernel matrix, as in a trained model
        a = kernel_matrix(30, d=4, scale=0.4, seed=5)
    res = []
    for k in range(21):
        ak = newton_schulz_pinv(a, num_iters=k)
        res.append((torch.linalg.matrix_norm(a @ ak @ a - a, ord=2)
                    / torch.linalg.matrix_norm(a, ord=2)).item())
    for k in range(20):
        assert res[k + 1] <= res[k] * (1 + 1e-9) + 1e-13, (k, res)
    assert res[-1] < 0.5 * res[0]
    if kind == 'spd':
        assert res[-1] < 1e-12


def test_newton_backward_gradcheck():
    a = spd(5, cond=3.0, batch=(2, ), seed=6).requires_grad_()
    assert gradcheck(lambda x: newton_schulz_pinv(x, num_iters=30), (a, ), eps=1e-6,
                     atol=1e-5)


def test_newton_backward_matches_autograd_through_inv():
    """Eq. 12 against autograd through torch.linalg.inv."""
    a0 = spd(12, cond=5.0, batch=(2, 3), seed=7)
    g = torch.randn(2, 3, 12, 12, dtype=torch.float64)
    a1 = a0.clone().requires_grad_()
    (newton_schulz_pinv(a1) * g).sum().backward()
    a2 = a0.clone().requires_grad_()
    (torch.linalg.inv(a2) * g).sum().backward()
    torch.testing.assert_close(a1.grad, a2.grad, rtol=1e-9, atol=1e-9)


def test_newton_keeps_no_iterates_for_backward():
    """Only the result is saved (forward-only iteration): the graph holds one node."""
    a = spd(8, seed=8).requires_grad_()
    y = newton_schulz_pinv(a)
    assert type(y.grad_fn).__name__.startswith('NewtonSchulzPinv')
    assert len(y.grad_fn.saved_tensors) == 1


def test_newton_bad_arguments():
    with pytest.raises(ValueError, match='m, m'):
        newton_schulz_pinv(torch.randn(3, 4))
    with pytest.raises(ValueError, match='init'):
        newton_schulz_pinv(torch.eye(3), init='bogus')
    with pytest.raises(ValueError, match='num_iters'):
        newton_schulz_pinv(torch.eye(3), num_iters=-1)


# --------------------------------------------------------------------- normalisation
def test_symmetric_normalize_is_eq17():
    a = kernel_matrix(9, seed=9)
    p = torch.linalg.pinv(a)
    d = torch.diag(a.sum(-1) ** -0.5)
    torch.testing.assert_close(symmetric_normalize(p, a), d @ p @ d)


@pytest.mark.parametrize('m,scale', [(8, 1.0), (32, 0.5), (64, 0.3), (128, 0.2)])
def test_symmetric_bound(m, scale):
    """||D^-1/2 A^+ D^-1/2||_2 <= ||A^+||_2 (Prop. 6; D >= 1 since diag(A) = 1)."""
    a = kernel_matrix(m, scale=scale, batch=(2, ), seed=m)
    for pinv in (torch.linalg.pinv(a), newton_schulz_pinv(a)):
        lhs = torch.linalg.matrix_norm(symmetric_normalize(pinv, a), ord=2)
        rhs = torch.linalg.matrix_norm(pinv, ord=2)
        assert (lhs <= rhs * (1 + 1e-12)).all(), (lhs, rhs)


# --------------------------------------------------------------------- full attention
class _RecordShapes(TorchFunctionMode):
    """Records the shape of every tensor produced inside the mode."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if torch.is_tensor(out):
            self.shapes.append(tuple(out.shape))
        return out


@pytest.mark.parametrize('sym_norm', [True, False])
def test_soft_attention_matches_dense_nystrom(sym_norm):
    torch.manual_seed(0)
    b, h, hh, ww, m, d = 2, 3, 6, 5, 6, 8
    q = torch.randn(b, h, hh * ww, d, dtype=torch.float64) * 0.6
    lm = torch.randn(b, h, m, d, dtype=torch.float64) * 0.6
    v = torch.randn(b, h, hh * ww, 4, dtype=torch.float64)
    out = soft_attention(q, lm, v, sym_norm=sym_norm)
    torch.testing.assert_close(out, soft_attention_reference(q, lm, v, sym_norm), rtol=1e-8,
                               atol=1e-8)


def test_soft_attention_never_forms_n_by_n():
    n, m = 40, 5
    q, lm, v = torch.randn(1, 2, n, 8), torch.randn(1, 2, m, 8), torch.randn(1, 2, n, 8)
    with _RecordShapes() as rec:
        soft_attention(q, lm, v)
    assert rec.shapes and all(not (s[-1] >= n and s[-2] >= n) for s in rec.shapes
                              if len(s) >= 2), rec.shapes
    with _RecordShapes() as rec:  # positive control: the dense reference does form it
        soft_attention_reference(q, lm, v)
    assert (1, 2, n, n) in rec.shapes


def test_soft_attention_float32_under_autocast():
    torch.manual_seed(1)
    q, lm, v = (torch.randn(1, 2, 30, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 30, 8))
    qb, lb, vb = q.bfloat16(), lm.bfloat16(), v.bfloat16()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = soft_attention(qb, lb, vb)
    assert out.dtype == torch.bfloat16
    ref = soft_attention(qb.float(), lb.float(), vb.float())   # same inputs, fp32 math
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
    assert torch.equal(out, ref.bfloat16())


def test_soft_attention_gradients_flow_to_all_inputs():
    q = torch.randn(1, 2, 20, 8, dtype=torch.float64, requires_grad=True)
    lm = torch.randn(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 20, 8, dtype=torch.float64, requires_grad=True)
    soft_attention(q, lm, v).square().sum().backward()
    for t in (q, lm, v):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


def test_soft_attention_gradcheck():
    """Through kernels, Eq. 12 and Eq. 17 together (well-conditioned landmarks)."""
    torch.manual_seed(2)
    q = (0.5 * torch.randn(1, 1, 6, 3, dtype=torch.float64)).requires_grad_()
    lm = (1.5 * torch.randn(1, 1, 3, 3, dtype=torch.float64)).requires_grad_()
    v = torch.randn(1, 1, 6, 2, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda a, b, c: soft_attention(a, b, c, num_iters=40), (q, lm, v),
                     eps=1e-6, atol=1e-5)


def test_soft_attention_bad_shapes():
    with pytest.raises(ValueError, match='4-D'):
        soft_attention(torch.randn(2, 5, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8))
    with pytest.raises(ValueError, match='tokens'):
        soft_attention(torch.randn(1, 2, 5, 8), torch.randn(1, 2, 3, 8),
                       torch.randn(1, 2, 6, 8))


def test_scaled_init_with_ridge_is_the_plain_soft_iteration():
    """``init='scaled'``, ``ridge=0.01``: alpha = 0.9 * 2 / (max row sum of A)^2 from A, the
    iteration on A + 0.01 I (the authors' plain-SOFT code), written out here."""
    a = torch.stack([kernel_matrix(9, scale=0.5, seed=s) for s in range(3)])
    torch.testing.assert_close(newton_init_alpha(a, 'scaled'),
                               1.8 / a.sum(-1).max(-1).values ** 2, rtol=1e-15, atol=0)
    v = newton_schulz_reference(a, 1.8 / a.sum(-1).max(-1).values ** 2, 20, ridge=0.01)
    y = newton_schulz_pinv(a, 20, init='scaled', ridge=0.01)
    torch.testing.assert_close(y, v, rtol=1e-12, atol=1e-12)
    # Eq. 12 with the ridge: the gradient w.r.t. A is that w.r.t. A + ridge I
    a.requires_grad_(True)
    g = torch.randn_like(y)
    newton_schulz_pinv(a, 20, init='scaled', ridge=0.01).backward(g)
    yt = y.transpose(-1, -2)
    torch.testing.assert_close(a.grad, -(yt @ g @ yt), rtol=1e-12, atol=1e-12)
