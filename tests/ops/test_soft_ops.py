"""SOFT / SOFT++ ops (mmlinattn.ops.soft, and the fast forms the backbones run,
mmlinattn.kernels.soft) against the dense float64 references next to them
("Softmax-free Linear Transformers", arXiv 2207.03341: Eq. 5, 9, 10, 12, 17)."""
import warnings

import pytest
import torch
from torch.autograd import gradcheck
from torch.overrides import TorchFunctionMode

import mmlinattn.kernels.soft as soft_kernels
import mmlinattn.ops.soft as soft_ops
from mmlinattn.kernels import policy
from mmlinattn.kernels.soft import fast_gaussian_kernel, fast_soft_attention
from mmlinattn.ops.soft import (NEWTON_INITS, cholesky_pinv_solve, gaussian_kernel_reference,
                                newton_init_alpha, newton_schulz_pinv, newton_schulz_reference,
                                pairwise_sqdist, soft_attention_reference, symmetric_normalize)


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
    torch.testing.assert_close(fast_gaussian_kernel(a, b),
                               gaussian_kernel_reference(a, b, denom=2 * 16 ** 0.5))
    torch.testing.assert_close(fast_gaussian_kernel(a, b, denom=2.0),
                               torch.exp(-pairwise_sqdist(a, b) / 2))


def test_sqdist_never_negative():
    # Large common offset: |a|^2 + |b|^2 - 2ab cancels catastrophically in float32.
    a = 1000 + torch.randn(64, 32)
    d = pairwise_sqdist(a, a)
    assert (d >= 0).all()
    assert (fast_gaussian_kernel(a, a, denom=2.0) <= 1).all()


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


@pytest.mark.parametrize('kind', ['near_identity', 'kernel'])
@pytest.mark.parametrize('ridge', [0.0, 0.01, 0.1])
@pytest.mark.parametrize('init', NEWTON_INITS)
def test_every_init_inverts_the_ridged_matrix(init, ridge, kind):
    """Every step rule with and without a ridge gives ``(A + ridge I)^+``.  The step must suit
    ``P = A + ridge I``: taken from a near-identity A, ``'paper'`` (any ridge) and
    ``'scaled'`` (ridge 0.1) overshoot ``2 / sigma_max(P)^2`` and the iteration diverges."""
    if kind == 'near_identity':   # far-apart landmarks: off-diagonal entries <= 7e-4
        a = kernel_matrix(16, d=8, scale=2.0, seed=0)
    else:                         # close landmarks: eigenvalues 0.008 ... 6.8
        a = kernel_matrix(16, d=4, scale=0.5, seed=0)
    p = a + ridge * torch.eye(16, dtype=torch.float64)
    ref = torch.linalg.pinv(p)
    # T = 50: the slowest case, 'paper' without a ridge on the kernel, is at 2e-14 by T = 40
    out = newton_schulz_pinv(a, 50, init=init, ridge=ridge)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-10 * ref.abs().max().item())
    # the reference iteration with the same step agrees
    ref_iter = newton_schulz_reference(a, newton_init_alpha(a, init, ridge), 50, ridge=ridge)
    torch.testing.assert_close(out, ref_iter, rtol=1e-10, atol=1e-10)


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
    """Records every torch function called inside the mode (``calls``) and the shape of
    every tensor produced (``shapes``)."""

    def __init__(self):
        super().__init__()
        self.shapes, self.calls = [], []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(func)
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
    out = fast_soft_attention(q, lm, v, sym_norm=sym_norm)
    torch.testing.assert_close(out, soft_attention_reference(q, lm, v, sym_norm), rtol=1e-8,
                               atol=1e-8)


def test_soft_attention_never_forms_n_by_n():
    n, m = 40, 5
    q, lm, v = torch.randn(1, 2, n, 8), torch.randn(1, 2, m, 8), torch.randn(1, 2, n, 8)
    with _RecordShapes() as rec:
        fast_soft_attention(q, lm, v)
    assert rec.shapes and all(not (s[-1] >= n and s[-2] >= n) for s in rec.shapes
                              if len(s) >= 2), rec.shapes
    with _RecordShapes() as rec:  # positive control: the dense reference does form it
        soft_attention_reference(q, lm, v)
    assert (1, 2, n, n) in rec.shapes


@pytest.mark.parametrize('pinv', ['newton', 'cholesky'])
def test_soft_attention_in_token_chunks_is_the_same_attention(pinv, monkeypatch):
    """Above a size P is never whole in inference: P^T V summed over token chunks, then P
    recomputed chunk by chunk.  Same equation as the dense float64 Nystrom matrix, with and
    without the padding masks, and P's largest piece is one chunk."""
    torch.manual_seed(3)
    b, h, n, m, d = 2, 3, 53, 7, 8
    q = torch.randn(b, h, n, d, dtype=torch.float64) * 0.6
    lm = torch.randn(b, h, m, d, dtype=torch.float64) * 0.6
    v = torch.randn(b, h, n, 4, dtype=torch.float64)
    valid, keep = torch.rand(b, n) > 0.2, torch.rand(b, m) > 0.3
    with torch.no_grad():
        whole = fast_soft_attention(q, lm, v, valid=valid, landmark_valid=keep, pinv=pinv)
    monkeypatch.setattr(policy, 'SOFT_CHUNK_ELEMENTS', b * h * m * 10)
    monkeypatch.setattr(policy, 'SOFT_CHUNK_TARGET', b * h * m * 11)   # 11 tokens a chunk
    with torch.no_grad(), _RecordShapes() as rec:
        out = fast_soft_attention(q, lm, v, pinv=pinv)
    assert (b, h, 11, m) in rec.shapes and (b, h, n, m) not in rec.shapes
    ref = soft_attention_reference(q, lm, v)
    tol = 1e-8 if pinv == 'newton' else 1e-5     # the Cholesky ridge, 1e-6 of the trace
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    with torch.no_grad():
        chunked = fast_soft_attention(q, lm, v, valid=valid, landmark_valid=keep, pinv=pinv)
    torch.testing.assert_close(chunked, whole, rtol=1e-12, atol=1e-12)
    # training keeps P whole (autograd records it once, not twice)
    q.requires_grad_(True)
    with _RecordShapes() as rec:
        fast_soft_attention(q, lm, v, pinv=pinv)
    assert (b, h, n, m) in rec.shapes


@pytest.mark.parametrize('compiled', [True, False])
@pytest.mark.parametrize('pinv', ['newton', 'cholesky'])
def test_soft_inference_per_head_products_are_the_same_attention(pinv, compiled, monkeypatch):
    """Inference writes P with one ``torch.mm`` per head into one buffer, finishes the kernel
    in one fused loop (compiled, or its eager form when compiling is off) and multiplies by
    P per head: the dense float64 Nystrom output, and what autograd's batched path gives."""
    monkeypatch.setenv('MMLINATTN_COMPILE', '1' if compiled else '0')
    torch.manual_seed(4)
    b, h, n, m, d = 2, 3, 37, 6, 8
    q = torch.randn(b, h, n, d, dtype=torch.float64) * 0.6
    lm = torch.randn(b, h, m, d, dtype=torch.float64) * 0.6
    v = torch.randn(b, h, n, 4, dtype=torch.float64)
    monkeypatch.setattr(policy, 'MM_LOOP_FLOPS', 2 * d * m)   # every product per head
    with torch.no_grad(), _RecordShapes() as rec:
        out = fast_soft_attention(q, lm, v, pinv=pinv)
    assert rec.calls.count(torch.mm) >= 3 * b * h and torch.bmm not in rec.calls[:3 * b * h]
    tol = 1e-8 if pinv == 'newton' else 1e-5     # the Cholesky ridge, 1e-6 of the trace
    torch.testing.assert_close(out, soft_attention_reference(q, lm, v), rtol=tol, atol=tol)
    q.requires_grad_(True), lm.requires_grad_(True)   # autograd: batched products, no loop
    with _RecordShapes() as rec:
        batched = fast_soft_attention(q, lm, v, pinv=pinv)
    assert torch.mm not in rec.calls
    torch.testing.assert_close(out, batched.detach(), rtol=1e-12, atol=1e-12)
    with torch.no_grad():                         # the float32 kernel of the fast path
        k32 = fast_gaussian_kernel(q.float(), lm.float(), denom=2.0)
        k64 = gaussian_kernel_reference(q, lm, denom=2.0)
    torch.testing.assert_close(k32.double(), k64, rtol=0, atol=1e-6)


def test_soft_attention_float32_under_autocast():
    torch.manual_seed(1)
    q, lm, v = (torch.randn(1, 2, 30, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 30, 8))
    qb, lb, vb = q.bfloat16(), lm.bfloat16(), v.bfloat16()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = fast_soft_attention(qb, lb, vb)
    assert out.dtype == torch.bfloat16
    ref = fast_soft_attention(qb.float(), lb.float(), vb.float())   # same inputs, fp32 math
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
    assert torch.equal(out, ref.bfloat16())


def test_soft_attention_gradients_flow_to_all_inputs():
    q = torch.randn(1, 2, 20, 8, dtype=torch.float64, requires_grad=True)
    lm = torch.randn(1, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 20, 8, dtype=torch.float64, requires_grad=True)
    fast_soft_attention(q, lm, v).square().sum().backward()
    for t in (q, lm, v):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


def test_soft_attention_gradcheck():
    """Through kernels, Eq. 12 and Eq. 17 together (well-conditioned landmarks)."""
    torch.manual_seed(2)
    q = (0.5 * torch.randn(1, 1, 6, 3, dtype=torch.float64)).requires_grad_()
    lm = (1.5 * torch.randn(1, 1, 3, 3, dtype=torch.float64)).requires_grad_()
    v = torch.randn(1, 1, 6, 2, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda a, b, c: fast_soft_attention(a, b, c, num_iters=40), (q, lm, v),
                     eps=1e-6, atol=1e-5)


def test_soft_attention_bad_shapes():
    with pytest.raises(ValueError, match='4-D'):
        fast_soft_attention(torch.randn(2, 5, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8))
    with pytest.raises(ValueError, match='tokens'):
        fast_soft_attention(torch.randn(1, 2, 5, 8), torch.randn(1, 2, 3, 8),
                            torch.randn(1, 2, 6, 8))


def test_scaled_init_with_ridge_is_the_plain_soft_iteration():
    """``init='scaled'``, ``ridge=0.01``: alpha = 0.9 * 2 / (max row sum of A)^2 from A, the
    iteration on A + 0.01 I (the authors' plain-SOFT code), written out here: the cap of the
    step at 1.9 / ||A + 0.01 I||_inf^2 never binds on a Gaussian kernel (row sums >= 1)."""
    a = torch.stack([kernel_matrix(9, scale=0.5, seed=s) for s in range(3)])
    theirs = 1.8 / a.sum(-1).max(-1).values ** 2
    torch.testing.assert_close(newton_init_alpha(a, 'scaled'), theirs, rtol=1e-15, atol=0)
    assert torch.equal(newton_init_alpha(a, 'scaled', ridge=0.01), newton_init_alpha(a, 'scaled'))
    eye = torch.eye(9, dtype=torch.float64).expand(3, 9, 9)   # the extreme, row sums 1
    assert torch.equal(newton_init_alpha(eye, 'scaled', ridge=0.01), torch.full((3, ), 1.8,
                                                                               dtype=eye.dtype))
    # a ridge of 0.1 would overshoot there (1.8 * 1.1^2 > 2): the cap takes over
    torch.testing.assert_close(newton_init_alpha(eye, 'scaled', ridge=0.1),
                               torch.full((3, ), 1.9 / 1.21, dtype=eye.dtype))
    v = newton_schulz_reference(a, theirs, 20, ridge=0.01)
    y = newton_schulz_pinv(a, 20, init='scaled', ridge=0.01)
    torch.testing.assert_close(y, v, rtol=1e-12, atol=1e-12)
    # Eq. 12 with the ridge: the gradient w.r.t. A is that w.r.t. A + ridge I
    a.requires_grad_(True)
    g = torch.randn_like(y)
    newton_schulz_pinv(a, 20, init='scaled', ridge=0.01).backward(g)
    yt = y.transpose(-1, -2)
    torch.testing.assert_close(a.grad, -(yt @ g @ yt), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------- Cholesky solver
def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def duplicate_landmarks(m=24, d=8, scale=0.8, seed=10):
    """(m, d) landmarks in which every third one repeats its predecessor: A has rank 2m/3."""
    g = torch.Generator().manual_seed(seed)
    x = scale * torch.randn(m, d, generator=g, dtype=torch.float64)
    x[2::3] = x[1::3]
    return x


@pytest.mark.parametrize('dtype,tol', [(torch.float64, 1e-5), (torch.float32, 2e-5)])
@pytest.mark.parametrize('m,scale', [(8, 1.5), (49, 1.0), (100, 0.7)])
def test_cholesky_matches_pinv_kernel_matrix(m, scale, dtype, tol):
    """Well-conditioned kernels: the 1e-6 relative ridge moves A^+ b by ~1e-6 relative."""
    a = kernel_matrix(m, scale=scale, batch=(2, ), seed=m)
    assert torch.linalg.cond(a).max() < 100
    b = torch.randn(2, m, 5, dtype=torch.float64)
    out = cholesky_pinv_solve(a.to(dtype), b.to(dtype))
    assert out.dtype == dtype
    assert rel_err(out, torch.linalg.pinv(a) @ b) < tol


def test_cholesky_ridge_is_relative_to_the_trace():
    """lambda = ridge + jitter * tr(A) / m: a scaled A gives the scaled solution."""
    a = spd(10, cond=5.0, seed=11)
    b = torch.randn(10, 3, dtype=torch.float64)
    lam = 0.01 + 1e-3 * a.diagonal().mean()
    expected = torch.linalg.solve(a + lam * torch.eye(10, dtype=torch.float64), b)
    torch.testing.assert_close(cholesky_pinv_solve(a, b, ridge=0.01, jitter=1e-3), expected,
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cholesky_pinv_solve(1e3 * a, b), cholesky_pinv_solve(a, b) / 1e3,
                               rtol=1e-12, atol=0)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_cholesky_rank_deficient_duplicate_landmarks(dtype):
    """Duplicate landmarks make A singular (float32 Cholesky of A itself fails); the solver
    still returns A^+ b for b in the range of A -- as in SOFT, where the rows of P^T V of
    duplicate landmarks are equal -- and never NaN.  In float32 the rounding error along the
    null space (e_i - e_j) is amplified by 1 / lambda; SOFT never sees it (P's columns of
    duplicate landmarks are equal, P (e_i - e_j) = 0), so the part in the range of A is
    compared there."""
    x = duplicate_landmarks(scale=1.5)
    a = gaussian_kernel_reference(x, x, denom=2.0)
    eig = torch.linalg.eigvalsh(a)
    assert eig[7] < 1e-14 < 0.1 < eig[8]           # rank 16, the rest well conditioned
    assert torch.linalg.cholesky_ex(a.float())[1] > 0   # a plain factorisation fails
    b = a @ torch.randn(24, 4, dtype=torch.float64)      # in the range of A
    out = cholesky_pinv_solve(a.to(dtype), b.to(dtype))
    assert torch.isfinite(out).all()
    ref = torch.linalg.pinv(a, hermitian=True) @ b
    in_range = a @ torch.linalg.pinv(a, hermitian=True)            # projector onto range(A)
    assert rel_err(in_range @ out.double(), ref) < 2e-5
    if dtype == torch.float64:
        assert rel_err(out, ref) < 1e-5


def test_cholesky_retries_with_a_larger_ridge():
    """A matrix the first ridge cannot make positive definite is factorised after raising its
    ridge 100-fold twice; the other matrix of the batch keeps its own."""
    eye = torch.eye(6, dtype=torch.float64)
    good = spd(6, seed=12)
    bad = spd(6, seed=13)
    bad = bad - (torch.linalg.eigvalsh(bad)[0] + 1e-6) * eye      # lambda_min = -1e-6
    b = torch.randn(2, 6, 2, dtype=torch.float64)
    out = cholesky_pinv_solve(torch.stack([good, bad]), b, jitter=1e-9)
    lam = 1e-9 * 100 ** 2 * bad.diagonal().mean()
    torch.testing.assert_close(out[1], torch.linalg.solve(bad + lam * eye, b[1]), rtol=1e-10,
                               atol=0)
    torch.testing.assert_close(out[0], cholesky_pinv_solve(good, b[0], jitter=1e-9), rtol=0,
                               atol=0)


def shifted_below_zero(seed, deficit):
    """A 6 x 6 SPD matrix shifted down to lambda_min = -deficit (a failed base factorisation)."""
    a = spd(6, seed=seed)
    return a - (torch.linalg.eigvalsh(a)[0] + deficit) * torch.eye(6, dtype=torch.float64)


def test_raised_ridge_is_logged_once_with_its_final_value(monkeypatch):
    """A raised ridge is said once per process with its final lambda, not on every call; a
    call that needs a larger ridge than already said says it again; a base-ridge
    factorisation and a traced call (a log call is no graph op) say nothing."""
    messages = []
    monkeypatch.setattr(soft_ops, '_RIDGE_RAISES_LOGGED', 0)
    from mmengine.logging import MMLogger
    monkeypatch.setattr(MMLogger.get_current_instance(), 'warning', messages.append)
    good = spd(6, seed=12)
    bad = shifted_below_zero(13, 1e-6)       # base 1e-9 tr(A)/m ~ 5e-9: two raises
    worse = shifted_below_zero(14, 1e-3)     # three raises
    b = torch.randn(6, 2, dtype=torch.float64)
    cholesky_pinv_solve(good, b, jitter=1e-9)
    with warnings.catch_warnings():          # the retry's host reads warn under a tracer
        warnings.simplefilter('ignore')
        torch.jit.trace(lambda a, r: cholesky_pinv_solve(a, r, jitter=1e-9),
                        (torch.stack([good, bad]), b), check_trace=False)  # no eager rerun
    assert messages == []
    for _ in range(3):
        cholesky_pinv_solve(torch.stack([good, bad]), b, jitter=1e-9)
    assert len(messages) == 1
    assert '1 of 2 matrices' in messages[0] and '10000x' in messages[0]
    assert f'{float(1e-9 * 100 ** 2 * bad.diagonal().mean()):.3g} ' in messages[0]
    cholesky_pinv_solve(torch.stack([bad, worse, good]), b, jitter=1e-9)
    cholesky_pinv_solve(bad, b, jitter=1e-9)
    assert len(messages) == 2
    assert '2 of 3 matrices' in messages[1] and '1e+06x' in messages[1]
    assert f'{float(1e-9 * 100 ** 3 * worse.diagonal().mean()):.3g} ' in messages[1]


@pytest.mark.parametrize('bad', ['indefinite', 'nan'])
def test_cholesky_raises_instead_of_nan(bad):
    a = spd(5, seed=14)
    a = a - 10 * torch.eye(5, dtype=torch.float64) if bad == 'indefinite' else a
    if bad == 'nan':
        a[0, 0] = float('nan')
    with pytest.raises(ValueError, match='not positive definite'):
        cholesky_pinv_solve(a, torch.randn(5, 2, dtype=torch.float64))


def test_cholesky_bad_arguments():
    with pytest.raises(ValueError, match='m, m'):
        cholesky_pinv_solve(torch.randn(3, 4), torch.randn(3, 1))
    with pytest.raises(ValueError, match='rhs'):
        cholesky_pinv_solve(torch.eye(3), torch.randn(4, 1))
    with pytest.raises(ValueError, match='jitter'):
        cholesky_pinv_solve(torch.eye(3), torch.randn(3, 1), jitter=0.0)
    with pytest.raises(ValueError, match='pinv'):
        fast_soft_attention(torch.randn(1, 1, 5, 4), torch.randn(1, 1, 2, 4),
                            torch.randn(1, 1, 5, 4), pinv='svd')


def test_cholesky_gradcheck():
    a = kernel_matrix(5, scale=1.2, seed=15).requires_grad_()
    b = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda x, y: cholesky_pinv_solve((x + x.T) / 2, y), (a, b), eps=1e-6,
                     atol=1e-6)


def test_soft_attention_cholesky_gradcheck():
    torch.manual_seed(2)
    q = (0.5 * torch.randn(1, 1, 6, 3, dtype=torch.float64)).requires_grad_()
    lm = (1.5 * torch.randn(1, 1, 3, 3, dtype=torch.float64)).requires_grad_()
    v = torch.randn(1, 1, 6, 2, dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda a, b, c: fast_soft_attention(a, b, c, pinv='cholesky'), (q, lm, v),
                     eps=1e-6, atol=1e-5)


@pytest.mark.parametrize('sym_norm', [True, False])
def test_soft_attention_cholesky_vs_newton_vs_dense(sym_norm):
    """Float32 fast paths against the dense float64 reference: with well-separated landmarks
    both solvers agree with it (and each other) to float32 accuracy."""
    torch.manual_seed(3)
    q = torch.randn(2, 3, 64, 16, dtype=torch.float64) * 0.4
    lm = torch.randn(2, 3, 12, 16, dtype=torch.float64) * 0.4
    v = torch.randn(2, 3, 64, 8, dtype=torch.float64)
    ref = soft_attention_reference(q, lm, v, sym_norm)
    args = (q.float(), lm.float(), v.float())
    chol = fast_soft_attention(*args, sym_norm=sym_norm, pinv='cholesky')
    newton = fast_soft_attention(*args, sym_norm=sym_norm)
    assert chol.dtype == torch.float32
    assert rel_err(chol, ref) < 2e-5 and rel_err(newton, ref) < 2e-5
    torch.testing.assert_close(fast_soft_attention(q, lm, v, sym_norm=sym_norm, pinv='cholesky'),
                               ref, rtol=1e-5, atol=1e-5)


def test_soft_attention_cholesky_close_landmarks():
    """Close landmarks (cond(A) ~ 3e5): 20 Newton steps have not converged on the small
    eigenvalues (60 reach 1e-11) and stay far from A^+; the Cholesky solve is off by its
    ridge's bias (the same 1.4e-4 in float64)."""
    torch.manual_seed(4)
    q = 0.15 * torch.randn(1, 2, 200, 8, dtype=torch.float64)
    lm = q[:, :, ::4]                                       # 50 landmarks among the tokens
    v = torch.randn(1, 2, 200, 8, dtype=torch.float64)
    a = gaussian_kernel_reference(lm, lm, denom=2.0)
    assert torch.linalg.cond(a).min() > 1e5
    ref = soft_attention_reference(q, lm, v)
    args = (q.float(), lm.float(), v.float())
    # measured in float32: 1.3e-4 and 0.36
    assert rel_err(fast_soft_attention(*args, pinv='cholesky'), ref) < 5e-4
    assert rel_err(fast_soft_attention(*args), ref) > 1e-1


def test_soft_attention_cholesky_duplicate_landmarks():
    x = duplicate_landmarks(m=12, d=8, scale=0.5, seed=16)
    lm = x.expand(1, 2, 12, 8)
    q = torch.cat([x, 0.5 * torch.randn(30, 8, dtype=torch.float64)]).expand(1, 2, 42, 8)
    v = torch.randn(1, 2, 42, 4, dtype=torch.float64)
    out = fast_soft_attention(q.float(), lm.float(), v.float(), pinv='cholesky')
    assert torch.isfinite(out).all()
    assert rel_err(out, soft_attention_reference(q, lm, v)) < 1e-4


def test_soft_attention_cholesky_masks_match_unpadded():
    """landmark_valid / valid with the Cholesky solver: the identity block of unused
    landmarks leaves the used ones' solve as in the smaller problem."""
    torch.manual_seed(5)
    q, lm, v = (torch.randn(1, 2, 20, 8, dtype=torch.float64) * 0.5,
                torch.randn(1, 2, 6, 8, dtype=torch.float64) * 0.5,
                torch.randn(1, 2, 20, 4, dtype=torch.float64))
    small = fast_soft_attention(q, lm[:, :, :4], v, pinv='cholesky')
    mask = torch.tensor([[True] * 4 + [False] * 2])
    torch.testing.assert_close(fast_soft_attention(q, lm, v, landmark_valid=mask, pinv='cholesky'),
                               small, rtol=1e-6, atol=1e-9)


def test_newton_cost_logged_once(monkeypatch):
    """More than NEWTON_LOG_LANDMARKS landmarks with Newton: one warning per process naming the
    two ways out; Cholesky and small m log nothing."""
    messages = []
    monkeypatch.setattr(soft_kernels, '_NEWTON_COST_LOGGED', False)
    monkeypatch.setattr(policy, 'NEWTON_LOG_LANDMARKS', 4)
    from mmengine.logging import MMLogger
    monkeypatch.setattr(MMLogger.get_current_instance(), 'warning', messages.append)
    q, lm, v = torch.randn(1, 1, 10, 4), torch.randn(1, 1, 5, 4), torch.randn(1, 1, 10, 4)
    fast_soft_attention(q, lm[:, :, :4], v)
    fast_soft_attention(q, lm, v, pinv='cholesky')
    assert messages == []
    fast_soft_attention(q, lm, v)
    fast_soft_attention(q, lm, v)
    assert len(messages) == 1
    assert 'm = 5 landmarks' in messages[0] and "pinv='cholesky'" in messages[0]
    assert 'max_landmarks=49' in messages[0]


def test_backbone_passes_pinv_to_every_soft_layer():
    """``SOFT(pinv='cholesky')`` (a config's ``backbone=dict(..., pinv='cholesky')``) reaches
    every SOFT attention; the default stays Newton-Schulz; a bad name fails at build time."""
    from mmlinattn.models.backbones.soft import SOFT
    from mmlinattn.models.layers.soft_attention import SoftAttention
    arch = dict(embed_dims=(32, 64), num_heads=(1, 2), depths=(1, 1), sr_ratios=(2, 1),
                mlp_ratios=(2, 2), attn_types=('soft', 'soft'), v_conv_sizes=(0, 0))
    for kwargs, expected in [({}, 'newton'), (dict(pinv='cholesky'), 'cholesky')]:
        model = SOFT(arch=arch, out_indices=(0, 1), **kwargs).eval()
        layers = [m for m in model.modules() if isinstance(m, SoftAttention)]
        assert len(layers) == 2 and all(m.pinv == expected for m in layers)
    torch.manual_seed(6)
    newton = SOFT(arch=arch, out_indices=(0, 1)).eval()
    chol = SOFT(arch=arch, out_indices=(0, 1), pinv='cholesky').eval()
    chol.load_state_dict(newton.state_dict())
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(newton(x), chol(x)):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match='pinv'):
        SoftAttention(32, 1, 2, pinv='svd')


def test_backbone_paper_init_with_ridge_is_finite_on_spread_landmarks():
    """``SOFT(newton_init='paper', newton_ridge=0.01)`` reaches every SOFT attention, and on
    spread landmarks (A close to I) gives the ridged inverse instead of NaN (the step used to
    come from A and overshoot on A + 0.01 I): the same maps as ``newton_init='safe'``."""
    from mmlinattn.models.backbones.soft import SOFT
    from mmlinattn.models.layers.soft_attention import SoftAttention
    arch = dict(embed_dims=(32, 64), num_heads=(1, 2), depths=(1, 1), sr_ratios=(2, 1),
                mlp_ratios=(2, 2), attn_types=('soft', 'soft'), v_conv_sizes=(0, 0))
    models = []
    for init in ('paper', 'safe'):
        torch.manual_seed(0)
        model = SOFT(arch=arch, out_indices=(0, 1), newton_init=init, newton_ridge=0.01).eval()
        layers = [m for m in model.modules() if isinstance(m, SoftAttention)]
        assert len(layers) == 2
        assert all(m.newton_init == init and m.ridge == 0.01 for m in layers)
        for m in layers:   # a landmark LN gain of 2 spreads the landmarks: A ~ I
            torch.nn.init.constant_(m.sampler.norm.weight, 2.0)
        models.append(model)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for paper, safe in zip(models[0](x), models[1](x)):
            assert torch.isfinite(paper).all()
            torch.testing.assert_close(paper, safe, rtol=1e-5, atol=1e-5)
