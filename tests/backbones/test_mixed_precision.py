"""Mixed precision.

* Every family runs forward and backward under CPU bf16 autocast with finite outputs and a
  finite gradient for every parameter, in two tests per family that together cover what a
  user's 1024 x 1024 run of the smallest real arch exercises: the size (every token-length
  reduction -- token sums, landmark pooling, normalisers -- at the full token counts of a
  1024 x 1024 image, with the tiny test archs) and the model (the smallest real arch, its
  widths, heads and depth, at 256 x 256).  The reductions run per channel and head, so
  their magnitude does not depend on the width or the depth, and a block's activations do
  not depend on the image size.  On a CPU without bf16 instructions (the AVX2 EPYC)
  PyTorch runs bf16 products in reference kernels: the real archs at 1024 x 1024 took
  61-145 s a family there (with ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` on the
  AVX-512 EPYC), 441 s for the five.  The fp16 / bf16 runs of the real archs at 2048 x 2048
  on a GPU are ``dev/check_amp_gpu.py``.
* The float32 islands (kernels, norms, pseudo-inverse, N-length reductions) are fed
  large-magnitude activations (x 100) in bfloat16 under autocast and must match a float64
  evaluation of the same inputs to bf16 output precision.
"""
import pytest
import torch
from archs import build

from mmlinattn.models.layers import (LayerNorm2d, LinearAttention, NaLaAttention, SoftAttention,
                                     TokenGrid)
from mmlinattn.models.layers.infsa_attention import LinearInfSA, PureInfSA
from mmlinattn.kernels import (fast_grid_diffusion, fast_linear_attention, fast_nala_attention,
                               fast_pure_infsa, fast_soft_attention)
from mmlinattn.ops.diffusion import stencil_kernel
from mmlinattn.ops.infsa import linear_infsa_pooled
from mmlinattn.ops.soft import newton_schulz_pinv
from mmlinattn.registry import MODELS

# The smallest real arch of each family.  SOFT's paper setting has m = (H/32)(W/32)
# landmarks per attention (1024 at 1024^2: 94 Newton-Schulz inversions of 1024 x 1024
# matrices, about 8 TFLOP), so the CPU tests cap m with the arch's own max_landmarks option;
# the uncapped setting runs in dev/check_amp_gpu.py.
SMALLEST = {
    'SOFT': dict(type='SOFT', arch='tiny', max_landmarks=256),
    'NaLaFormer': dict(type='NaLaFormer', arch='tiny'),
    'InfViT': dict(type='InfViT', arch='tiny'),
    'InfViTPlain': dict(type='InfViTPlain', arch='l4'),
    'LDN': dict(type='LDN', arch='tiny'),
}
BF16_OUT = 8e-3      # relative precision of a bf16 output (2^-7 plus accumulation slack)


def _bf16_step_finite(model, size):
    """One bf16-autocast forward and backward of ``model`` on a ``size`` x ``size`` image:
    finite outputs, and a finite gradient for every parameter."""
    model.train()
    x = torch.randn(1, 3, size, size)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(x)
        loss = sum(o.float().square().mean() for o in outs)
    assert all(o.dtype in (torch.bfloat16, torch.float32) for o in outs)
    assert all(torch.isfinite(o).all() for o in outs)
    loss.backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None]
    assert not no_grad, no_grad[:5]
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p.grad).all()]
    assert not bad, bad[:5]


@pytest.mark.slow
@pytest.mark.parametrize('family', sorted(SMALLEST))
def test_bf16_autocast_1024_forward_backward_finite(family):
    """The token counts of a 1024 x 1024 image (65 536 at stride 4), the tiny test arch."""
    options = {k: v for k, v in SMALLEST[family].items() if k == 'max_landmarks'}
    _bf16_step_finite(build(family, **options), 1024)


@pytest.mark.parametrize('family', sorted(SMALLEST))
def test_bf16_autocast_smallest_real_arch_forward_backward_finite(family):
    """The smallest real arch of the family (its widths, heads and depth) at 256 x 256."""
    torch.manual_seed(0)
    _bf16_step_finite(MODELS.build(SMALLEST[family]), 256)


def _bf16(*shape, scale=100.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).bfloat16()


def _close_to_f64(out, ref, rel=BF16_OUT):
    assert torch.isfinite(out).all()
    err = (out.double() - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= rel * scale + 1e-30, (err, scale)


def _autocast(fn, *args, **kwargs):
    with torch.autocast('cpu', dtype=torch.bfloat16):
        return fn(*args, **kwargs)


# --------------------------------------------------------------------- ops (the islands)
def test_soft_island_large_activations():
    # landmarks as the sampler makes them (LayerNorm + GELU: O(1)); queries x 100 would only
    # give exp(-10^4) = 0 kernels, so the kernel input scale is chosen to keep P and A
    # informative while A has an entry range of e^-30 .. 1.
    q, lm, v = _bf16(2, 2, 256, 16, scale=1.0), _bf16(2, 2, 32, 16, scale=1.0, seed=1), \
        _bf16(2, 2, 256, 16, seed=2)
    out = _autocast(fast_soft_attention, q, lm, v)
    assert out.dtype == torch.bfloat16
    _close_to_f64(out, fast_soft_attention(q.double(), lm.double(), v.double()))


def test_newton_schulz_pinv_island():
    a = _bf16(3, 64, 24, scale=10.0)
    spd = (a @ a.transpose(-1, -2)).bfloat16()          # rank 24 of 64: a true pseudo-inverse
    out = _autocast(newton_schulz_pinv, spd, 20)
    _close_to_f64(out, newton_schulz_pinv(spd.double(), 20), rel=2e-2)


def test_nala_island_large_activations():
    q, k, v = _bf16(2, 2, 300, 16), _bf16(2, 2, 300, 16, seed=1), _bf16(2, 2, 300, 16, seed=2)
    out = _autocast(fast_nala_attention, q, k, v)
    _close_to_f64(out, fast_nala_attention(q.double(), k.double(), v.double()))


def test_ldn_islands_large_activations():
    q, k, v = _bf16(2, 2, 300, 16), _bf16(2, 2, 300, 16, seed=1), _bf16(2, 2, 300, 16, seed=2)
    _close_to_f64(_autocast(fast_linear_attention, q, k, v),
                  fast_linear_attention(q.double(), k.double(), v.double()))
    x = _bf16(2, 8, 17, 23)
    kernel = stencil_kernel(torch.softmax(torch.randn(1, 4), -1), 'cross4')
    step = torch.tensor([0.9])
    _close_to_f64(_autocast(fast_grid_diffusion, x, kernel, step, 3),
                  fast_grid_diffusion(x.double(), kernel.double(), step.double(), 3))


def test_infsa_islands_large_activations():
    q, x = _bf16(2, 4, 300, 8), _bf16(2, 300, 32, seed=1)
    w, b = _bf16(32, 32, scale=0.2, seed=2), _bf16(32, scale=1.0, seed=3)
    _close_to_f64(_autocast(linear_infsa_pooled, q, x, w, b, 0.7),
                  linear_infsa_pooled(q.double(), x.double(), w.double(), b.double(), 0.7))
    k, v = _bf16(2, 4, 300, 8, seed=4), _bf16(2, 4, 300, 8, seed=5)
    _close_to_f64(_autocast(fast_pure_infsa, q, k, v, 0.7, None, 1e-6, 64),
                  fast_pure_infsa(q.double(), k.double(), v.double(), 0.7))


def test_layer_norm_island_large_activations():
    norm = LayerNorm2d(32)
    x = (_bf16(2, 32, 9, 11).float() + 300).bfloat16()     # large mean, large spread
    out = _autocast(norm, x)
    _close_to_f64(out, norm.double()(x.double()).detach())


# --------------------------------------------------------------------- modules around them
@pytest.mark.parametrize('make', [
    lambda: SoftAttention(64, 2, 2), lambda: NaLaAttention(64, 2), lambda: LinearAttention(64, 2),
    lambda: LinearInfSA(64, 4), lambda: PureInfSA(64, 4)
], ids=['soft', 'nala', 'ldn_linear', 'linear_infsa', 'pure_infsa'])
def test_mixers_large_activations_under_autocast(make):
    """x 100 activations through a whole mixer (bf16 linears included) stay finite and
    within a few bf16 roundings of the float64 module."""
    torch.manual_seed(0)
    mixer = make().eval()
    x = _bf16(2, 12 * 10, 64)
    hw = TokenGrid((12, 10))
    call = (lambda m, t: m(t)) if isinstance(mixer, LinearAttention) else \
        (lambda m, t: m(t, hw))
    with torch.no_grad():
        out = _autocast(call, mixer, x)
        ref = call(mixer.double(), x.double())
    _close_to_f64(out, ref, rel=6e-2)


@pytest.mark.parametrize('family', ['SOFT', 'NaLaFormer', 'InfViT', 'InfViTPlain', 'LDN'])
def test_tiny_backbones_large_inputs_bf16(family):
    """Images x 100 through a tiny model of each family under bf16 autocast: finite, and the
    stage maps (LayerNorm-ed) within bf16 noise of float64."""
    model = build(family)
    x = torch.randn(1, 3, 96, 64) * 100
    with torch.no_grad():
        outs = _autocast(model, x)
        refs = model.double()(x.double())
    for out, ref in zip(outs, refs):
        assert torch.isfinite(out).all()
        err = (out.double() - ref).abs().max().item()
        assert err <= 0.25 * ref.abs().max().item(), (err, ref.abs().max().item())
