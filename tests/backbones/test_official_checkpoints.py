"""Official (authors') checkpoint formats: convert, load, reproduce the authors' outputs.

The checkpoints are synthetic, in the authors' exact key layout and shapes
(:mod:`official_layouts`); the reference forward is written from the facts of their code."""
import contextlib
import re

import pytest
import torch
from dense_helpers import build_dense
from official_layouts import (as_float64, nalaformer_official_forward,
                              nalaformer_official_state_dict, soft_official_forward,
                              soft_official_state_dict)

from mmlinattn.models.backbones.nalaformer import OFFICIAL_PRESET, NaLaFormer
from mmlinattn.models.backbones.soft import OFFICIAL_PRESETS, SOFT
from mmlinattn.models.converters import (convert_nalaformer_checkpoint, convert_soft_checkpoint,
                                         nalaformer_classifier_state_dict,
                                         soft_classifier_state_dict)
from mmlinattn.timm.classifier import LinAttnClassifier
from mmlinattn.utils.checkpoint import match_report
from tool_runs import convert

NALA_ARCH = dict(embed_dims=(8, 16, 32, 32), depths=(1, 2, 1, 1), num_heads=(1, 2, 2, 2),
                 mlp_ratios=4.0)
OFFICIAL_FLAGS = 'llvv'  # NaLa in stages 1-2, softmax in 3-4 (the authors' default)


def _nala_sd():
    return nalaformer_official_state_dict(NALA_ARCH['embed_dims'], NALA_ARCH['depths'],
                                          NALA_ARCH['num_heads'])


def _official_model(**kwargs):
    cfg = dict(OFFICIAL_PRESET, fuse_feature_maps=False)
    cfg.update(kwargs)
    return NaLaFormer(arch=NALA_ARCH, **cfg)


def test_nalaformer_converter_consumes_every_key_and_places_every_tensor():
    sd = _nala_sd()
    backbone, head = convert_nalaformer_checkpoint(sd)
    model = _official_model()
    report = match_report(model, backbone)
    assert report['fraction'] == 1.0
    assert not (report['missing'] or report['unexpected'] or report['shape_mismatch'])
    # every source tensor went somewhere: the RoPE buffers (checked, recomputed) and the
    # conv biases (folded) are the only ones without a key of their own
    rope = [k for k in sd if k.endswith('RoPE.angle')]
    biases = [k for k in sd if re.fullmatch(
        r'patch_embed\.proj\.[0369]\.bias|layers\.\d+\.downsample\.reduction\.bias', k)]
    assert len(rope) == 4 and len(biases) == 7
    assert len(backbone) + len(head) == len(sd) - len(rope) - len(biases)
    assert sorted(head) == sorted(f'head.{m}.{p}' for m, ps in (
        ('pre.0', ('weight', 'bias')), ('pre.1', ('weight', 'bias', 'running_mean',
                                                  'running_var', 'num_batches_tracked')),
        ('fc', ('weight', 'bias'))) for p in ps)
    # values: a rename, a LayerScale reshape and a bias fold
    torch.testing.assert_close(backbone['stages.0.blocks.0.attn.proj.weight'],
                               sd['layers.0.blocks.0.attn.out_proj.weight'], rtol=0, atol=0)
    torch.testing.assert_close(backbone['stages.1.blocks.1.gamma2'],
                               sd['layers.1.blocks.1.gamma_2'].flatten(), rtol=0, atol=0)
    torch.testing.assert_close(backbone['patch_embeds.2.norm.running_mean'],
                               sd['layers.1.downsample.norm.running_mean']
                               - sd['layers.1.downsample.reduction.bias'], rtol=0, atol=0)
    torch.testing.assert_close(backbone['patch_embeds.0.3.norm.running_mean'],
                               sd['patch_embed.proj.10.running_mean']
                               - sd['patch_embed.proj.9.bias'], rtol=0, atol=0)


@pytest.mark.parametrize('hw', [(64, 96), (40, 72)])
def test_converted_nalaformer_reproduces_the_authors_forward(hw):
    """Stage maps and logits of the converted float64 model = the authors' computation."""
    sd = as_float64(_nala_sd())
    model = LinAttnClassifier(dict(type='NaLaFormer', arch=NALA_ARCH, **OFFICIAL_PRESET,
                                   fuse_feature_maps=False), head_type='nala', num_classes=10,
                              head_hidden_size=24).double().eval()
    model.load_state_dict(nalaformer_classifier_state_dict(sd), strict=True)
    x = torch.randn(2, 3, *hw, dtype=torch.float64)
    ref = nalaformer_official_forward(sd, x, NALA_ARCH['num_heads'], OFFICIAL_FLAGS)
    with torch.no_grad():
        stages, logits = model.forward_stages(x), model(x)
    for ours, theirs in zip(stages + (logits, ), ref):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


def test_without_the_rope_kernel_the_authors_outputs_are_not_reproduced():
    sd = as_float64(_nala_sd())
    model = _official_model(kernel='relu_split').double().eval()
    model.load_state_dict(convert_nalaformer_checkpoint(sd)[0], strict=True)
    x = torch.randn(1, 3, 64, 64, dtype=torch.float64)
    ref = nalaformer_official_forward(sd, x, NALA_ARCH['num_heads'], OFFICIAL_FLAGS)
    with torch.no_grad():
        out = model(x)
    assert (out[0] - ref[0]).abs().max() > 1e-3
    # ... and that is all the difference: the authors' math without their RoPE
    no_rope = nalaformer_official_forward(sd, x, NALA_ARCH['num_heads'], OFFICIAL_FLAGS,
                                          rope_in_nala=False)
    torch.testing.assert_close(out[0], no_rope[0], rtol=1e-10, atol=1e-10)


def test_convert_weights_loads_the_authors_file_through_init_cfg(tmp_path):
    path = str(tmp_path / 'nala_official.pth')
    sd = _nala_sd()
    torch.save(dict(model=sd), path)  # DeiT-style {'model': ...}
    model = _official_model(convert_weights=True,
                            init_cfg=dict(type='Pretrained', checkpoint=path))
    model.init_weights()
    assert torch.equal(model.stages[1].blocks[1].attn.qkvg.weight,
                       sd['layers.1.blocks.1.attn.qkvg.weight'])


@contextlib.contextmanager
def _default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize('family', ['nalaformer', 'soft'])
@pytest.mark.parametrize('source', ['float32', 'float64'])
def test_converters_keep_the_checkpoint_dtype_under_a_float64_default(family, source):
    """A float64 default dtype (``torch.set_default_dtype``) changes nothing: the converted
    tensors keep the checkpoint's dtype and values (the RoPE check once compared the float32
    buffer with frequencies built in the default dtype: "Float did not match Double")."""
    if family == 'nalaformer':
        sd = _nala_sd()
        converters = (convert_nalaformer_checkpoint, nalaformer_classifier_state_dict)
    else:
        sd = _soft_sd()
        converters = (convert_soft_checkpoint, soft_classifier_state_dict)
    if source == 'float64':
        sd = as_float64(sd)
    for convert in converters:
        expected = convert(sd)
        with _default_dtype(torch.float64):
            got = convert(sd)
        assert torch.get_default_dtype() == torch.float32
        parts = (got, expected) if isinstance(got, tuple) else ((got, ), (expected, ))
        for got_part, expected_part in zip(*parts):
            assert sorted(got_part) == sorted(expected_part)
            for key, val in got_part.items():
                assert val.dtype == expected_part[key].dtype, key
                if val.is_floating_point():
                    assert val.dtype == getattr(torch, source), key
                torch.testing.assert_close(val, expected_part[key], rtol=0, atol=0)


def test_nalaformer_converter_rejects_other_depths_and_rope():
    sd = _nala_sd()
    other = NaLaFormer(arch=dict(NALA_ARCH, depths=(1, 1, 1, 1)), **OFFICIAL_PRESET)
    with pytest.raises(ValueError, match=r'depths \(1, 2, 1, 1\)'):
        other.convert_checkpoint(sd)
    sd['layers.0.RoPE.angle'] = sd['layers.0.RoPE.angle'] * 2
    with pytest.raises(ValueError, match='RoPE frequencies'):
        convert_nalaformer_checkpoint(sd)


def test_convert_tool_official_nalaformer_loads_into_mmdet_and_mmseg(tmp_path):

    src, dst = str(tmp_path / 'official.pth'), str(tmp_path / 'converted.pth')
    torch.save(_nala_sd(), src)
    spec = f'NaLaFormer:{NALA_ARCH!r}'
    proc = convert(src, dst, '--official', '--arch-check', spec)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert '100.00% of the backbone parameters' in proc.stdout
    for scope in ('mmdet', 'mmseg'):
        cfg = dict(type='mmlinattn.NaLaFormer', arch=NALA_ARCH, **OFFICIAL_PRESET,
                   init_cfg=dict(type='Pretrained', checkpoint=dst))
        dense = build_dense(scope, cfg)
        report = match_report(dense, torch.load(dst)['state_dict'])
        assert report['fraction'] == 1.0 and not report['missing']
    # without --arch-check the tool refuses instead of guessing
    assert convert(src, dst, '--official').returncode == 1
    # --preset is SOFT's: a clear refusal, not a traceback
    proc = convert(src, dst, '--official', '--arch-check', spec, '--preset', 'plain')
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr
    assert '--preset is for SOFT checkpoints' in proc.stdout


def test_timm_official_entry_loads_the_authors_classifier_file(tmp_path):
    import timm

    import mmlinattn.timm  # noqa: F401  (registers the timm models)
    path = str(tmp_path / 'official.pth')
    # 1000 classes: with another count timm drops the classifier before loading
    sd = nalaformer_official_state_dict(NALA_ARCH['embed_dims'], NALA_ARCH['depths'],
                                        NALA_ARCH['num_heads'], num_classes=1000)
    torch.save(sd, path)
    model = timm.create_model('nalaformer_tiny_official', pretrained=True,
                              pretrained_cfg_overlay=dict(file=path), arch=NALA_ARCH,
                              head_hidden_size=24, fuse_feature_maps=False)
    assert torch.equal(model.head.fc.weight, sd['head.weight'].flatten(1))
    assert torch.equal(model.backbone.stages[3].blocks[0].gamma1,
                       sd['layers.3.blocks.0.gamma_1'].flatten())


def test_nalaformer_eps_reaches_every_nala_mixer():
    model = NaLaFormer(arch=NALA_ARCH, eps=0.0)
    assert {b.attn.eps for s in model.stages for b in s.blocks} == {0.0}


# --------------------------------------------------------------------------------- SOFT
# The authors' released archs (shared by SOFT-Norm and plain SOFT), reduced: d_h = 16
SOFT_ARCH = dict(SOFT.arch_settings['tiny-norm'], embed_dims=(32, 32, 64, 64),
                 num_heads=(2, 2, 4, 4), depths=(1, 2, 1, 1))


def _soft_sd(arch=SOFT_ARCH, **kwargs):
    return soft_official_state_dict(arch['embed_dims'], arch['depths'], arch['num_heads'],
                                    **kwargs)


def _soft_classifier(kind, arch=SOFT_ARCH, **kwargs):
    cfg = dict(OFFICIAL_PRESETS[kind], type='SOFT', arch=arch)
    cfg.update(kwargs)
    return LinAttnClassifier(cfg,
                             head_type='cls_token', num_classes=10).double().eval()


def _outputs(model, x):
    with torch.no_grad():
        return model.forward_stages(x) + (model(x), )


def test_soft_converter_consumes_every_key_and_places_every_tensor():
    sd = _soft_sd()
    backbone, head = convert_soft_checkpoint(sd)
    report = match_report(SOFT(arch=SOFT_ARCH), backbone)
    assert report['fraction'] == 1.0
    assert not (report['missing'] or report['unexpected'] or report['shape_mismatch'])
    # the only merges: attn.q + attn.kv -> attn.qkv (weight, bias) per softmax block
    assert len(backbone) + len(head) == len(sd) - 2 * SOFT_ARCH['depths'][3]
    assert sorted(head) == ['head.fc.bias', 'head.fc.weight']
    used = sum(v.numel() for v in sd.values())
    # the class slot of pos_embed4 is folded into the class token
    assert sum(v.numel() for v in {**backbone, **head}.values()) == used - SOFT_ARCH[
        'embed_dims'][3]
    torch.testing.assert_close(backbone['stages.1.blocks.1.attn.sampler.conv.weight'],
                               sd['block2.1.att.mha.attn.Qlandmark_op.weight'], rtol=0, atol=0)
    torch.testing.assert_close(backbone['stages.2.blocks.0.mlp.fc2.bias'],
                               sd['block3.0.att.ff2.bias'], rtol=0, atol=0)
    torch.testing.assert_close(backbone['stages.3.blocks.0.attn.qkv.weight'],
                               torch.cat([sd['block4.0.attn.q.weight'],
                                          sd['block4.0.attn.kv.weight']]), rtol=0, atol=0)
    torch.testing.assert_close(backbone['stages.0.pos_embed.weight'][0, :, 3, 5],
                               sd['pos_embed1'][0, 3 * 56 + 5], rtol=0, atol=0)


@pytest.mark.parametrize('kind', ['norm', 'plain'])
@pytest.mark.parametrize('hw', [(64, 96), (80, 112)])
def test_converted_soft_reproduces_the_authors_forward(kind, hw):
    """Stage maps and logits of the converted float64 model with OFFICIAL_PRESETS[kind] =
    the authors' computation; 80 x 112 has stage grids 20x28 / 10x14 / 5x7 that the
    landmark ratios 8 / 4 / 2 do not divide.  SOFT-Norm's halving rule is evaluated per
    matrix on both sides here (see the next test for their batch-global alpha)."""
    sd = as_float64(_soft_sd())
    model = _soft_classifier(kind)
    model.load_state_dict(soft_classifier_state_dict(sd), strict=True)
    x = torch.randn(2, 3, *hw, dtype=torch.float64)
    ref = soft_official_forward(sd, x, SOFT_ARCH['num_heads'], kind, per_matrix=True)
    for ours, theirs in zip(_outputs(model, x), ref):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


def test_soft_norm_matches_the_batch_global_alpha_with_one_matrix_per_batch():
    """Their SOFT-Norm code takes one Newton step for all matrices of a batch; with one
    image and one head per SOFT stage that is ours, so the whole model matches exactly."""
    arch = dict(SOFT_ARCH, num_heads=(1, 1, 1, 4))
    sd = as_float64(_soft_sd(arch))
    model = _soft_classifier('norm', arch)
    model.load_state_dict(soft_classifier_state_dict(sd), strict=True)
    x = torch.randn(1, 3, 64, 96, dtype=torch.float64)
    ref = soft_official_forward(sd, x, arch['num_heads'], 'norm', per_matrix=False)
    for ours, theirs in zip(_outputs(model, x), ref):
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


def test_landmark_grid_crop_is_what_differs_off_multiples_of_the_ratio():
    sd = as_float64(_soft_sd())
    pad = _soft_classifier('plain', landmark_grid='pad')
    crop = _soft_classifier('plain')
    for model in (pad, crop):
        model.load_state_dict(soft_classifier_state_dict(sd), strict=True)
    x = torch.randn(1, 3, 64, 96, dtype=torch.float64)   # grids divisible: the same model
    for a, b in zip(_outputs(pad, x), _outputs(crop, x)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    x = torch.randn(1, 3, 80, 112, dtype=torch.float64)
    ref = soft_official_forward(sd, x, SOFT_ARCH['num_heads'], 'plain')
    assert (_outputs(pad, x)[0] - ref[0]).abs().max() > 1e-3
    torch.testing.assert_close(_outputs(crop, x)[0], ref[0], rtol=1e-10, atol=1e-10)


def test_soft_plain_needs_its_preset():
    """The same file with the SOFT-Norm attention does not give the plain model's outputs."""
    sd = as_float64(_soft_sd())
    model = _soft_classifier('norm')
    model.load_state_dict(soft_classifier_state_dict(sd), strict=True)
    x = torch.randn(1, 3, 64, 64, dtype=torch.float64)
    ref = soft_official_forward(sd, x, SOFT_ARCH['num_heads'], 'plain')
    assert (_outputs(model, x)[0] - ref[0]).abs().max() > 1e-3


@pytest.mark.parametrize('preset', [None, 'plain'])
def test_convert_tool_official_soft_loads_into_mmdet_and_mmseg(preset, tmp_path):

    src, dst = str(tmp_path / 'official.pth'), str(tmp_path / 'converted.pth')
    torch.save({'model': _soft_sd()}, src)  # their main.py saves {'model': ...}
    args = [src, dst, '--official', '--arch-check', f'SOFT:{SOFT_ARCH!r}']
    args += ['--preset', preset] if preset else []
    proc = convert(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    out = proc.stdout
    assert '100.00% of the backbone parameters' in out
    kwargs = OFFICIAL_PRESETS[preset or 'norm']
    assert all(f'{k}={v!r}' in out for k, v in kwargs.items())  # the printed config
    saved = torch.load(dst)['state_dict']
    for scope in ('mmdet', 'mmseg'):
        cfg = dict(type='mmlinattn.SOFT', arch=SOFT_ARCH, **kwargs,
                   init_cfg=dict(type='Pretrained', checkpoint=dst))
        dense = build_dense(scope, cfg)
        report = match_report(dense, saved)
        assert report['fraction'] == 1.0 and not report['missing']
        own = dense.state_dict()
        assert all(torch.equal(own[k], v) for k, v in saved.items())
    # --preset belongs to --official
    assert convert(src, dst, '--arch-check', 'SOFT:tiny-norm', '--preset',
                   'plain').returncode == 1


@pytest.mark.parametrize('name,kind', [('soft_norm_tiny', 'norm'), ('soft_plain_tiny', 'plain')])
def test_timm_soft_entries_give_the_authors_logits(name, kind, tmp_path):
    import timm

    import mmlinattn.timm  # noqa: F401  (registers the timm models)
    path = str(tmp_path / 'official.pth')
    sd = _soft_sd(num_classes=1000)  # another count makes timm drop the classifier
    torch.save({'model': sd}, path)
    model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=path),
                              arch=SOFT_ARCH).double().eval()
    assert torch.equal(model.head.fc.weight, sd['head.weight'].double())
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64)
    ref = soft_official_forward(as_float64(sd), x, SOFT_ARCH['num_heads'], kind,
                                per_matrix=True)[-1]
    with torch.no_grad():
        # loaded in float32: the class token + its position slot is summed in float32
        torch.testing.assert_close(model(x), ref, rtol=1e-6, atol=1e-6)
