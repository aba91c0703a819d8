"""LDN ops against the claims of Fein-Ashley, "Linear Diffusion Networks": the compact form
of the diffusion step (§3.3), the stability condition and its convex combination (§4.4), the
Global Dependency Theorem as an exact light-cone (§4.2), the linear attention (§3.3) and the
linear cost of a layer (§3.5).

The references (``*_reference`` in mmlinattn.ops.diffusion and .linear_attention) share no
code with the fast paths: dense T x T kernels by explicit loops over grid cells and offsets,
explicit row-normalised attention, dense inverses.
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import mmlinattn.kernels.chunked as la
from mmlinattn.kernels import fast_grid_diffusion, fast_linear_attention, policy
from mmlinattn.models.layers import GridDiffusion, LDNBlock, LinearAttention, TokenGrid
from mmlinattn.ops.diffusion import (grid_diffusion_implicit_dct,
                                     grid_diffusion_implicit_reference, grid_diffusion_reference,
                                     implicit_step_matrix_reference, stencil_kernel,
                                     stencil_offsets)
from mmlinattn.ops.normalized_attention import (linear_attention_reference,
                                                normalized_attention_reference)


# ------------------------------------------------------------------------- test utilities
def dense_step_matrix(module, h, w):
    """The implementation's own step matrix A (N x N): column j = A e_j."""
    n = h * w
    basis = torch.eye(n, dtype=torch.float64).view(n, 1, h, w)
    with torch.no_grad():
        out = basis + module(basis)
    return out.view(n, n).T


def random_diffusion(taps='cross4', std=1.0, n_steps=1, groups=1, integrator='euler'):
    m = GridDiffusion(groups=groups, taps=taps, n_steps=n_steps, integrator=integrator)
    with torch.no_grad():
        m.tap_logits.normal_(0, std)
        m.step_logit.normal_(0, std)
    return m


def manhattan(h, w):
    rc = torch.tensor([(r, c) for r in range(h) for c in range(w)])
    return (rc[:, None, :] - rc[None, :, :]).abs().sum(-1)


def chebyshev(h, w):
    rc = torch.tensor([(r, c) for r in range(h) for c in range(w)])
    return (rc[:, None, :] - rc[None, :, :]).abs().amax(-1)


# ------------------------------------------------------------------ 1. E4 compact = per-token
@pytest.mark.parametrize('taps', ['cross4', 'k3'])
@pytest.mark.parametrize('n_steps', [1, 3])
def test_stencil_increment_equals_dense_form(taps, n_steps):
    h, w, groups = 5, 7, 2
    m = random_diffusion(taps, n_steps=n_steps, groups=groups)
    x = torch.randn(2, 4, h, w, dtype=torch.float64)
    got = m(x)
    # E4: one step H + δt (K H − diag(K 1) H), repeated n_steps times, as dense matrices.
    expected = grid_diffusion_reference(x, m.tap_probs().double(), m.step().double(), taps,
                                        n_steps)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize('grad', [False, True])
@pytest.mark.parametrize('n_steps', [1, 2])
def test_increment_on_token_views_and_padded_grids_equals_the_dense_form(grad, n_steps):
    """The block's layout (a channels-last view of (B, N, C) tokens), two groups, and a padded
    batch whose second image diffuses on its own 3 x 4 region: the in-place inference path
    (``grad=False``) and the autograd one give the dense form's values, zero in the padding."""
    h, w, c = 5, 6, 6
    m = random_diffusion('k3', n_steps=n_steps, groups=2).double()
    p, a = m.tap_probs().detach(), m.step().detach()
    tokens = torch.randn(2, h * w, c, dtype=torch.float64, requires_grad=grad)
    x = tokens.view(2, h, w, c).permute(0, 3, 1, 2)
    valid = torch.zeros(2, 1, h, w, dtype=torch.float64)
    valid[0], valid[1, :, :3, :4] = 1, 1
    with torch.set_grad_enabled(grad):
        got = fast_grid_diffusion(x, stencil_kernel(p, 'k3'), a, n_steps, valid)
        whole = fast_grid_diffusion(x, stencil_kernel(p, 'k3'), a, n_steps)
    assert got.requires_grad == whole.requires_grad == grad
    x = x.detach()
    torch.testing.assert_close(whole, grid_diffusion_reference(x, p, a, 'k3', n_steps),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(got[:1], grid_diffusion_reference(x[:1], p, a, 'k3', n_steps),
                               rtol=0, atol=1e-12)
    region = grid_diffusion_reference(x[1:, :, :3, :4], p, a, 'k3', n_steps)
    torch.testing.assert_close(got[1:, :, :3, :4], region, rtol=0, atol=1e-12)
    assert torch.count_nonzero(got[1] * (1 - valid[1])) == 0            # zero in the padding
    assert not torch.allclose(got[1, :, :3, :4], whole[1, :, :3, :4])  # the region's borders


@pytest.mark.parametrize('padded', [False, True])
def test_increment_gradients_pass_gradcheck(padded):
    """Gradients with respect to the state, the stencil and the step (the degree term's
    broadcast per group included) against numerical ones, on a token view."""
    torch.manual_seed(0)
    h, w, c = 4, 5, 4
    tokens = torch.randn(1, h * w, c, dtype=torch.float64, requires_grad=True)
    kernel = stencil_kernel(torch.rand(2, 4, dtype=torch.float64), 'cross4').requires_grad_()
    step = torch.rand(2, dtype=torch.float64, requires_grad=True)
    valid = None
    if padded:
        valid = torch.zeros(1, 1, h, w, dtype=torch.float64)
        valid[..., :3, :4] = 1

    def increment(t, k, a):
        return fast_grid_diffusion(t.view(1, h, w, c).permute(0, 3, 1, 2), k, a, 2, valid)
    assert torch.autograd.gradcheck(increment, (tokens, kernel, step))


@pytest.mark.parametrize('taps', ['cross4', 'k3'])
def test_constant_map_is_fixed_point_including_borders(taps):
    m = random_diffusion(taps, n_steps=4)
    for h, w in [(1, 1), (1, 6), (5, 7), (9, 4)]:
        x = torch.full((1, 3, h, w), 3.7, dtype=torch.float64)
        assert m(x).abs().max().item() < 1e-13, (h, w)


# ------------------------------------------------------------------------- 2. E9 for any value
def extreme_diffusions(taps):
    """Saturated parameters: one-hot taps (exact zeros in float32) with a → step_max / 0."""
    n = len(stencil_offsets(taps))
    for tap, theta in [(0, 300.0), (n - 1, -300.0), (1, 40.0)]:
        m = GridDiffusion(taps=taps)
        with torch.no_grad():
            m.tap_logits.fill_(-300.0)
            m.tap_logits[0, tap] = 300.0
            m.step_logit.fill_(theta)
        yield m


@pytest.mark.parametrize('taps', ['cross4', 'k3'])
@pytest.mark.parametrize('hw', [(1, 1), (7, 9), (33, 65), (56, 56)])
def test_stability_bound_holds_for_any_parameters(taps, hw):
    h, w = hw
    draws = [random_diffusion(taps, std=100.0) for _ in range(3 if h * w < 1000 else 1)]
    if h * w < 1000:
        draws += list(extreme_diffusions(taps))
    for m in draws:
        a = dense_step_matrix(m, h, w)
        eye = torch.eye(h * w, dtype=torch.bool)
        dt_k_rowsum = a.masked_fill(eye, 0).sum(1)           # δt Σ_s K_ts (K has no diagonal)
        assert dt_k_rowsum.max().item() < 1.0
        assert (a >= 0).all()
        assert torch.diagonal(a).min().item() > 0              # aperiodic: needed by Thm 1
        torch.testing.assert_close(a.sum(1), torch.ones(h * w, dtype=torch.float64),
                                   rtol=0, atol=1e-12)


# ------------------------------------------------------------- 3. convex-combination corollaries
@pytest.mark.parametrize('n_steps', [1, 50])
@pytest.mark.parametrize('std', [1.0, 100.0])
def test_max_principle_per_channel(n_steps, std):
    m = random_diffusion('cross4', std=std, n_steps=n_steps)
    x = torch.randn(2, 5, 12, 17, dtype=torch.float64) * torch.arange(1, 6).view(1, 5, 1, 1)
    y = x + m(x)
    lo, hi = x.amin(dim=(2, 3)), x.amax(dim=(2, 3))
    assert (y.amin(dim=(2, 3)) >= lo - 1e-12).all()
    assert (y.amax(dim=(2, 3)) <= hi + 1e-12).all()
    # max over tokens of the per-token channel norm does not grow (the bound §4.4 proves).
    assert y.norm(dim=1).max() <= x.norm(dim=1).max() + 1e-12


def test_symmetric_taps_conserve_mean_and_do_not_expand():
    m = GridDiffusion(step_init=0.9, step_max=0.99, n_steps=5)
    with torch.no_grad():
        m.tap_logits.copy_(torch.tensor([[0.7, 0.7, -0.4, -0.4]]))   # up = down, left = right
    x = torch.randn(1, 3, 9, 14, dtype=torch.float64)
    y = x + m(x)
    torch.testing.assert_close(y.mean(dim=(2, 3)), x.mean(dim=(2, 3)), rtol=0, atol=1e-12)
    assert (y.flatten(2).norm(dim=2) <= x.flatten(2).norm(dim=2) + 1e-12).all()


def test_unconstrained_step_is_unstable():
    """Negative control: without the cap, δt·(row sum) = 1.2 on the 4-neighbour Laplacian of
    an 8x8 grid has spectral radius > 1 and the state blows up."""
    kernel = stencil_kernel(torch.full((1, 4), 0.25, dtype=torch.float64), 'cross4')
    x = torch.randn(1, 1, 8, 8, dtype=torch.float64)
    y = x + fast_grid_diffusion(x, kernel, torch.tensor([1.2], dtype=torch.float64), n_steps=60)
    assert y.abs().max() > 100 * x.abs().max()


# --------------------------------------------------------- 4. global dependency: exact light cone
def stacked_pure_diffusion(depth, taps='cross4'):
    torch.manual_seed(depth)
    blocks = []
    for _ in range(depth):
        blk = LDNBlock(1, 1, use_local=False, use_attn=False, diffusion_cfg=dict(taps=taps))
        with torch.no_grad():
            blk.diffusion.tap_logits.normal_()
            blk.diffusion.step_logit.normal_()
        blocks.append(blk.double())
    return blocks


def stack_jacobian(blocks, h, w):
    def f(t):
        for blk in blocks:
            t = blk(t, TokenGrid((h, w)))
        return t.flatten()
    x = torch.randn(1, h * w, 1, dtype=torch.float64)
    return torch.autograd.functional.jacobian(f, x).view(h * w, h * w)


@pytest.mark.parametrize('hw', [(3, 4), (4, 5)])
def test_light_cone_is_exact_manhattan(hw):
    h, w = hw
    dist = manhattan(h, w)
    diameter = h + w - 2
    for depth in range(1, diameter + 2):
        jac = stack_jacobian(stacked_pure_diffusion(depth), h, w)
        inside = dist <= depth
        assert (jac[~inside] == 0).all(), depth
        assert (jac[inside] > 0).all(), depth
        assert bool((jac > 0).all()) == (depth >= diameter), depth


def test_light_cone_k3_is_chebyshev():
    h, w = 4, 6
    dist = chebyshev(h, w)
    for depth in range(1, 6):
        jac = stack_jacobian(stacked_pure_diffusion(depth, taps='k3'), h, w)
        assert (jac[dist > depth] == 0).all(), depth
        assert (jac[dist <= depth] > 0).all(), depth


def test_sub_steps_widen_the_cone():
    h, w = 5, 5
    m = random_diffusion('cross4', n_steps=3).double()
    jac = dense_step_matrix(m, h, w)
    dist = manhattan(h, w)
    assert (jac[dist > 3] == 0).all() and (jac[dist <= 3] > 0).all()


# --------------------------------------------------------------------- implicit DCT integrator
@pytest.mark.parametrize('hw', [(1, 1), (5, 7), (6, 3)])
@pytest.mark.parametrize('n_steps', [1, 2])
def test_implicit_dct_matches_dense_backward_euler(hw, n_steps):
    h, w = hw
    kappa = torch.tensor([[0.3, 0.7], [0.8, 0.2]], dtype=torch.float64)
    step = torch.tensor([3.0, 0.4], dtype=torch.float64)
    x = torch.randn(2, 4, h, w, dtype=torch.float64)
    got = grid_diffusion_implicit_dct(x, kappa, step, n_steps)
    for g in range(2):
        a = implicit_step_matrix_reference(kappa[g], step[g], h, w, n_steps)
        assert (a > 0).all()                                   # global in one step
        torch.testing.assert_close(a.sum(1), torch.ones(h * w, dtype=torch.float64))
    torch.testing.assert_close(got, grid_diffusion_implicit_reference(x, kappa, step, n_steps),
                               rtol=0, atol=1e-12)


def test_implicit_module_agrees_with_explicit_to_second_order():
    """Backward and forward Euler steps differ by O(a²) when the implicit module uses the
    symmetrised explicit stencil."""
    x = torch.randn(1, 2, 6, 9, dtype=torch.float64)
    logits = torch.tensor([[0.2, 0.2, -0.5, -0.5]])
    errors = []
    for a in (1e-2, 1e-3):
        exp_m = GridDiffusion(step_init=a)
        imp_m = GridDiffusion(step_init=a, integrator='implicit_dct')
        with torch.no_grad():
            exp_m.tap_logits.copy_(logits)
            imp_m.tap_logits.copy_(logits)
            d_exp, d_imp = exp_m(x), imp_m(x)
        assert (d_exp - d_imp).abs().max() < 0.05 * d_exp.abs().max()
        errors.append((d_exp - d_imp).abs().max().item())
    assert 70 < errors[0] / errors[1] < 130, errors


def test_diffusion_argument_errors():
    with pytest.raises(ValueError, match='taps'):
        GridDiffusion(taps='k4')
    with pytest.raises(ValueError, match='implicit_dct'):
        GridDiffusion(taps='k3', integrator='implicit_dct')
    with pytest.raises(ValueError, match='step_max'):
        GridDiffusion(step_max=1.0)
    with pytest.raises(ValueError, match='step_init'):
        GridDiffusion(step_init=0.995)
    with pytest.raises(ValueError, match='n_steps'):
        GridDiffusion(n_steps=0)
    with pytest.raises(ValueError, match='groups'):
        GridDiffusion(groups=3)(torch.randn(1, 4, 5, 5))


def test_diffusion_runs_in_float32_under_autocast():
    m = random_diffusion('cross4', n_steps=50)
    x = torch.randn(1, 8, 16, 16).bfloat16()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        y = m(x)
    assert y.dtype == torch.bfloat16
    # Bit-identical to the float32 computation rounded once at the end (50 bf16 convolutions
    # would drift far more than one rounding).
    assert torch.equal(y, m(x.float()).bfloat16())


# ------------------------------------------------------------------- 5. linear attention (E7)
@pytest.mark.parametrize('feature_map', ['elu', 'relu'])
def test_linear_attention_equals_explicit_row_normalised_form(feature_map):
    q, k = torch.randn(2, 3, 11, 4, dtype=torch.float64), torch.randn(2, 3, 13, 4,
                                                                     dtype=torch.float64)
    v = torch.randn(2, 3, 13, 5, dtype=torch.float64)
    if feature_map == 'relu':
        q, k = q.abs() + 0.1, k.abs() + 0.1      # keep every denominator well away from 0
    expected = linear_attention_reference(q, k, v, feature_map)   # (B, h, N, M) similarities
    got = fast_linear_attention(q, k, v, feature_map=feature_map, eps=0.0)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    got_eps = fast_linear_attention(q, k, v, feature_map=feature_map)
    torch.testing.assert_close(got_eps, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('feature_map', ['elu', 'relu'])
def test_linear_attention_gradients_equal_the_explicit_form(feature_map):
    """Training's closed-form backward (features recomputed chunk by chunk), float64, with
    batch padding, against autograd through the explicit similarities."""
    torch.manual_seed(0)
    q, k = (torch.randn(2, 3, 600, 4, dtype=torch.float64) for _ in range(2))
    if feature_map == 'relu':
        q, k = q.abs() + 0.1, k.abs() + 0.1
    q, k = q.requires_grad_(), k.requires_grad_()
    v = torch.randn(2, 3, 600, 5, dtype=torch.float64, requires_grad=True)
    valid = torch.ones(2, 600, dtype=torch.bool)
    valid[0, 450:] = False
    grad_out = torch.randn(2, 3, 600, 5, dtype=torch.float64)
    got = torch.autograd.grad(fast_linear_attention(q, k, v, feature_map, 1e-6, valid),
                              (q, k, v), grad_out)
    expected = torch.autograd.grad(
        linear_attention_reference(q, k, v, feature_map, 1e-6, valid), (q, k, v), grad_out)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_linear_attention_identical_values_give_that_value():
    q, k = torch.randn(1, 2, 9, 4), torch.randn(1, 2, 9, 4)
    row = torch.randn(1, 2, 1, 6)
    out = fast_linear_attention(q, k, row.expand(1, 2, 9, 6))
    torch.testing.assert_close(out, row.expand_as(out), rtol=1e-5, atol=1e-5)


def test_one_attention_layer_is_global():
    n, c = 12, 8
    attn = LinearAttention(c, 2).double()
    x = torch.randn(1, n, c, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda t: attn(t)[0], x,
                                               vectorize=True)[:, :, 0]  # (N, C, N, C)
    assert (jac.abs().amax(dim=(1, 3)) > 0).all()


def test_linear_attention_finite_under_fp16_autocast_many_tokens():
    attn = LinearAttention(32, 1)
    x = torch.randn(1, 200 * 336, 32) * 10
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.float16):
        out = attn(x)
    assert torch.isfinite(out).all()


def test_linear_attention_argument_errors():
    with pytest.raises(ValueError, match='feature_map'):
        fast_linear_attention(torch.randn(1, 1, 3, 2), torch.randn(1, 1, 3, 2),
                              torch.randn(1, 1, 3, 2), feature_map='softmax')
    with pytest.raises(ValueError, match='num_heads'):
        LinearAttention(10, 3)


# --------------------------------------------------------------- 6. cost linear in the tokens
def count_flops(fn):
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def test_block_flops_scale_linearly_with_tokens():
    torch.manual_seed(0)
    blk = LDNBlock(32, 2, diffusion_cfg=dict(n_steps=2)).eval()
    small, large = (12, 20), (24, 40)

    def run(hw):
        with torch.no_grad():
            blk(torch.randn(1, hw[0] * hw[1], 32), TokenGrid(hw))
    ratio = count_flops(lambda: run(large)) / count_flops(lambda: run(small))
    assert abs(ratio - 4.0) / 4.0 < 0.02, ratio


def test_no_grad_elu_map_equals_elu_and_autograd_keeps_elu():
    """Inference evaluates ELU + 1 as exp(min(x, 0)) + max(x, 0) (same values, faster);
    with autograd the ELU itself runs, whose gradient is 1 at x = 0."""
    from mmlinattn.kernels.chunked import _NO_GRAD_FEATURE_MAPS
    x = torch.cat([torch.randn(500, dtype=torch.float64) * 10,
                   torch.tensor([0.0, -0.0, 1e-300, -1e-300, 700.0, -800.0],
                                dtype=torch.float64)])
    # absolute: ELU + 1 rounds exp(x) - 1 + 1 for x << 0, exp(x) does not (it is the better)
    torch.testing.assert_close(_NO_GRAD_FEATURE_MAPS['elu'](x),
                               torch.nn.functional.elu(x) + 1, rtol=1e-15, atol=1e-15)
    q = torch.zeros(1, 1, 3, 2, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 3, 2, dtype=torch.float64)
    v = torch.randn(1, 1, 3, 2, dtype=torch.float64)
    (g, ) = torch.autograd.grad(fast_linear_attention(q, k, v, eps=0.0).sum(), q)
    phi = lambda t: torch.nn.functional.elu(t) + 1  # noqa: E731
    q2 = q.detach().clone().requires_grad_()
    sim = phi(q2) @ phi(k).transpose(-1, -2)
    (ref, ) = torch.autograd.grad((sim @ v / sim.sum(-1, keepdim=True)).sum(), q2)
    torch.testing.assert_close(g, ref)
    assert g.abs().sum() > 0


def test_autograd_through_the_plain_core_runs_the_backward_maps():
    """Queries with a batch of 1 against keys with a batch of 2 (broadcast) are recorded by
    autograd op by op, not by the core's closed-form backward: there the forward-only maps
    (here ones that autograd cannot see through) give way to ``backward_features``, and the
    gradients are the explicit form's."""
    torch.manual_seed(0)
    q = torch.randn(1, 2, 9, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 11, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 11, 3, dtype=torch.float64, requires_grad=True)
    phi = la.FEATURE_MAPS['elu']

    def fast(x):
        return phi(x.detach())
    out = la.chunked_linear_attention(q, k, v, fast, fast, 1e-6, chunk=4,
                                      backward_features=(phi, phi))
    _assert_matches_dense(out, q, k, v, phi)


def _assert_matches_dense(out, q, k, v, phi, valid=None):
    """``out`` and its gradients in ``q, k, v`` are those of the dense N x M reference."""
    ref = normalized_attention_reference(phi(q) @ phi(k).transpose(-1, -2), v, 1e-6, valid)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-13)
    grad_out = torch.randn(ref.shape, dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    want = torch.autograd.grad(ref, (q, k, v), grad_out)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_token_sum_in_segments_is_the_plain_product():
    """The segmented sum over tokens (a batched matmul of segments, then their sum, plus the
    remainder) equals ``a^T b`` in float64, with and without a remainder, and is the plain
    product when there are fewer than two segments."""
    torch.manual_seed(0)
    for n in (64, 70, 15):
        a = torch.randn(2, 3, n, 5, dtype=torch.float64)
        b = torch.randn(2, 3, n, 4, dtype=torch.float64)[..., :3]   # non-contiguous rows
        want = torch.einsum('...nf,...nd->...fd', a, b)
        torch.testing.assert_close(la._token_sum(a, b, 8), want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(la._token_sum(a, b, 0), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('valid_keys', [None, 13])
def test_core_with_segments_matches_the_dense_reference(valid_keys):
    """The core's forward and closed-form backward with segmented token sums (as on a GPU;
    here forced on the CPU: segments of 4 over 9 / 21 tokens, chunks of 16) against the
    dense N x M reference, with and without padded keys."""
    torch.manual_seed(1)
    q = torch.randn(2, 2, 9, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 21, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 21, 3, dtype=torch.float64, requires_grad=True)
    valid = None
    if valid_keys is not None:
        valid = torch.ones(2, 21, dtype=torch.bool)
        valid[1, valid_keys:] = False
    phi = la.FEATURE_MAPS['elu']
    out = la.chunked_linear_attention(q, k, v, phi, phi, 1e-6, valid, chunk=16, segment=4)
    _assert_matches_dense(out, q, k, v, phi, valid)


def test_default_segments_only_off_the_cpu():
    """By default the sums over tokens are segmented on devices other than the CPU ('meta'
    stands in for a GPU) and a single product on the CPU."""
    seen = []
    real = la._token_sum

    def spy(a, b, segment):
        seen.append((a.device.type, segment))
        return real(a, b, segment)
    n = 4 * policy.DEVICE_SEGMENT_TOKENS
    phi = la.FEATURE_MAPS['elu']
    for device in ('cpu', 'meta'):
        q, k, v = (torch.randn(1, 1, n, 8, device=device) for _ in range(3))
        with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
            mp.setattr(la, '_token_sum', spy)
            out = la.chunked_linear_attention(q, k, v, phi, phi)
        assert out.shape == (1, 1, n, 8)
    assert seen and set(seen) == {('cpu', 0), ('meta', policy.DEVICE_SEGMENT_TOKENS)}, seen
