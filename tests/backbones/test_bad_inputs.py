"""Bad-input catalog over every backbone.

Every case either gives the output the README promises (one NCHW map per out index, of size
``ceil(H / s) x ceil(W / s)``) or raises ``ValueError`` / ``TypeError`` whose message names
the argument, the value received and what is accepted.  The chosen behaviour per case:

=================================  ===========================================================
case                               behaviour
=================================  ===========================================================
wrong channel count                ValueError (``in_channels=3`` vs the input's channels)
3-D or 5-D tensor                  ValueError (needs 4-D (B, C, H, W); shape printed)
integer / bool dtype               TypeError (needs floating point; dtype printed)
float16 / bfloat16 / float64 into  TypeError naming both dtypes and the fixes (cast the input
a float32 model                    or the model, or autocast); allowed under autocast
not a tensor                       TypeError (type printed)
H or W < 32 (incl. a 1x2048 strip) ValueError (``H and W >= 32``; H x W printed)
32 x 512 strip                     works, output shapes per the README
non-multiples of 32 (33x75, ...)   work, ceil sizes
batch 1                            works
batch 0                            works: empty maps of the right shapes, no compute; in
                                   training they backpropagate zero parameter grads
channels-last memory format        works, same values as contiguous
NaN / Inf in the input             ValueError naming the counts and batch items (a data bug
                                   never trains silently); ``backbone.check_finite = False``
                                   skips the check (then NaN propagates, no error)
malformed ``valid_hw``             ValueError (one (h, w) per image within the input)
=================================  ===========================================================
"""
import numpy as np
import pytest
import torch
from archs import FAMILIES, build, expected_shapes

from mmlinattn.registry import MODELS
from archs import TINY


def _check_shapes(model, x):
    with torch.no_grad():
        outs = model(x)
    assert [tuple(o.shape) for o in outs] == expected_shapes(model, x.shape[0],
                                                             *x.shape[-2:])
    assert all(torch.isfinite(o).all() for o in outs)
    return outs


ERROR_CASES = {
    # name: (input factory, exception, substrings the message must contain)
    'wrong_channels': (lambda: torch.randn(1, 4, 64, 64), ValueError,
                       ['in_channels=3', '4 channels', '(1, 4, 64, 64)']),
    'tensor_3d': (lambda: torch.randn(3, 64, 64), ValueError,
                  ['input x', '4-D (B, C, H, W)', '(3, 64, 64)']),
    'tensor_5d': (lambda: torch.randn(1, 1, 3, 64, 64), ValueError,
                  ['input x', '4-D (B, C, H, W)', '(1, 1, 3, 64, 64)']),
    'float16_dtype': (lambda: torch.randn(1, 3, 64, 64).half(), TypeError,
                      ['input x is torch.float16', 'parameters are torch.float32',
                       'model.to(torch.float16)', 'autocast']),
    'bfloat16_dtype': (lambda: torch.randn(1, 3, 64, 64).bfloat16(), TypeError,
                       ['input x is torch.bfloat16', 'parameters are torch.float32',
                        'x.to(torch.float32)', 'autocast']),
    'float64_dtype': (lambda: torch.randn(1, 3, 64, 64).double(), TypeError,
                      ['input x is torch.float64', 'parameters are torch.float32',
                       'model.to(torch.float64)']),
    'int_dtype': (lambda: torch.randint(0, 255, (1, 3, 64, 64), dtype=torch.uint8), TypeError,
                  ['input x', 'floating-point', 'torch.uint8']),
    'bool_dtype': (lambda: torch.ones(1, 3, 64, 64, dtype=torch.bool), TypeError,
                   ['input x', 'floating-point', 'torch.bool']),
    'not_a_tensor': (lambda: np.zeros((1, 3, 64, 64), np.float32), TypeError,
                     ['input x', 'torch.Tensor', 'ndarray']),
    'h_below_min': (lambda: torch.randn(1, 3, 31, 64), ValueError,
                    ['input x', 'H and W >= 32', '31 x 64']),
    'w_below_min': (lambda: torch.randn(1, 3, 64, 16), ValueError,
                    ['input x', 'H and W >= 32', '64 x 16']),
    'strip_1x2048': (lambda: torch.randn(1, 3, 1, 2048), ValueError,
                     ['input x', 'H and W >= 32', '1 x 2048']),
    'nan': (lambda: torch.randn(2, 3, 64, 64).index_put_((torch.tensor(1), torch.tensor(0),
                                                          torch.tensor(5), torch.tensor(7)),
                                                         torch.tensor(float('nan'))),
            ValueError, ['input x', 'must be finite', '1 NaN', 'batch items [1]',
                         'check_finite = False']),
    'inf': (lambda: torch.randn(1, 3, 64, 64).index_fill_(3, torch.tensor([0, 3]),
                                                        float('-inf')), ValueError,
            ['input x', 'must be finite', '0 NaN and 384 Inf', 'batch items [0]']),
}


@pytest.mark.parametrize('case', sorted(ERROR_CASES))
@pytest.mark.parametrize('family', FAMILIES)
def test_bad_input_raises_clear_error(family, case):
    model = build(family)
    make, exc, parts = ERROR_CASES[case]
    with pytest.raises(exc) as info:
        model(make())
    msg = str(info.value)
    missing = [p for p in parts if p not in msg]
    assert not missing, f'message lacks {missing}: {msg}'
    assert type(model).__name__ in msg


@pytest.mark.parametrize('family', FAMILIES)
def test_other_input_dtype_accepted_under_autocast_or_cast_model(family):
    model = build(family)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(torch.randn(1, 3, 64, 64).bfloat16())
    assert all(torch.isfinite(o.float()).all() for o in outs)
    _check_shapes(model.double(), torch.randn(1, 3, 64, 64, dtype=torch.float64))


OK_SIZES = {
    'strip_32x512': (1, 32, 512),
    'non_multiple_33x75': (1, 33, 75),
    'batch_1': (1, 64, 64),
    'batch_3': (3, 97, 45),
}


@pytest.mark.parametrize('case', sorted(OK_SIZES))
@pytest.mark.parametrize('family', FAMILIES)
def test_good_inputs_give_design_shapes(family, case):
    b, h, w = OK_SIZES[case]
    _check_shapes(build(family), torch.randn(b, 3, h, w))


@pytest.mark.parametrize('family', FAMILIES)
def test_batch_zero_gives_empty_maps_of_the_right_shape(family):
    model = build(family)
    outs = model(torch.randn(0, 3, 70, 90))
    assert [tuple(o.shape) for o in outs] == expected_shapes(model, 0, 70, 90)


@pytest.mark.parametrize('family', FAMILIES)
def test_batch_zero_in_training_backpropagates_zero_grads(family, monkeypatch):
    model = build(family).train()
    # the shortcut runs no stage, in training and in eval
    monkeypatch.setattr(model, 'forward_pyramid', None)
    outs = model(torch.zeros(0, 3, 64, 64))
    assert [tuple(o.shape) for o in outs] == expected_shapes(model, 0, 64, 64)
    assert all(o.dtype == torch.float32 for o in outs)
    sum(o.sum() for o in outs).backward()  # as a loss over an empty batch does
    params = [p for p in model.parameters() if p.requires_grad]
    assert all(p.grad is not None and not p.grad.any() for p in params)
    with torch.no_grad():
        outs = model.eval()(torch.zeros(0, 3, 64, 64))
    assert not any(o.requires_grad for o in outs)
    assert [tuple(o.shape) for o in outs] == expected_shapes(model, 0, 64, 64)


@pytest.mark.parametrize('family', FAMILIES)
def test_channels_last_input_matches_contiguous(family):
    model = build(family)
    x = torch.randn(2, 3, 64, 80)
    ref = _check_shapes(model, x)
    outs = _check_shapes(model, x.contiguous(memory_format=torch.channels_last))
    for a, b in zip(ref, outs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('family', FAMILIES)
def test_finite_check_can_be_switched_off(family):
    model = build(family)
    model.check_finite = False
    x = torch.randn(1, 3, 64, 64)
    x[0, 0, 0, 0] = float('nan')
    with torch.no_grad():
        outs = model(x)  # no error; the NaN reaches the output
    assert not all(torch.isfinite(o).all() for o in outs)


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('valid_hw, parts', [
    ([(64, 64)], ['valid_hw', '2 (h, w) pairs', '[(64, 64)]']),
    ([(64, 64), (65, 10)], ['valid_hw', '1 <= h <= 64', '(65, 10)']),
    ([(64, 64), (0, 10)], ['valid_hw', '1 <= h <= 64']),
    ([64, 64], ['valid_hw', 'one (h, w) pair of ints per image', '[64, 64]']),
])
def test_bad_valid_hw(family, valid_hw, parts):
    with pytest.raises(ValueError) as info:
        build(family)(torch.randn(2, 3, 64, 64), valid_hw=valid_hw)
    assert all(p in str(info.value) for p in parts), str(info.value)


# --------------------------------------------------------------------- constructor arguments
BAD_ARCH_DICTS = {
    'SOFT': dict(embed_dims=(32, 64, 96), num_heads=(1, 2, 3, 4), depths=(1, 1, 1, 1)),
    'NaLaFormer': dict(embed_dims=(16, 32, 48, 64), depths=(1, 1, 2), num_heads=(1, 2, 3, 4)),
    'InfViT': dict(embed_dims=(16, 32, 48, 64), depths=(1, 2, 1, 1), mlp_ratios=(2, 2)),
    'InfViTPlain': dict(embed_dims=32, num_layers=3, mlp_ratio=2.0),  # num_heads missing
    'LDN': dict(embed_dims=[16, 32, 64, 64], depths=[2, 1, 2], num_heads=[1, 2, 2, 2]),
}


def _build_error(family, **kwargs):
    cfg = dict(TINY[family], **kwargs)
    with pytest.raises((ValueError, TypeError)) as info:
        MODELS.build(cfg)
    return info


@pytest.mark.parametrize('family', FAMILIES)
def test_unknown_arch_name_lists_valid_names(family):
    info = _build_error(family, arch='gigantic')
    assert info.type is ValueError
    msg = str(info.value)
    cls = MODELS.get(family)
    assert "'gigantic'" in msg and str(sorted(cls.arch_settings)) in msg, msg


@pytest.mark.parametrize('family', FAMILIES)
def test_mismatched_arch_dict(family):
    info = _build_error(family, arch=BAD_ARCH_DICTS[family])
    assert info.type is ValueError
    msg = str(info.value)
    assert 'arch' in msg and (
        'missing' in msg or 'one value per stage' in msg or 'entries' in msg), msg


@pytest.mark.parametrize('family', FAMILIES)
def test_arch_of_wrong_type(family):
    info = _build_error(family, arch=3)
    assert info.type is TypeError and 'arch must be a str or dict, got int' in str(info.value)


@pytest.mark.parametrize('family', FAMILIES)
def test_out_indices_out_of_range(family):
    n = build(family).num_stages
    info = _build_error(family, out_indices=(0, n))
    msg = str(info.value)
    assert info.type is ValueError
    assert 'out_indices' in msg and f'(0, {n})' in msg and f'[0, {n - 1}]' in msg, msg


@pytest.mark.parametrize('family', FAMILIES)
def test_frozen_stages_too_large(family):
    n = build(family).num_stages
    info = _build_error(family, frozen_stages=n)
    msg = str(info.value)
    assert info.type is ValueError
    assert 'frozen_stages' in msg and f'got {n}' in msg and f'[-1, {n - 1}]' in msg, msg


@pytest.mark.parametrize('family', FAMILIES)
@pytest.mark.parametrize('kwargs, exc, parts', [
    (dict(in_channels=0), ValueError, ['in_channels', 'positive int', 'got 0']),
    (dict(drop_path_rate=1.5), ValueError, ['drop_path_rate', '[0, 1)', '1.5']),
    (dict(pretrained=3), TypeError, ['pretrained', 'str', 'int']),
])
def test_other_bad_common_arguments(family, kwargs, exc, parts):
    info = _build_error(family, **kwargs)
    assert info.type is exc and all(p in str(info.value) for p in parts), str(info.value)


@pytest.mark.parametrize('family', ['InfViT', 'InfViTPlain', 'LDN'])
def test_convert_weights_without_converter_fails_at_build(family):
    info = _build_error(family, convert_weights=True)
    msg = str(info.value)
    assert info.type is ValueError
    assert 'convert_weights must be False, got True' in msg and family in msg, msg
