"""NaLa feature maps and attention (NaLaFormer, arXiv 2506.21137, Eqs. 8-17) against the
explicit references next to them in mmlinattn.ops.nalaformer / .normalized_attention, and
their fast forms (mmlinattn.kernels.nala)."""
import math

import pytest
import torch
import torch.nn.functional as F
from autograd_helpers import plain_autograd_core
from scipy.stats import spearmanr

import mmlinattn.kernels.chunked as la
from mmlinattn.kernels import compiled, policy
from mmlinattn.kernels.nala import (_compiled_feature_maps, _fast_feature_maps,
                                    _fused_feature_maps, _sin_quarter, fast_nala_attention)
from mmlinattn.ops.nalaformer import (inhibit_angle, nala_attention_matrix,
                                      nala_attention_reference, nala_feature_maps,
                                      nala_similarity_reference)
from mmlinattn.ops.normalized_attention import normalized_attention_reference

KERNELS = ['cos_sin', 'relu_split']
f64 = torch.float64


def _qkv(b=2, h=3, n=37, m=None, d=16, dv=8, dtype=f64):
    m = n if m is None else m
    # per-token scales over three decades, so norms are small, tanh-active and saturated
    q = torch.randn(b, h, n, d, dtype=dtype) * torch.logspace(-1.5, 1, n, dtype=dtype)[:, None]
    k = torch.randn(b, h, m, d, dtype=dtype) * torch.logspace(-1, 0.7, m, dtype=dtype)[:, None]
    v = torch.randn(b, h, m, dv, dtype=dtype)
    return q, k, v


def _entropy(a):
    return -(a * a.clamp_min(1e-300).log()).sum(-1)


@pytest.mark.parametrize('kernel', KERNELS)
@pytest.mark.parametrize('m', [37, 20])
def test_linear_form_equals_materialised_attention(kernel, m):
    q, k, v = _qkv(m=m)
    ref = nala_attention_matrix(q, k, kernel=kernel) @ v
    out = fast_nala_attention(q, k, v, kernel=kernel, eps=1e-300)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    # the default eps (1e-6 on the 1/N-scaled normaliser) is a negligible perturbation
    torch.testing.assert_close(fast_nala_attention(q, k, v, kernel=kernel), ref, rtol=1e-4,
                               atol=1e-5)
    # with the same eps (norm clamp and normaliser term) the dense form is exact
    torch.testing.assert_close(fast_nala_attention(q, k, v, kernel=kernel),
                               nala_attention_reference(q, k, v, kernel), rtol=1e-10,
                               atol=1e-12)


def test_cos_sin_similarity_is_eq17():
    q, k, _ = _qkv(b=1, h=1)
    phq, phk = nala_feature_maps(q[0, 0], k[0, 0])
    torch.testing.assert_close(phq @ phk.T, nala_similarity_reference(q[0, 0], k[0, 0]))


@pytest.mark.parametrize('kernel', KERNELS)
@pytest.mark.parametrize('inplace', [False, True])
def test_fast_feature_maps_equal_the_reference(kernel, inplace):
    q, k, _ = _qkv()
    q_before, k_before = q.clone(), k.clone()
    ref_q, ref_k = nala_feature_maps(q, k, kernel=kernel)
    phi_q, phi_k = _fast_feature_maps(kernel, 3.0, 20.0, 1e-6, inplace)
    fq, fk = phi_q(q), phi_k(k)
    assert fq.shape == ref_q.shape == q.shape[:-1] + (2 * q.shape[-1], )
    torch.testing.assert_close(fq, ref_q)
    torch.testing.assert_close(fk, ref_k)
    # the in-place variant only reuses its own buffers, never the inputs
    assert torch.equal(q, q_before) and torch.equal(k, k_before)


@pytest.mark.parametrize('kernel', KERNELS)
@pytest.mark.parametrize('chunk', [1, 5, 37, 64])
def test_chunked_attention_equals_dense(kernel, chunk):
    from mmlinattn.kernels.chunked import chunked_linear_attention
    q, k, v = _qkv(m=29)
    valid = torch.ones(2, 29, dtype=torch.bool)
    valid[1, 20:] = False
    phi_q, phi_k = _fast_feature_maps(kernel, 3.0, 20.0, 1e-6, True)
    for mask in (None, valid):
        # dense N x M similarities, padded keys zeroed, means over each image's valid keys
        ref = normalized_attention_reference(phi_q(q) @ phi_k(k).transpose(-2, -1), v, 1e-6,
                                             mask)
        got = chunked_linear_attention(q, k, v, phi_q, phi_k, 1e-6, mask, chunk=chunk)
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    # without autograd the (B, h, N, D) output is stored tokens-major: merging the heads
    # into (B, N, h * D) is a view
    b, h, n, d = got.shape
    merged = got.transpose(1, 2).reshape(b, n, h * d)
    assert h > 1 and merged.data_ptr() == got.data_ptr()
    torch.testing.assert_close(merged, ref.transpose(1, 2).reshape(b, n, h * d), rtol=1e-12,
                               atol=1e-12)


def test_attention_gradients_match_the_materialised_reference():
    """Training takes the out-of-place feature maps; its gradients are the dense ones."""
    q, k, v = (t.requires_grad_() for t in _qkv(n=11, m=9, d=4, dv=3))
    fast = torch.autograd.grad(fast_nala_attention(q, k, v, eps=1e-300).square().sum(), (q, k, v))
    dense = torch.autograd.grad((nala_attention_matrix(q, k) @ v).square().sum(), (q, k, v))
    for a, b in zip(fast, dense):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_relu_split_is_same_sign_products():
    q, k, _ = _qkv(b=1, h=1)
    q, k = q[0, 0], k[0, 0]
    dq = q / q.norm(dim=-1, keepdim=True)
    p = 3.0 * (0.5 + torch.tanh(q.norm(dim=-1, keepdim=True)))
    a, b = dq.abs() ** p, k.abs() ** 3.0
    same = (torch.sign(dq)[:, None, :] == torch.sign(k)[None, :, :]).to(f64)
    ref = (a[:, None, :] * b[None, :, :] * same).sum(-1)
    phq, phk = nala_feature_maps(q, k, kernel='relu_split')
    torch.testing.assert_close(phq @ phk.T, ref)


@pytest.mark.parametrize('kernel', KERNELS)
@pytest.mark.parametrize('alpha', [1.0, 20.0])
@pytest.mark.parametrize('dtype', [torch.float32, f64])
def test_similarities_nonnegative_and_rows_sum_to_one(kernel, alpha, dtype):
    d = 8
    eye = torch.eye(d, dtype=dtype)
    # arbitrary reals: random signs and scales, axis-aligned vectors (saturated angles),
    # their negatives, exact zeros and huge / tiny norms
    q = torch.cat([torch.randn(200, d, dtype=dtype) * torch.logspace(-4, 2, 200,
                                                                    dtype=dtype)[:, None],
                   eye, -eye, torch.zeros(1, d, dtype=dtype)])
    k = torch.cat([torch.randn(150, d, dtype=dtype) * 10 ** torch.empty(150, 1, dtype=dtype)
                   .uniform_(-3, 1.5), -30 * eye, 30 * eye,
                   1e-3 * torch.sign(torch.randn(4, d, dtype=dtype))])
    phq, phk = nala_feature_maps(q, k, kernel=kernel, alpha=alpha)
    s = phq @ phk.T
    assert torch.isfinite(s).all()
    if dtype == f64:
        assert (s >= 0).all(), s.min()
    else:  # up to the rounding bound of a length-2d dot product
        bound = 2 * d * torch.finfo(dtype).eps * (phq.abs() @ phk.abs().T)
        assert (s >= -bound).all(), (s + bound).min()
    a = nala_attention_matrix(q[:-1], k, kernel=kernel, alpha=alpha)  # zero query: 0/0 row
    torch.testing.assert_close(a.sum(-1), torch.ones(len(q) - 1, dtype=dtype))
    assert (a >= 0).all()


@pytest.mark.parametrize('dtype', [torch.float32, f64])
def test_angles_stay_within_quarter_pi(dtype):
    """Saturated opposite-sign entries must not exceed pi/2 apart in the working precision
    (float32 rounds pi/4 up), or their cosine, and the similarity, turns negative."""
    q = torch.eye(4, dtype=dtype)
    k = -100 * torch.eye(4, dtype=dtype)
    phq, phk = nala_feature_maps(q, k)
    assert (torch.diagonal(phq @ phk.T) >= 0).all()
    for inplace in (False, True):
        phi_q, phi_k = _fast_feature_maps('cos_sin', 3.0, 20.0, 1e-6, inplace)
        assert ((phi_q(q) * phi_k(k)).sum(-1) >= 0).all()
    fused_q, fused_k = _fused_feature_maps('cos_sin', 3.0, 20.0, 1e-6)
    assert ((fused_q(q) * fused_k(k)).sum(-1) >= 0).all()
    theta = inhibit_angle(torch.tensor([-1.0, 1.0], dtype=dtype), alpha=1e3)
    assert theta.abs().max().item() <= math.pi / 4


@pytest.mark.parametrize('kernel', KERNELS)
def test_feature_maps_preserve_the_powered_norms(kernel):
    q, k, _ = _qkv()
    phq, phk = nala_feature_maps(q, k, kernel=kernel)
    torch.testing.assert_close(phk.norm(dim=-1), (k.abs() ** 3).norm(dim=-1))
    qn = q.norm(dim=-1, keepdim=True)
    mq = (q / qn).abs() ** (3 * (0.5 + torch.tanh(qn)))
    torch.testing.assert_close(phq.norm(dim=-1), mq.norm(dim=-1))


def test_cosine_inhibit_suppresses_only_opposite_signs():
    """Per-dimension factor cos(theta_q,i - theta_k,i) (Eq. 15): ~1 for same-sign entries,
    small for an opposite-sign entry with alpha=20; the paper's literal alpha=1 barely
    inhibits (a ~0.125 direction entry gives theta ~0.1 rad, cos(2 theta) ~0.98)."""
    d = 64
    q = torch.randn(d, dtype=f64)
    q[0] = q[1:].norm() / math.sqrt(d - 1)     # a typical-size entry (|d(q)_0| ~ 1/8) to flip
    k = q.clone()
    k[0] = -k[0]
    for alpha, bound in [(20.0, 0.05), (1.0, None)]:
        phq, phk = nala_feature_maps(q, k, alpha=alpha)
        prod = phq * phk
        cos = (prod[:d] + prod[d:]) / (phq[:d] ** 2 + phq[d:] ** 2).sqrt() / \
            (phk[:d] ** 2 + phk[d:] ** 2).sqrt()
        torch.testing.assert_close(cos[1:], torch.ones(d - 1, dtype=f64))
        if bound is not None:
            assert cos[0] < bound
        else:
            assert cos[0] > 0.9


@pytest.mark.parametrize('kernel', KERNELS)
def test_invariant_to_key_rescaling_not_to_query_rescaling(kernel):
    q, k, v = _qkv()
    q = q / q.norm(dim=-1, keepdim=True) * 0.4            # tanh(||q||) in its active range
    out = fast_nala_attention(q, k, v, kernel=kernel, eps=1e-300)
    for c in (0.3, 2.0, 7.0):
        torch.testing.assert_close(fast_nala_attention(q, c * k, v, kernel=kernel, eps=1e-300), out)
    for c in (0.25, 3.0):
        diff = (fast_nala_attention(q * c, k, v, kernel=kernel, eps=1e-300) - out).abs().max()
        assert diff > 1e-2, (c, diff)
    # control: degree-1 homogeneous ReLU linear attention ignores the query scale (Prop. 2)
    rq, rk = F.relu(q), F.relu(k)

    def relu_lin(qq):
        a = qq @ rk.transpose(-2, -1)
        return (a / a.sum(-1, keepdim=True)) @ v

    torch.testing.assert_close(relu_lin(3.0 * rq), relu_lin(rq))


@pytest.mark.parametrize('kernel', KERNELS)
def test_entropy_decreases_with_query_norm(kernel):
    """Fig. 4: fixed direction, ||q|| from 0.1 to 2.5, random keys."""
    d, m = 16, 64
    norms = torch.linspace(0.1, 2.5, 25, dtype=f64)
    for _ in range(10):
        u = torch.randn(d, dtype=f64)
        keys = torch.randn(m, d, dtype=f64)
        q = norms[:, None] * (u / u.norm())
        ent = _entropy(nala_attention_matrix(q, keys, kernel=kernel))
        rho = spearmanr(norms.numpy(), ent.numpy())[0]
        assert rho < -0.9, rho
        # ReLU linear attention (baseline): the same row for every query norm
        a = F.relu(q) @ F.relu(keys).T
        base = _entropy(a / a.sum(-1, keepdim=True))
        assert (base.max() - base.min()) < 1e-10
        assert ent[0] - ent[-1] > 1e-2


@pytest.mark.parametrize('kernel', KERNELS)
def test_permutation_equivariance(kernel):
    q, k, v = _qkv()
    out = fast_nala_attention(q, k, v, kernel=kernel)
    perm = torch.randperm(q.shape[-2])
    torch.testing.assert_close(fast_nala_attention(q[..., perm, :], k[..., perm, :],
                                                   v[..., perm, :], kernel=kernel),
                               out[..., perm, :])
    # permuting only the key-value set changes nothing
    torch.testing.assert_close(fast_nala_attention(q, k[..., perm, :], v[..., perm, :],
                                                   kernel=kernel), out)


@pytest.mark.parametrize('kernel', KERNELS)
def test_float32_core_under_autocast_and_dtype_follows_input(kernel):
    q, k, v = (t.float() for t in _qkv(d=32))
    k = k * 8                                             # |k|^3 ~ 1e5 overflows float16
    ref = fast_nala_attention(q.double(), k.double(), v.double(), kernel=kernel)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
        out = fast_nala_attention(qb, kb, vb, kernel=kernel)
    assert out.dtype == torch.bfloat16
    exact = fast_nala_attention(qb.double(), kb.double(), vb.double(), kernel=kernel)
    torch.testing.assert_close(out.double(), exact, rtol=1e-2, atol=2e-2)
    out16 = fast_nala_attention(q.half(), k.half(), v.half(), kernel=kernel)
    assert out16.dtype == torch.float16 and torch.isfinite(out16).all()
    out32 = fast_nala_attention(q, k, v, kernel=kernel)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('kernel', KERNELS)
def test_zero_rows_give_finite_values_and_gradients(kernel):
    q, k, v = (t.float() for t in _qkv(b=1, h=2, n=9))
    q[..., 3, :] = 0
    k[..., 5, :] = 0
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out = fast_nala_attention(q, k, v, kernel=kernel)
    out.square().sum().backward()
    assert torch.isfinite(out).all()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize('fuse', [False, True])
def test_gradcheck(fuse):
    """Eager maps and the maps compiled with their backward (gradcheck backpropagates twice
    through one graph, which a compiled backward allows without donated buffers)."""
    q, k, v = _qkv(b=1, h=1, n=6, d=4, dv=3)
    q, k, v = q * 0.5, k + 0.1, v
    for kernel in KERNELS:
        with torch._functorch.config.patch(donated_buffer=False):
            assert torch.autograd.gradcheck(
                lambda a, b, c: fast_nala_attention(a, b, c, kernel=kernel, fuse=fuse),
                (q.requires_grad_(), k.requires_grad_(), v.requires_grad_()))


@pytest.mark.parametrize('compile_env', ['1', '0'])
def test_training_keeps_little_for_the_backward(compile_env, monkeypatch):
    """Under autograd the core keeps q, k, v and its key summary and recomputes the feature
    maps in its backward (compiled with their own backward, or eager): the same gradients
    as plain autograd through the eager maps, which keeps the maps' dozen intermediates per
    chunk."""
    from torch.autograd.graph import saved_tensors_hooks
    monkeypatch.setenv(policy.COMPILE_ENV, compile_env)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 700, 16, requires_grad=True) for _ in range(3))
    grad_out = torch.randn(1, 2, 700, 16)

    def run(**kwargs):
        saved = []

        def pack(t):
            saved.append(t.numel())
            return t
        with saved_tensors_hooks(pack, lambda t: t):
            out = fast_nala_attention(q, k, v, **kwargs)
        return out, torch.autograd.grad(out, (q, k, v), grad_out), sum(saved)
    out, grads, kept = run()
    # the reference: plain autograd through the chunked core and the eager maps, every
    # intermediate stored
    with plain_autograd_core():
        ref_out, ref_grads, ref_kept = run(fuse=False)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    inputs = 3 * q.numel()
    assert ref_kept > 8 * inputs          # positive control: the plain maps keep a lot
    # q, k, v and the (heads x 2d x (d + 1)) key summary: the features are recomputed
    assert kept < 1.1 * inputs, (kept / inputs, ref_kept / inputs)


def test_training_runs_each_compiled_map_in_one_grad_mode(monkeypatch):
    """Eager training runs the compiled inference maps in the core's forward (autograd off)
    and the maps compiled with their backward only in its backward (autograd on): each
    compiled function meets one grad mode, so it is not compiled once more for the other
    (dynamo guards on the grad mode); the gradients are the eager maps'."""
    monkeypatch.setenv(policy.COMPILE_ENV, '1')
    calls = set()
    call = compiled.LazyCompiled.__call__

    def recording(self, *args):
        calls.add((self.name, torch.is_grad_enabled()))
        return call(self, *args)
    monkeypatch.setattr(compiled.LazyCompiled, '__call__', recording)
    q, k, v = (t.float().requires_grad_() for t in _qkv(n=300))
    grads = torch.autograd.grad(fast_nala_attention(q, k, v).square().sum(), (q, k, v))
    assert calls == {('NaLa query features (cos_sin)', False),
                     ('NaLa key features (cos_sin)', False),
                     ('NaLa query features with backward (cos_sin)', True),
                     ('NaLa key features with backward (cos_sin)', True)}, calls
    ref = torch.autograd.grad(fast_nala_attention(q, k, v, fuse=False).square().sum(), (q, k, v))
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('chunk', [None, 5])
def test_closed_form_backward_equals_the_dense_reference(masked, chunk):
    """The core's own backward (features recomputed, the normalisation's gradient in closed
    form) against autograd through the explicit N x M attention, float64, over several
    chunks and with padded keys."""
    from mmlinattn.kernels.chunked import chunked_linear_attention
    torch.manual_seed(0)
    q, k, v = (t.requires_grad_() for t in _qkv(b=2, h=2, n=17, m=17, d=4, dv=3))
    valid = torch.ones(2, 17, dtype=torch.bool)
    if masked:
        valid[1, 12:] = False
    maps = _fast_feature_maps('cos_sin', 3.0, 20.0, 1e-6, inplace=False)
    grad_out = torch.randn(2, 2, 17, 3, dtype=f64)
    out = chunked_linear_attention(q, k, v, *maps, 1e-6, valid, chunk)
    fast = torch.autograd.grad(out, (q, k, v), grad_out)
    ref = nala_attention_reference(q, k, v, valid=valid)
    dense = torch.autograd.grad(ref, (q, k, v), grad_out)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-13)
    for a, b in zip(fast, dense):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    if masked:  # a padded key gets no gradient, nor does its value
        assert fast[1][1, :, 12:].abs().max() == 0 and fast[2][1, :, 12:].abs().max() == 0
        assert fast[1][1, :, :12].abs().max() > 0


@pytest.mark.parametrize('kwargs, name', [(dict(kernel='relu'), 'kernel'), (dict(lam=0), 'lam'),
                                          (dict(alpha=-1.0), 'alpha'), (dict(eps=-1), 'eps')])
def test_bad_arguments(kwargs, name):
    q, k, v = _qkv(b=1, h=1, n=4)
    with pytest.raises(ValueError, match=name):
        fast_nala_attention(q, k, v, **kwargs)


def test_bad_shapes():
    q, k, v = _qkv(b=1, h=1, n=4)
    with pytest.raises(ValueError, match='nala_attention'):
        fast_nala_attention(q, k[..., :3], v)


# ---------------------------------------------------------------- fused / compiled fast path
def _edge_qk(dtype=f64, d=8):
    """Random rows over six decades plus exact zeros in the directions (log 0), saturated
    angles (axis-aligned rows and their negatives) and an all-zero row."""
    eye = torch.eye(d, dtype=dtype)
    q = torch.cat([torch.randn(60, d, dtype=dtype) * torch.logspace(-3, 3, 60,
                                                                   dtype=dtype)[:, None],
                   eye, -3 * eye, torch.zeros(1, d, dtype=dtype)])
    return q, torch.flip(q, (0, )) * 2


@pytest.mark.parametrize('kernel', KERNELS)
def test_fused_feature_maps_are_exact_rewrites_of_the_reference(kernel):
    """tanh = 2 sigmoid(2u) - 1, cos = sqrt(1 - sin^2) on |theta| <= pi/4 and
    |d|^p = exp(p log|d|) are identities: equal to the reference to float64 rounding."""
    q, k = _edge_qk()
    ref_q, ref_k = nala_feature_maps(q, k, kernel=kernel)
    phi_q, phi_k = _fused_feature_maps(kernel, 3.0, 20.0, 1e-6)
    torch.testing.assert_close(phi_q(q), ref_q, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(phi_k(k), ref_k, rtol=1e-12, atol=1e-14)


def test_float32_sine_polynomial_is_as_accurate_as_sin():
    """The fused maps' float32 sine (a degree-9 polynomial) on [-pi/4, pi/4]: its error
    against the float64 sine is within that of float32 ``torch.sin`` (plus one ulp), and
    float64 keeps the exact sine."""
    x64 = torch.linspace(-math.pi / 4, math.pi / 4, 200_001, dtype=f64)
    x32 = x64.float()
    exact = torch.sin(x32.double())
    poly_err = (_sin_quarter(x32).double() - exact).abs() / exact.abs().clamp_min(1e-30)
    sin_err = (torch.sin(x32).double() - exact).abs() / exact.abs().clamp_min(1e-30)
    assert poly_err.max() <= sin_err.max() + 2 ** -23
    assert torch.equal(_sin_quarter(x64), torch.sin(x64))


@pytest.mark.parametrize('kernel', KERNELS)
def test_compiled_attention_equals_the_dense_reference(kernel, compile_on):
    """Inference takes the compiled feature maps; float64 values are the dense attention's,
    float32 values the eager path's up to float32 rounding, and one compilation serves
    other token counts and head layouts."""
    q, k, v = _qkv(m=29)
    with torch.no_grad():
        out = fast_nala_attention(q, k, v, kernel=kernel, eps=1e-300)
    phi_q, phi_k = _compiled_feature_maps(kernel, 3.0, 20.0, 1e-300)
    assert phi_q._compiled is not None and not (phi_q.failed or phi_k.failed)
    ref = nala_attention_matrix(q, k, kernel=kernel) @ v
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    from torch._dynamo.utils import counters
    for n, h in ((37, 3), (300, 2), (5, 3)):
        q, k, v = _qkv(b=1, h=h, n=n, dtype=torch.float32)
        graphs = counters['stats']['unique_graphs']
        with torch.no_grad():
            fast = fast_nala_attention(q, k, v, kernel=kernel)
            eager = fast_nala_attention(q, k, v, kernel=kernel, fuse=False)
        torch.testing.assert_close(fast, eager, rtol=1e-4, atol=1e-5)
        if n != 37:  # the first float32 call compiled; later sizes reuse it
            assert counters['stats']['unique_graphs'] == graphs


def test_compiled_path_only_without_autograd_and_special_modes(monkeypatch):
    from torch.utils.flop_counter import FlopCounterMode
    x = torch.randn(4, 8)
    monkeypatch.setenv(policy.COMPILE_ENV, '1')
    assert compiled.compiled_allowed.runs(x)
    assert not compiled.compiled_allowed.runs(x, torch.randn(3, requires_grad=True))
    with torch.no_grad():
        assert compiled.compiled_allowed.runs(x, torch.randn(3, requires_grad=True))
    with FlopCounterMode(display=False):  # the benchmark counts FLOPs on the eager ops
        assert not compiled.compiled_allowed.runs(x)
    assert not compiled.compiled_allowed.runs(torch.empty(4, 8, device='meta'))
    monkeypatch.setenv(policy.COMPILE_ENV, '0')
    assert not compiled.compiled_allowed.runs(x)


def test_compile_failure_falls_back_to_eager_with_one_warning(monkeypatch):
    calls = []

    def broken_compile(fn, **kwargs):
        def run(*args):
            calls.append(args)
            raise RuntimeError('no C++ compiler found')
        return run
    monkeypatch.setattr(torch, 'compile', broken_compile)
    f = compiled.LazyCompiled(lambda t: t * 2, 'doubling')
    x = torch.arange(3.0)
    with pytest.warns(RuntimeWarning, match='doubling failed.*no C\\+\\+ compiler'):
        torch.testing.assert_close(f(x), x * 2)
    assert f.failed and len(calls) == 1
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no second warning, no second attempt
        torch.testing.assert_close(f(x + 1), (x + 1) * 2)
    assert len(calls) == 1


@pytest.mark.parametrize('masked', [False, True])
def test_relu_split_rope_equals_dense_numerator_only_rope(masked):
    """O(N) relu_split_rope = an explicit N x N computation: numerator similarities between
    the RoPE-rotated halves [relu(x); relu(-x)], denominator from the unrotated maps."""
    from mmlinattn.models.layers import rope_2d_angles
    h, w, d = 5, 7, 16
    q, k, v = _qkv(n=h * w, d=d)
    angles = rope_2d_angles(h, w, d, dtype=f64)
    valid = None
    if masked:
        valid = torch.ones(q.shape[0], h * w, dtype=torch.bool)
        valid[0, 20:] = False
    out = fast_nala_attention(q, k, v, kernel='relu_split_rope', eps=1e-6, rope_angles=angles,
                              valid=valid, fuse=False)
    ref = nala_attention_reference(q, k, v, 'relu_split_rope', eps=1e-6, valid=valid,
                                   rope_angles=angles)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    # the rotation matters: without it the numerator is the denominator's own weights
    plain = fast_nala_attention(q, k, v, kernel='relu_split', eps=1e-6, valid=valid, fuse=False)
    assert (out - plain).abs().max() > 1e-2


def test_relu_split_rope_needs_its_angles():
    q, k, v = _qkv(n=12, d=8)
    with pytest.raises(ValueError, match='rope_angles'):
        fast_nala_attention(q, k, v, kernel='relu_split_rope')
    with pytest.raises(ValueError, match='rope_angles'):
        fast_nala_attention(q, k, v, kernel='relu_split', rope_angles=torch.zeros(12, 4))
    with pytest.raises(ValueError, match=r'\(N, d / 2\)'):
        fast_nala_attention(q, k, v, kernel='relu_split_rope', rope_angles=torch.zeros(11, 4))


def test_default_chunks_are_cache_sized_on_cpu_and_large_elsewhere():
    """Default chunking (NaLaFormer's and LDN's core): ~1 MiB of features per chunk on the CPU
    (cache); on other devices (CUDA) one chunk up to 2^26 elements, since every chunk costs
    a kernel launch per op there (LDN-small at 2048^2: 16 193 aten ops a forward with CPU
    chunks, 1 665 with these).  'meta' stands in for a GPU here."""
    calls = []

    def phi(x):
        calls.append(x.shape[-2])
        return F.elu(x) + 1.0

    n, d = 65536, 16                       # 2^20 elements per head: 4 CPU chunks
    for device, chunks in (('cpu', n * d // policy.CHUNK_ELEMENTS), ('meta', 1)):
        calls.clear()
        q, k, v = (torch.randn(1, 1, n, d, device=device) for _ in range(3))
        with torch.no_grad():
            out = la.chunked_linear_attention(q, k, v, phi, phi)
        assert out.shape == (1, 1, n, d) and out.device.type == device
        assert calls == [n // chunks] * chunks * 2, (device, calls)  # keys, then queries
