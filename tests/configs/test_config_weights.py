"""What every top-level config says about its weights, and the SOFT++ configs' pseudo-inverse.

Each config fine-tunes ImageNet-1k weights: its backbone's ``init_cfg`` loads
``checkpoints/<family>_<arch>_in1k.pth``, and its model base
(``configs/_base_/models/<detector>_<family>.py``) says in a ``# Weights:`` comment how to make
that file (the timm model to pretrain, which must build the config's backbone type and arch).
The configs of the authors' models say how to convert the authors' file: SOFT-Norm
(``<size>-norm``, released; ``checkpoints/soft_<size>-norm_in1k.pth``, base
``<detector>_soft_norm.py``) and NaLaFormer's code (``<size>-official``, not released yet;
``checkpoints/nalaformer_<size>_official_in1k.pth``, base ``<detector>_nalaformer_official.py``).
Without the file, tools/train.py stops before anything is built and says how to make it; a
resumed or ``load_from`` run does not need it, and the drawn demo data trains from scratch.
"""
import os
import os.path as osp
import re

import pytest
from mmengine.config import Config

import mmlinattn.models  # noqa: F401  (registers the backbones)
from mmlinattn.datasets.demo_overrides import demo_options
from mmlinattn.engine.runner import check_backbone_weights
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
    detector, family, size = name.split('_')[:3]
    variant = size.partition('-')[2]
    return osp.join(CONFIG_DIR, '_base_', 'models',
                    f"{detector}_{family}{'_' + variant if variant else ''}.py")


@pytest.mark.parametrize('name', CONFIGS)
def test_config_fine_tunes_the_imagenet_file_its_base_says_how_to_make(name):
    cfg = Config.fromfile(osp.join(CONFIG_DIR, name))
    backbone = cfg.model.backbone
    family, arch = name.split('_')[1:3]
    size, _, variant = arch.partition('-')
    if variant == 'official':   # the authors' NaLaFormer: arch 'tiny', its own file
        arch = size
        path = f'checkpoints/{family}_{arch}_official_in1k.pth'
    else:
        path = f'checkpoints/{family}_{arch}_in1k.pth'
    assert backbone.init_cfg == dict(type='Pretrained', checkpoint=path)
    base = weights_statement(model_base(name)).replace('<arch>', arch)
    assert path in base and 'convert_checkpoint.py' in base
    assert 'model.backbone.init_cfg=None' in base   # how to train from scratch instead
    if variant:   # the authors' file converts into this config's model
        authors = {'norm': f'SOFT_{size.capitalize()}_norm.pth',
                   'official': f'NALAFORMER_{size[0].upper()}.pth'}[variant]
        assert f'{authors} {path} --official --arch-check {backbone.type[10:]}:{arch}' \
            in base.replace('<Size>', size.capitalize()).replace('<S>', size[0].upper())
    if variant == 'norm':   # their files exist: nothing to pretrain
        assert "pretrain timm's" not in base
        return
    # the timm model named for pretraining builds this config's backbone
    spec = MODEL_SPECS[re.search(r"pretrain timm's (\w+)", base).group(1)][0]
    assert (f"mmlinattn.{spec['type']}", spec['arch']) == (backbone.type, backbone.arch)
    if variant:   # and the authors' attention
        assert {k: backbone.get(k) for k in spec if k != 'type'} == \
            {k: v for k, v in spec.items() if k != 'type'}
    if family in ('infvit', 'ldn'):   # their patchify stems barely learn from scratch
        assert "stem='conv'" in base


@pytest.mark.parametrize('name', ['retinanet_ldn_tiny_1x.py', 'upernet_soft_small_ade20k_160k.py',
                                  'maskrcnn_nalaformer_tiny_3x.py',
                                  'retinanet_soft_tiny-norm_1x.py',
                                  'semfpn_nalaformer_tiny-official_ade20k_40k.py'])
def test_without_the_file_training_stops_at_the_start_and_says_how_to_make_it(
        name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # no checkpoints/ here
    cfg = Config.fromfile(osp.join(CONFIG_DIR, name))
    path = cfg.model.backbone.init_cfg.checkpoint
    with pytest.raises(SystemExit) as err:
        check_backbone_weights(cfg)
    message = str(err.value)
    assert path in message and 'convert_checkpoint.py' in message
    assert 'model.backbone.init_cfg=None' in message and 'docs/user_guides/weights.md' in message
    if '_nalaformer_' in name:   # the authors' file (and, for the paper's kernel, the preset
        assert 'NALAFORMER_T.pth' in message   # it needs)
        assert '-official' in name or "kernel='relu_split_rope'" in message
    if '-' in name.split('_')[2]:   # the authors' model: convert their file
        assert f'{path} --official --arch-check {cfg.model.backbone.type[10:]}:' in message
    # the backbone itself refuses the missing file too (mmdet's and mmseg's own tools)
    backbone = dict(cfg.model.backbone, type=cfg.model.backbone.type.split('.')[-1])
    with pytest.raises(MissingCheckpointError, match=re.escape(path)):
        MODELS.build(backbone).init_weights()


def test_a_present_file_or_a_resume_needs_nothing_more(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = 'retinanet_soft_tiny_1x.py'
    cfg = Config.fromfile(osp.join(CONFIG_DIR, name))
    resumed = Config.fromfile(osp.join(CONFIG_DIR, name))
    resumed.load_from = 'work_dirs/x/epoch_3.pth'
    check_backbone_weights(resumed)   # the weights come from load_from
    assert resumed.model.backbone.init_cfg is None
    os.makedirs('checkpoints')
    open(cfg.model.backbone.init_cfg.checkpoint, 'wb').close()
    check_backbone_weights(cfg)
    assert cfg.model.backbone.init_cfg.checkpoint == 'checkpoints/soft_tiny_in1k.pth'


def test_the_drawn_demo_data_trains_from_scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = Config.fromfile(osp.join(CONFIG_DIR, 'semfpn_infvit_tiny_ade20k_40k.py'))
    assert demo_options(cfg, 20)['model.backbone.init_cfg'] is None


@pytest.mark.parametrize('name', [n for n in CONFIGS if '_soft_' in n])
def test_soft_configs_run_the_cholesky_solve(name):
    """The configs run the paper's landmark rule with the ridge-regularised Cholesky solve in
    place of A^+: records/soft_pinv_decision_zen4.json found it closer to A^+ than 20
    Newton-Schulz steps at these m, at a fraction of their cost."""
    backbone = Config.fromfile(osp.join(CONFIG_DIR, name)).model.backbone
    assert backbone.pinv == 'cholesky' and backbone.get('max_landmarks') is None
