"""The fused residual forms of :mod:`mmlinattn.kernels.residual` against their plain sums."""
import pytest
import torch

from mmlinattn.kernels.residual import accumulate_linears


def _terms(bias, gamma, dtype=torch.float64):
    torch.manual_seed(0)
    shapes = [(6, 4), (3, 4)]
    return [(torch.nn.Linear(i, o, bias=bias).to(dtype), torch.randn(2, 9, i, dtype=dtype),
             torch.rand(o, dtype=dtype) if gamma else None) for i, o in shapes]


@pytest.mark.parametrize('gamma', [False, True])
@pytest.mark.parametrize('bias', [False, True])
def test_accumulate_linears_adds_every_scaled_branch_in_place(gamma, bias):
    terms = _terms(bias, gamma)
    out = torch.randn(2, 9, 4, dtype=torch.float64)
    ref = out.clone()
    with torch.no_grad():
        for lin, y, g in terms:
            ref = ref + (lin(y) if g is None else g * lin(y))
        got = accumulate_linears(out, terms)
    assert got is out                                   # in place: no new state tensor
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_accumulate_linears_under_autocast_adds_the_autocast_outputs():
    terms = _terms(True, True, torch.float32)
    out = torch.randn(2, 9, 4)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        ref = out.clone()
        for lin, y, g in terms:
            ref = torch.addcmul(ref, g, lin(y))
        got = accumulate_linears(out, terms)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_a_hooked_linear_is_called(gemm_spy):
    """A forward hook expects its module to run: that term is added as the module's output."""
    terms = _terms(True, True)
    seen = []
    terms[1][0].register_forward_hook(lambda *_: seen.append(1))
    out = torch.randn(2, 9, 4, dtype=torch.float64)
    ref = out.clone()
    with torch.no_grad():
        for lin, y, g in terms:
            ref = ref + g * lin(y)
        seen.clear()
        got = accumulate_linears(out, terms)
    assert seen == [1] and not gemm_spy
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('kernels', ['fast', 'plain'])
def test_plain_kernels_call_each_branch_as_a_module(monkeypatch, kernels):
    """``MMLINATTN_KERNELS=plain``: no fast form, the fused residual step included: the
    branch's own forward runs (``hidden`` is what the fused step would run instead)."""
    from mmlinattn.kernels import seam
    from mmlinattn.models.layers.ffn import Mlp
    monkeypatch.setenv('MMLINATTN_KERNELS', kernels)
    mlp = Mlp(8, 16).eval()
    ran = []
    for name in ('forward', 'hidden'):
        monkeypatch.setattr(mlp, name, lambda *a, _f=getattr(mlp, name), _n=name, **k:
                            ran.append(_n) or _f(*a, **k))
    x = torch.randn(2, 6, 8)
    with torch.no_grad():
        got = seam.step(x, mlp, None)
        ref = x + Mlp.forward(mlp, x, None)
    assert ran[0] == ('forward' if kernels == 'plain' else 'hidden')
    torch.testing.assert_close(got, ref)
