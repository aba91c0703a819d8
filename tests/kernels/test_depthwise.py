"""The large depthwise conv's own backward (flipped-kernel input gradient, shifted-product
weight gradient) against PyTorch's autograd of the same conv."""
import pytest
import torch
import torch.nn as nn

from mmlinattn.kernels.depthwise import depthwise_same


@pytest.fixture(autouse=True)
def _compiled_weight_gradient(compile_on):
    """The custom backward runs only with the compiled weight gradient (the default)."""


# every kernel shape once, bias on and off among them; the weight gradient compiled (a
# compile costs 10-25 s on one core) for the first case, the same function run eagerly for
# the others: compiling it for every shape checks the compiler more than our backward
@pytest.mark.parametrize('kernel,bias,compiled', [(5, True, True), (7, False, False),
                                                  ((5, 3), True, False)])
def test_gradients_equal_pytorch_autograd(kernel, bias, compiled, monkeypatch):
    import mmlinattn.kernels.depthwise as depthwise
    if not compiled:
        monkeypatch.setattr(depthwise, '_compiled_weight_grad', lambda kh, kw: (
            lambda grad, x: depthwise._shifted_products(grad, x, kh, kw)))
    torch.manual_seed(0)
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    conv = nn.Conv2d(6, 6, (kh, kw), 1, (kh // 2, kw // 2), groups=6, bias=bias).double()
    x = torch.randn(2, 6, 9, 11, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(2, 6, 9, 11, dtype=torch.float64)
    params = [x, *conv.parameters()]
    out = depthwise_same(conv, x)
    assert out.grad_fn.name().startswith('_DepthwiseConv')   # the custom backward ran
    got = torch.autograd.grad(out, params, grad)
    expected = torch.autograd.grad(conv(x), params, grad)
    torch.testing.assert_close(out, conv(x), rtol=1e-14, atol=1e-14)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    if compiled:   # the compiled form ran, not its eager fallback after a compiler error
        assert not depthwise._compiled_weight_grad(kh, kw).failed


def test_channels_last_float32_and_frozen_input():
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 16, 5, 1, 2, groups=16)
    x = torch.randn(1, 16, 33, 20).contiguous(memory_format=torch.channels_last)
    out = depthwise_same(conv, x)                 # only the weights need a gradient
    (gw, gb) = torch.autograd.grad(out.square().sum(), (conv.weight, conv.bias))
    (rw, rb) = torch.autograd.grad(conv(x).square().sum(), (conv.weight, conv.bias))
    torch.testing.assert_close(gw, rw, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(gb, rb, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize('case', ['3x3', 'autocast', 'no_grad', 'compile_off'])
def test_plain_conv_elsewhere(case, monkeypatch):
    """3x3 (PyTorch's backward is the faster there), autocast, inference and machines
    without the compiled weight gradient take the module's own conv."""
    conv = nn.Conv2d(4, 4, 3 if case == '3x3' else 5, 1, 1 if case == '3x3' else 2, groups=4)
    x = torch.randn(1, 4, 8, 8)
    if case == 'compile_off':
        monkeypatch.setenv('MMLINATTN_COMPILE', '0')
    if case == 'no_grad':
        with torch.no_grad():
            out = depthwise_same(conv, x)
        assert out.grad_fn is None
        return
    if case == 'autocast':
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = depthwise_same(conv, x)
        assert out.dtype == torch.bfloat16
    else:
        out = depthwise_same(conv, x)
    assert not out.grad_fn.name().startswith('_DepthwiseConv')
