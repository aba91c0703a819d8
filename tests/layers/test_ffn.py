"""The FFNs' training recomputation: the same gradients as plain autograd, less kept for the
backward, and fc2's product computed once."""
import pytest
import torch
from autograd_helpers import MATMULS, CountOps, kept_bytes
from timm.layers import Mlp as TimmMlp

from mmlinattn.kernels import branch_output, residual_step
from mmlinattn.models.layers.ffn import ConvFFN, Mlp
from mmlinattn.models.layers.token_grid import TokenGrid

GRID = TokenGrid((6, 5))


def _conv_ffn(recompute, order, drop=0.0):
    torch.manual_seed(0)
    ffn = ConvFFN(8, 24, drop=drop, recompute=recompute, **order).double().train()
    with torch.no_grad():   # a non-zero depthwise bias and kernel centre, so every term counts
        ffn.dwconv.bias.uniform_(-1, 1)
    return ffn


def _grads(module, x, run):
    module.zero_grad()
    x = x.detach().requires_grad_()
    torch.manual_seed(1)            # the same dropout masks
    out = run(module, x)
    torch.manual_seed(2)
    out.backward(torch.randn_like(out))
    return out.detach(), [x.grad] + [p.grad for p in module.parameters()]


ORDERS = {'mix_ffn': dict(), 'nalaformer': dict(dw_residual=True, act_before_dw=True)}


@pytest.mark.parametrize('order', ORDERS)
@pytest.mark.parametrize('recompute', ['last', 'all'])
@pytest.mark.parametrize('residual', [False, True])
@pytest.mark.parametrize('drop', [0.0, 0.3])
def test_conv_ffn_recompute_gives_the_plain_gradients(order, recompute, residual, drop):
    x = torch.randn(2, 30, 8, dtype=torch.float64)
    shortcut = torch.randn(2, 30, 8, dtype=torch.float64)
    gamma = torch.rand(8, dtype=torch.float64)

    def run(m, t):
        return (residual_step(t, m, GRID, gamma=gamma, shortcut=shortcut) if residual
                else branch_output(m, t, GRID))
    ref_out, ref = _grads(_conv_ffn('none', ORDERS[order], drop), x, run)
    out, got = _grads(_conv_ffn(recompute, ORDERS[order], drop), x, run)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('order', ORDERS)
def test_conv_ffn_recompute_keeps_less_and_multiplies_once(order):
    """Per recomputed step one hidden-size tensor (24 x 30 elements here) fewer is kept, and
    the backward runs no more matrix products than plain autograd's (fc2's forward product
    is not recomputed: the checkpoint stops once fc2's input is rebuilt)."""
    x = torch.randn(2, 30, 8, dtype=torch.float64, requires_grad=True)
    hidden_bytes = 2 * 30 * 24 * 8
    kept, matmuls = {}, {}
    for recompute in ('none', 'last', 'all'):
        ffn = _conv_ffn(recompute, ORDERS[order])
        outs = []
        kept[recompute] = kept_bytes(lambda: outs.append(branch_output(ffn, x, GRID)))
        with CountOps(*MATMULS) as counter:
            outs[0].sum().backward()
        matmuls[recompute] = counter.total
    assert kept['none'] - kept['last'] >= 0.9 * hidden_bytes, kept
    assert kept['last'] - kept['all'] >= 0.9 * hidden_bytes, kept
    assert matmuls['last'] == matmuls['all'] == matmuls['none'] > 0, matmuls


def test_conv_ffn_without_grad_or_in_eval_runs_the_plain_path():
    """Inference gets the fused residual GEMM whatever ``recompute`` says (equal outputs)."""
    x, shortcut = torch.randn(1, 30, 8), torch.randn(1, 30, 8)
    plain, fast = _conv_ffn('none', {}).float().eval(), _conv_ffn('all', {}).float().eval()
    with torch.no_grad():
        torch.testing.assert_close(residual_step(x, fast, GRID, shortcut=shortcut),
                                   residual_step(x, plain, GRID, shortcut=shortcut))


@pytest.mark.parametrize('module', [ConvFFN, Mlp])
def test_unknown_recompute_is_refused(module):
    args = (8, 16) if module is ConvFFN else (8, )
    with pytest.raises(ValueError, match='recompute must be'):
        module(*args, recompute='hidden')


@pytest.mark.parametrize('drop', [0.0, 0.3])
def test_mlp_is_timms_with_a_recomputed_activation(drop):
    """Our Mlp loads timm's state dict; with ``recompute='last'`` its output and gradients
    equal timm's Mlp's, it keeps one hidden-size tensor less and multiplies no more."""
    torch.manual_seed(0)
    ref = TimmMlp(8, 24, drop=drop).double().train()
    ours = Mlp(8, 24, drop=drop, recompute='last').double().train()
    ours.load_state_dict(ref.state_dict())          # strict: the same keys
    x = torch.randn(2, 30, 8, dtype=torch.float64)
    ref_out, ref_grads = _grads(ref, x, lambda m, t: m(t))
    out, grads = _grads(ours, x, lambda m, t: branch_output(m, t, None))
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)
    xg = x.detach().requires_grad_()
    kept, matmuls = {}, {}
    for name, run in (('timm', ref), ('ours', lambda t: branch_output(ours, t, None))):
        outs = []
        kept[name] = kept_bytes(lambda: outs.append(run(xg)))
        with CountOps(*MATMULS) as counter:
            outs[0].sum().backward()
        matmuls[name] = counter.total
    assert kept['timm'] - kept['ours'] >= 0.9 * 2 * 30 * 24 * 8, kept
    assert matmuls['ours'] == matmuls['timm'] > 0, matmuls


@pytest.mark.parametrize('act_before_dw', [False, True])
def test_conv_ffn_inference_frees_fc1_output_before_its_second_op(act_before_dw, monkeypatch):
    """Inference holds at most two hidden-size tensors: fc1's output is freed before the
    second op of the hidden layer runs (a local name kept it alive through both ops, 490 MiB
    more peak for InfViT small at 2048²)."""
    import weakref

    import mmlinattn.models.layers.ffn as ffn_module
    ffn = ConvFFN(8, 24, act_before_dw=act_before_dw).eval()
    fc1_out, alive, held = [], [], []
    ffn.fc1.register_forward_hook(lambda mod, args, out: fc1_out.append(weakref.ref(out)))

    def note():
        alive.append(fc1_out[-1]() is not None)

    if act_before_dw:   # GELU, then the depthwise conv
        conv_tokens = ffn_module.conv_tokens

        def second(*args, **kwargs):
            note()
            return conv_tokens(*args, **kwargs)
        monkeypatch.setattr(ffn_module, 'conv_tokens', second)
    else:               # the depthwise conv, then GELU
        ffn.act.register_forward_pre_hook(lambda mod, args: note())
    x = torch.randn(2, 30, 8)
    with torch.no_grad():
        ffn(x, GRID)
        branch_output(ffn, x, GRID)
        residual_step(x, ffn, GRID)
        assert alive == [False, False, False]
        # the probe sees a reference that is held (here by the test)
        ffn.fc1.register_forward_hook(lambda mod, args, out: held.append(out))
        branch_output(ffn, x, GRID)
    assert alive == [False, False, False, True]
