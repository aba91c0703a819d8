"""Depthwise convs of token maps above cuDNN's 32-bit index limit: run on channel slices,
the same values, and chosen off the CPU only."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mmlinattn.kernels.depthwise as dw
from mmlinattn.kernels import policy
from mmlinattn.models.layers.channels_last import conv_tokens
from mmlinattn.models.layers.token_grid import TokenGrid


@pytest.mark.parametrize('with_bias', [True, False])
def test_depthwise_in_slices_is_the_whole_conv(with_bias):
    """Slices of 4 channels (the last one shorter) give the whole conv's outputs and
    gradients in float64, channels-last."""
    torch.manual_seed(0)
    x = torch.randn(2, 30, 7, 5, dtype=torch.float64).contiguous(
        memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(30, 1, 3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(30, dtype=torch.float64, requires_grad=True) if with_bias else None
    got = dw.depthwise_in_slices(x, w, b, limit=2 * 7 * 5 * 4)
    want = F.conv2d(x, w, b, 1, 1, 1, 30)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert got.is_contiguous(memory_format=torch.channels_last)
    leaves = [t for t in (x, w, b) if t is not None]
    g = torch.randn_like(want)
    for a, e in zip(torch.autograd.grad(got, leaves, g), torch.autograd.grad(want, leaves, g)):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


def test_depthwise_in_slices_cuts_at_least_min_slices_in_the_conv_dtype(monkeypatch):
    """Far below the element limit a map still runs in :data:`MIN_SLICES` slices (each
    slice's copies a fraction of the map), and under autocast the output has the dtype the
    whole conv gets (bf16 on the CPU), with its values."""
    torch.manual_seed(0)
    x = torch.randn(1, 30, 9, 8).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(30, 1, 5, 5), torch.randn(30)
    real, widths = F.conv2d, []

    def counted(inp, *args):
        widths.append(inp.shape[1])
        return real(inp, *args)
    monkeypatch.setattr(dw.F, 'conv2d', counted)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        got = dw.depthwise_in_slices(x, w, b)
        want = real(x, w, b, 1, 2, 1, 30)
    assert widths == [4] * 7 + [2] and policy.MIN_SLICES == 8
    assert got.dtype == want.dtype == torch.bfloat16
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got, want)  # bf16 tolerances: kernels may block differently


def test_slices_only_off_the_cpu_and_above_the_limit(monkeypatch):
    """Slices are chosen on devices other than the CPU ('meta' stands in for a GPU) for maps
    of more elements than the limit, not at the limit, and never on the CPU."""
    monkeypatch.setattr(policy, 'INDEX32_ELEMENTS', 6 * 5 * 16)
    for device, channels, want in (('meta', 17, True), ('meta', 16, False),
                                   ('cpu', 17, False)):
        m = torch.empty(1, channels, 6, 5, device=device)
        assert dw.depthwise_slices.runs(None, m) is want, (device, channels)


@pytest.mark.parametrize('padded', [False, True])
@pytest.mark.parametrize('residual', [False, True])
def test_conv_tokens_in_slices_gives_the_same_tokens(residual, padded, monkeypatch):
    """:func:`conv_tokens` through the slices (forced here on the CPU, 3 channels per slice)
    gives the tokens of the plain path, with and without the residual and batch padding."""
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 16, 3, 1, 1, groups=16).double()
    grid = TokenGrid((6, 5), valid_hw=[(6, 5), (4, 3)] if padded else None)
    x = torch.randn(2, 30, 16, dtype=torch.float64)
    want = conv_tokens(conv, x, grid, residual=residual)
    real = dw.depthwise_in_slices
    calls = []

    def three_channels(m, w, b, limit=None):
        calls.append(m.shape)
        return real(m, w, b, limit=2 * 6 * 5 * 3)
    monkeypatch.setattr(dw.depthwise_slices, 'verify', lambda conv, m: True)
    monkeypatch.setattr(dw, 'depthwise_in_slices', three_channels)
    got = conv_tokens(conv, x, grid, residual=residual)
    assert calls == [(2, 16, 6, 5)]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
