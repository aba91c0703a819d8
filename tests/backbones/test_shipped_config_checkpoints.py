"""The identity check stops no documented route: every shipped config accepts the file its
comments say how to make (the authors' file converted with ``--official``, or a timm run
converted), output norms, ``pinv='cholesky'`` and the detector's ``out_indices``
notwithstanding.  Only the record is checked (the config's backbone built on the meta
device), so all configs take seconds.  The loading: tests/engine/test_checkpoint_identity.py.
"""
import os
import os.path as osp

import pytest
import torch
from mmengine.config import Config
from repo_paths import ROOT

import mmlinattn.models  # noqa: F401  (registers the backbones)
from mmlinattn.models.backbones.nalaformer import OFFICIAL_PRESET
from mmlinattn.models.backbones.soft import OFFICIAL_PRESETS
from mmlinattn.registry import MODELS
from mmlinattn.timm.linattn_models import MODEL_SPECS
from mmlinattn.utils.checkpoint_identity import check_checkpoint_identity
from mmlinattn.utils.weights_hint import TIMM_PREFIX

CONFIG_DIR = osp.join(ROOT, 'configs')


def _config_groups():
    """One top-level config per (detector, family, arch): the configs of a group share
    their backbone options."""
    seen = {}
    for name in sorted(os.listdir(CONFIG_DIR)):
        if name.endswith('.py'):
            seen.setdefault(tuple(name.split('_')[:3]), name)
    return sorted(seen.values())


def _routes(backbone: dict) -> dict:
    """What the converter records for each way the docs give to make a config's file:
    the authors' file (``--official``, where the config runs one of their presets) or a timm
    run of the model named after the config's family and arch."""
    family, arch = backbone['type'].split('.')[-1], backbone['arch']
    presets = {'NaLaFormer': {None: OFFICIAL_PRESET}, 'SOFT': OFFICIAL_PRESETS}.get(family, {})
    routes = {}
    for preset, options in presets.items():
        if all(backbone.get(k) == v for k, v in options.items()):
            routes[f'--official --preset {preset}'] = dict(
                type=f'mmlinattn.{family}', arch=arch, **options)
    timm = f'{TIMM_PREFIX[family]}_{arch}' + ('_official' if family == 'NaLaFormer' and routes
                                               else '')
    if not routes or family == 'NaLaFormer':   # SOFT's authors' archs: their files only
        spec = MODEL_SPECS[timm][0]
        num_stages = len(MODELS.get(family).stage_layout(
            MODELS.get(family).resolve_arch(arch))[1])
        out = (-1, ) if family == 'InfViTPlain' else tuple(range(num_stages))
        # what LinAttnClassifier.backbone_cfg holds
        routes[f'timm {timm}'] = dict(spec, type=f'mmlinattn.{family}', in_channels=3,
                                      out_indices=out)
    return routes


@pytest.mark.parametrize('name', _config_groups())
def test_every_shipped_config_accepts_the_file_its_docs_make(name):
    backbone = Config.fromfile(osp.join(CONFIG_DIR, name)).model.backbone.to_dict()
    assert backbone['init_cfg']['checkpoint'].startswith('checkpoints/')
    cfg = dict(backbone, type=backbone['type'].split('.')[-1], init_cfg=None)
    with torch.device('meta'):
        model = MODELS.build(cfg)
    routes = _routes(backbone)
    assert routes
    for route, record in routes.items():
        ckpt = {'meta': {'backbone_cfg': repr(record)}}
        check_checkpoint_identity(model, ckpt, backbone['init_cfg']['checkpoint'], {})
