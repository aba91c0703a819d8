"""What every top-level config says about its weights, and the SOFT++ configs' pseudo-inverse.

Each config states in a ``# Weights:`` line which weights its backbone starts from as
shipped (none: ``init_cfg=None``) and the ImageNet file its fine-tuning recipe expects; its
model base (``configs/_base_/models/<detector>_<family>.py``) says how to make that file (the
timm model to pretrain, which must build the config's backbone type and arch) and the
``init_cfg`` line to add.  Following that line without the file stops with
:class:`MissingCheckpointError` naming the file and how to make it.
"""
import os
import os.path as osp
import re

import pytest
from mmengine.config import Config

import mmlinattn.models  # noqa: F401  (registers the backbones)
from mmlinattn.registry import MODELS
from mmlinattn.timm.linattn_models import MODEL_SPECS
from mmlinattn.utils.checkpoint import MissingCheckpointError
from repo_paths import ROOT

CONFIG_DIR = osp.join(ROOT, 'configs')
CONFIGS = sorted(f for f in os.listdir(CONFIG_DIR)
                 if f.endswith('.py') and osp.isfile(osp.join(CONFIG_DIR, f)))


def weights_statement(path: str) -> str:
    """The ``# Weights:`` comment of a config file as one line of text."""
    with open(path) as f:
        text = f.read()
    found = re.search(r'^# Weights: (.*?)\n(?!# )', text, flags=re.S | re.M)
    assert found, f'{path}: no "# Weights: " statement'
    return ' '.join(line.lstrip('# ').strip() for line in found.group(1).splitlines())


def model_base(name: str) -> str:
    detector, family = name.split('_')[:2]
    return osp.join(CONFIG_DIR, '_base_', 'models', f'{detector}_{family}.py')


def stated_init_cfg(name: str) -> dict:
    """The init_cfg a config's statements say to add, with its arch filled in."""
    arch = name.split('_')[2]
    leaf = weights_statement(osp.join(CONFIG_DIR, name))
    base = weights_statement(model_base(name)).replace('<arch>', arch)
    found = re.search(r"init_cfg=dict\(type='Pretrained', checkpoint='([^']+)'\)", base)
    assert found, base
    assert f'to fine-tune: {found.group(1)} ' in leaf, (leaf, base)
    return dict(type='Pretrained', checkpoint=found.group(1))


@pytest.mark.parametrize('name', CONFIGS)
def test_config_states_its_weights(name):
    cfg = Config.fromfile(osp.join(CONFIG_DIR, name))
    backbone = cfg.model.backbone
    family, arch = name.split('_')[1:3]
    assert backbone.init_cfg is None
    assert weights_statement(osp.join(CONFIG_DIR, name)).startswith('from scratch;')
    assert stated_init_cfg(name)['checkpoint'] == f'checkpoints/{family}_{arch}_in1k.pth'
    # the timm model named for pretraining builds this config's backbone
    base = weights_statement(model_base(name)).replace('<arch>', arch)
    assert 'start from scratch (init_cfg=None)' in base
    spec = MODEL_SPECS[re.search(r"pretrain timm's (\w+)", base).group(1)][0]
    assert (f"mmlinattn.{spec['type']}", spec['arch']) == (backbone.type, backbone.arch)
    if family in ('infvit', 'ldn'):   # their patchify stems barely learn from scratch
        assert "stem='conv'" in base


@pytest.mark.parametrize('name', ['retinanet_ldn_tiny_1x.py', 'upernet_soft_small_ade20k_160k.py'])
def test_following_the_statement_without_the_file_says_how_to_make_it(name, tmp_path,
                                                                      monkeypatch):
    init_cfg = stated_init_cfg(name)
    monkeypatch.chdir(tmp_path)   # no checkpoints/ here
    backbone = dict(Config.fromfile(osp.join(CONFIG_DIR, name)).model.backbone,
                    init_cfg=init_cfg)
    backbone['type'] = backbone['type'].split('.')[-1]
    model = MODELS.build(backbone)
    with pytest.raises(MissingCheckpointError) as err:
        model.init_weights()
    assert init_cfg['checkpoint'] in str(err.value)
    assert 'tools/model_converters/convert_checkpoint.py' in str(err.value)


@pytest.mark.parametrize('name', [n for n in CONFIGS if '_soft_' in n])
def test_soft_configs_run_the_cholesky_pseudo_inverse(name):
    """records/soft_pinv_decision_zen4.json: the same A^+ as Newton-Schulz at a fraction of
    the cost, under the paper's landmark rule."""
    backbone = Config.fromfile(osp.join(CONFIG_DIR, name)).model.backbone
    assert backbone.pinv == 'cholesky' and backbone.get('max_landmarks') is None
