"""A converted checkpoint goes only into the model it was converted for.

tools/model_converters/convert_checkpoint.py records that model in the file (``meta``
``backbone_cfg``).  Key names cannot tell, e.g., the NaLaFormer authors' model from the
paper's (same keys, other kernel and attention types): their file fills 100 % of either.
Loading through ``init_cfg`` stops on another family, arch or option, naming the file, the
model it was made for, what the config builds and the fix; matching models (free options
such as ``out_norm``, ``pinv``, ``drop_path_rate`` aside) load, and files without the record
load as before.  The files are made as a user makes them: the authors' layouts
(:mod:`official_layouts`) or a timm ``train.py`` output, through the converter.
"""
import argparse
import logging

import pytest
import torch
from mmengine.logging import MMLogger
from official_layouts import nalaformer_official_state_dict, soft_official_state_dict
from tool_runs import convert_in_process

import mmlinattn.engine  # noqa: F401  (installs the safe loader)
from mmlinattn.models.backbones.nalaformer import OFFICIAL_PRESET
from mmlinattn.models.backbones.soft import OFFICIAL_PRESETS, SOFT
from mmlinattn.registry import MODELS
from mmlinattn.utils.checkpoint_identity import CheckpointIdentityError

NALA_ARCH = dict(embed_dims=(8, 16, 32, 32), depths=(1, 2, 1, 1), num_heads=(1, 2, 2, 2),
                 mlp_ratios=4.0)
# the authors' SOFT arch, reduced (d_h = 16)
SOFT_ARCH = dict(SOFT.arch_settings['tiny-norm'], embed_dims=(32, 32, 64, 64),
                 num_heads=(2, 2, 4, 4), depths=(1, 2, 1, 1))
INFVIT_ARCH = dict(embed_dims=(16, 32, 48, 64), depths=(1, 2, 1, 1), mlp_ratios=(2, 2, 2, 2))
LDN_ARCH = dict(embed_dims=(16, 32, 64, 64), depths=(2, 1, 2, 1), num_heads=(1, 2, 2, 2))


def _official(tmp_path, family, *flags):
    """An authors' file of ``family`` converted with ``--official`` and ``flags``."""
    if family == 'NaLaFormer':
        sd, arch = nalaformer_official_state_dict(NALA_ARCH['embed_dims'], NALA_ARCH['depths'],
                                                  NALA_ARCH['num_heads']), NALA_ARCH
    else:
        sd, arch = {'model': soft_official_state_dict(SOFT_ARCH['embed_dims'],
                                                      SOFT_ARCH['depths'],
                                                      SOFT_ARCH['num_heads'])}, SOFT_ARCH
    return _convert(tmp_path, sd, '--official', '--arch-check', f'{family}:{arch!r}', *flags)


def _timm_run(tmp_path, name, **model_kwargs):
    """What timm's train.py writes for ``name`` trained with ``--model-kwargs``, converted."""
    import timm

    import mmlinattn.timm  # noqa: F401  (registers the timm models)
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10, **model_kwargs)
    ckpt = {'arch': name, 'args': argparse.Namespace(model_kwargs=model_kwargs),
            'state_dict': model.state_dict(), 'epoch': 3}
    return _convert(tmp_path, ckpt)


def _convert(tmp_path, source, *flags):
    src, dst = str(tmp_path / 'source.pth'), str(tmp_path / 'converted.pth')
    torch.save(source, src)
    proc = convert_in_process(src, dst, *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    return dst


def _load(path, **cfg):
    init = {k: cfg.pop(k) for k in ('allow_other_model', ) if k in cfg}
    model = MODELS.build(dict(cfg, init_cfg=dict(type='Pretrained', checkpoint=path, **init)))
    model.init_weights()
    return model


def _refused(path, **cfg):
    with pytest.raises(CheckpointIdentityError) as err:
        _load(path, **cfg)
    msg = str(err.value)
    assert repr(path) in msg and 'allow_other_model=True' in msg
    return msg


# (family, the file, a config it does not fit, what the error says, configs it fits)
CASES = {
    'NaLaFormer official into the paper model': (
        lambda tmp: _official(tmp, 'NaLaFormer'),
        dict(type='NaLaFormer', arch=NALA_ARCH),
        ["It was made for NaLaFormer(arch=", "attn_types='official', kernel='relu_split_rope'",
         "this config builds attn_types='nala', kernel='cos_sin'",
         "Fix: build the model the file was made for, with attn_types='official', "
         "kernel='relu_split_rope' in model.backbone"],
        [dict(type='NaLaFormer', arch=NALA_ARCH, **OFFICIAL_PRESET),
         # the dense default's output norms are new modules around the same stage maps
         dict(type='NaLaFormer', arch=NALA_ARCH, **dict(OFFICIAL_PRESET, out_norm=True),
              drop_path_rate=0.3)]),
    'SOFT plain into SOFT-Norm': (
        lambda tmp: _official(tmp, 'SOFT', '--preset', 'plain'),
        dict(type='SOFT', arch=SOFT_ARCH, **OFFICIAL_PRESETS['norm']),
        ["newton_init='scaled', newton_ridge=0.01, sym_norm=False in model.backbone",
         "this config builds newton_init='paper', newton_ridge=0.0, sym_norm=True",
         # the same authors' file converted for the model this config builds
         '--official --arch-check \'SOFT:{'],
        [dict(type='SOFT', arch=SOFT_ARCH, **OFFICIAL_PRESETS['plain']),
         dict(type='SOFT', arch=SOFT_ARCH, **OFFICIAL_PRESETS['plain'], pinv='cholesky')]),
    'SOFT-Norm into the paper arch': (
        lambda tmp: _official(tmp, 'SOFT'),
        dict(type='SOFT', arch={k: SOFT_ARCH[k] for k in ('embed_dims', 'num_heads',
                                                          'depths')}),
        ['this config builds arch=', "landmark_grid='pad', newton_init='safe'",
         "landmark_grid='crop', newton_init='paper' in model.backbone"],
        [dict(type='SOFT', arch=SOFT_ARCH, **OFFICIAL_PRESETS['norm'])]),
    'InfViT with another gamma schedule': (
        lambda tmp: _timm_run(tmp, 'infvit_tiny', arch=INFVIT_ARCH, gamma_mode='power'),
        dict(type='InfViT', arch=INFVIT_ARCH),
        ["It was made for InfViT(arch=", "this config builds gamma_mode='const'",
         "with gamma_mode='power' in model.backbone"],
        [dict(type='InfViT', arch=INFVIT_ARCH, gamma_mode='power', out_indices=(1, 2, 3))]),
    'LDN with another integrator': (
        lambda tmp: _timm_run(tmp, 'ldn_tiny', arch=LDN_ARCH, integrator='implicit_dct'),
        dict(type='LDN', arch=LDN_ARCH),
        ["this config builds integrator='euler'",
         "with integrator='implicit_dct' in model.backbone"],
        [dict(type='LDN', arch=LDN_ARCH, integrator='implicit_dct', with_cp=True)]),
    'NaLaFormer file into SOFT': (
        lambda tmp: _official(tmp, 'NaLaFormer'),
        dict(type='SOFT', arch=SOFT_ARCH),
        ['a NaLaFormer backbone; this config builds a SOFT',
         "type='mmlinattn.NaLaFormer' and its options (NaLaFormer(arch="], []),
}


@pytest.mark.parametrize('case', list(CASES))
def test_converted_file_goes_only_into_its_model(case, tmp_path):
    make, other, says, fits = CASES[case]
    path = make(tmp_path)
    msg = _refused(path, **other)
    for part in says:
        assert part in msg, (part, msg)
    saved = torch.load(path)['state_dict']
    for cfg in fits:
        own = _load(path, **cfg).state_dict()
        assert all(torch.equal(own[k], v) for k, v in saved.items() if k in own), cfg


def test_the_record_is_what_stops_a_full_fill(tmp_path):
    """The authors' NaLaFormer file fills every parameter of the paper's model: without the
    record (a file of an older converter) it loads as before, with allow_other_model=True
    it loads and says so."""
    path = _official(tmp_path, 'NaLaFormer')
    ckpt = torch.load(path)
    bare = str(tmp_path / 'bare.pth')
    torch.save(dict(ckpt, meta={k: v for k, v in ckpt['meta'].items()
                                if k != 'backbone_cfg'}), bare)
    cfg = dict(type='NaLaFormer', arch=NALA_ARCH)
    _load(bare, **cfg)
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        _load(path, allow_other_model=True, **cfg)
    finally:
        logger.removeHandler(handler)
    assert any('loaded into this model unchecked (allow_other_model=True)' in m
               for m in lines), lines
    # every tensor of the file fits: only the paper model's output norms are not in it
    assert any('missing 8, unexpected 0, shape mismatch 0' in m for m in lines), lines


def test_authors_nalaformer_file_with_convert_weights_goes_only_into_their_model(tmp_path):
    """Loaded unconverted (convert_weights=True), the authors' layout is the record: it holds
    their model only."""
    path = str(tmp_path / 'NALAFORMER_T.pth')
    torch.save({'model': nalaformer_official_state_dict(
        NALA_ARCH['embed_dims'], NALA_ARCH['depths'], NALA_ARCH['num_heads'])}, path)
    msg = _refused(path, type='NaLaFormer', arch=NALA_ARCH, convert_weights=True)
    assert "is an authors' file (loaded with convert_weights=True) of another model" in msg
    assert "attn_types='official', kernel='relu_split_rope' in model.backbone" in msg
    _load(path, type='NaLaFormer', arch=NALA_ARCH, convert_weights=True, **OFFICIAL_PRESET)


def test_unreadable_record_is_refused(tmp_path):
    path = str(tmp_path / 'odd.pth')
    torch.save({'state_dict': {}, 'meta': {'backbone_cfg': 'dict(type=NaLaFormer'}}, path)
    msg = _refused(path, type='NaLaFormer', arch=NALA_ARCH)
    assert 'not a readable config' in msg

