"""Every config in ``configs/`` (found by listing the directory, so a new config is tested
automatically): it loads, its pipelines and demo variant build, its model builds with the
real mmdet / mmseg registries, and every neck / head ``in_channels`` equals the channels
its backbone and necks really return (the whole model built and run on the meta device).
One config per (detector, family, dataset), the smallest model, also trains one step
(loss + backward) and predicts on a tiny CPU input; the other sizes of a family differ
only in the widths and depths the meta run checks.  Each config is a short leaf over
``configs/_base_/`` that states its recipe; a longer schedule inherits the shorter one of
the same model and changes only the schedule.

Inputs are shrunk (one 64x64 image for detectors, two 64x64 crops for segmentors, with the
segmentor's pad size and sliding window set to 64), never the models.  The model runs
depend only on the config's ``model`` dict, so configs with identical model dicts (e.g.
a 1x and a 3x schedule, a 40k and an 80k schedule) share one run; each config still gets
its own test result.
"""
import json
import os
import os.path as osp
from functools import lru_cache

import pytest
import torch
import yaml
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mmlinattn.models.backbones.nalaformer import OFFICIAL_PRESET
from mmlinattn.models.backbones.soft import OFFICIAL_PRESETS
from dense_helpers import (build_model, det_batch, num_classes_of, predict, seg_batch,
                           shrink_seg_model_cfg, small_input_env, train_step)
from repo_paths import ROOT

CONFIG_DIR = osp.join(ROOT, 'configs')
CONFIGS = sorted(f for f in os.listdir(CONFIG_DIR)
                 if f.endswith('.py') and osp.isfile(osp.join(CONFIG_DIR, f)))
SIZE = 64
#: the backbone options of the authors' models a config variant builds (``<size>-<variant>``)
AUTHORS_PRESETS = {'norm': OFFICIAL_PRESETS['norm'], 'official': OFFICIAL_PRESET}


def variant(name: str) -> str:
    """``'norm'`` / ``'official'`` for ``retinanet_soft_tiny-norm_1x.py`` /
    ``..._tiny-official_...``, else ``''``."""
    return name.split('_')[2].partition('-')[2]


@pytest.fixture(scope='module', autouse=True)
def _fast_config_loading():
    with small_input_env():
        yield


@lru_cache(maxsize=None)
def load(name: str) -> Config:
    return Config.fromfile(osp.join(CONFIG_DIR, name))


def test_config_listing_covers_the_matrix():
    """The required (family, size, dataset) matrix: every config in it exists, and every
    config is in it (add a new config here)."""
    sizes = dict(soft=('tiny', 'small', 'medium', 'large'),
                 nalaformer=('tiny', 'small', 'base'), infvit=('tiny', 'small'),
                 ldn=('tiny', 'small'))
    seg_sizes = dict(sizes, soft=('small', 'medium', 'large'))
    expected = set()
    for family in sizes:
        for size in sizes[family]:
            expected |= {f'{a}_{family}_{size}_{s}.py' for a in ('retinanet', 'maskrcnn')
                         for s in ('1x', '3x')}
            expected |= {f'semfpn_{family}_{size}_ade20k_{s}.py' for s in ('40k', '80k')}
        for size in seg_sizes[family]:
            expected |= {f'upernet_{family}_{size}_ade20k_160k.py',
                         f'upernet_{family}_{size}_cityscapes_40k.py',
                         f'upernet_{family}_{size}_cityscapes_80k.py',
                         f'semfpn_{family}_{size}_cityscapes_80k.py'}
    expected |= {'retinanet_infvitplain_l4_1x.py', 'upernet_infvitplain_l4_ade20k_160k.py'}
    # the authors' models, in the settings they published numbers for: SOFT-Norm (released
    # ImageNet weights; their README) and NaLaFormer's code (the paper's Tables 2-3)
    for size in ('tiny', 'small', 'medium', 'large'):
        expected |= {f'{a}_soft_{size}-norm_1x.py' for a in ('retinanet', 'maskrcnn')}
    expected |= {f'upernet_soft_{size}-norm_ade20k_160k.py' for size in ('small', 'medium')}
    for size in ('tiny', 'small'):
        expected |= {f'retinanet_nalaformer_{size}-official_1x.py',
                     f'maskrcnn_nalaformer_{size}-official_1x.py',
                     f'maskrcnn_nalaformer_{size}-official_3x.py',
                     f'semfpn_nalaformer_{size}-official_ade20k_40k.py',
                     f'upernet_nalaformer_{size}-official_ade20k_160k.py'}
    assert expected == set(CONFIGS), (f'missing: {sorted(expected - set(CONFIGS))}, '
                                      f'not in the matrix: {sorted(set(CONFIGS) - expected)}')


def test_model_zoo_lists_every_config_once():
    """Every config is on exactly one family page of docs/model_zoo/ and in exactly one entry
    of the metafiles, on the same family's, with a Config path that exists."""
    pages, entries = {}, {}
    for family in ('soft', 'nalaformer', 'infvit', 'ldn'):
        folder = osp.join(ROOT, 'docs', 'model_zoo', family)
        with open(osp.join(folder, 'README.md')) as f:
            page = f.read()
        with open(osp.join(folder, 'metafile.yml')) as f:
            models = yaml.safe_load(f)['Models']
        for n in CONFIGS:
            if f'](../../../configs/{n})' in page:
                pages.setdefault(n, []).append(family)
        for m in models:
            assert osp.isfile(osp.join(ROOT, m['Config'])), m['Config']
            entries.setdefault(osp.basename(m['Config']), []).append(family)
    hint = 'rerun tools/analysis_tools/model_zoo.py'
    assert {n: pages.get(n) for n in CONFIGS if len(pages.get(n, [])) != 1} == {}, hint
    assert {n: entries.get(n) for n in CONFIGS if len(entries.get(n, [])) != 1} == {}, hint
    assert set(entries) == set(CONFIGS), f'metafile entries without a config: {hint}'
    assert {n: pages[n] for n in CONFIGS if pages[n] != entries[n]} == {}


# A longer schedule inherits the config of the same model with the shorter one.
LONGER = {'3x': '1x', '80k': '40k'}
SCHEDULE_KEYS = {'param_scheduler', 'train_cfg', 'default_hooks', 'train_pipeline',
                 'train_dataloader'}


def shorter_leaf(name: str):
    stem, schedule = name[:-len('.py')].rsplit('_', 1)
    shorter = f'{stem}_{LONGER[schedule]}.py' if schedule in LONGER else None
    return shorter if shorter in CONFIGS else None


def plain(x):
    """``x`` without mmengine's ``_scope_`` markers (where a dict was inherited from)."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items() if k != '_scope_'}
    if isinstance(x, (list, tuple)):
        return type(x)(plain(v) for v in x)
    return x


@pytest.mark.parametrize('name', CONFIGS)
def test_config_is_a_short_leaf_stating_its_recipe(name):
    """A config is a short leaf over configs/_base_/ that states what a reader compares with
    a paper; a longer schedule inherits the shorter one of the same model and states only its
    schedule (the recipe comment, LR schedule and length)."""
    text = open(osp.join(CONFIG_DIR, name)).read()
    assert len(text.splitlines()) < 30, 'move what configs share into configs/_base_/'
    parent = shorter_leaf(name)
    if parent:
        assert text.startswith(f"_base_ = './{parent}'\n")
        stated = ('# Recipe: ', 'param_scheduler = [', 'train_cfg = dict(')
    else:
        assert text.startswith('_base_ = [') and "'./_base_/runtime.py'" in text
        stated = ('# Recipe: ', 'batch_size=', "type='AdamW'", 'lr=', 'weight_decay=',
                  'param_scheduler = [', 'train_cfg = dict(')
    missing = [s for s in stated if s not in text]
    assert not missing, f'{name} does not state {missing}'


@pytest.mark.parametrize('name', [n for n in CONFIGS if shorter_leaf(n)])
def test_longer_schedule_changes_only_the_schedule(name):
    long, short = load(name).to_dict(), load(shorter_leaf(name)).to_dict()
    changed = {k for k in set(long) | set(short) if long.get(k) != short.get(k)}
    assert changed <= SCHEDULE_KEYS, changed - SCHEDULE_KEYS
    assert {'param_scheduler', 'train_cfg'} <= changed
    loader, short_loader = long['train_dataloader'], short['train_dataloader']
    assert {k for k in loader if loader[k] != short_loader[k]} <= {'dataset'}
    assert {k for k, v in loader['dataset'].items()
            if v != short_loader['dataset'][k]} <= {'pipeline'}
    assert plain(loader['dataset']['pipeline']) == plain(long['train_pipeline'])
    if name.endswith('_3x.py'):  # mmdet's multi-scale 3x: only the Resize step differs
        ms = dict(type='RandomChoiceResize', keep_ratio=True,
                  scales=[(1333, s) for s in (480, 512, 544, 576, 608, 640, 672, 704, 736,
                                              768, 800)])
        assert long['train_pipeline'] == [
            ms if t['type'] == 'Resize' else t for t in short['train_pipeline']]
        assert long['train_cfg']['max_epochs'] == 36
    else:
        assert long['train_pipeline'] == short['train_pipeline']


# Resolved values of a few configs, one per detector, written out in full: the backbone
# carries nothing of the mmdet / mmseg model it replaces (`_delete_`), and the optimizer
# nothing of their SGD.
KEY_FACTS = {
    'retinanet_soft_small_3x.py': dict(
        backbone=dict(type='mmlinattn.SOFT', arch='small', out_indices=(1, 2, 3),
                      drop_path_rate=0.1, pinv='cholesky',
                      init_cfg=dict(type='Pretrained',
                                    checkpoint='checkpoints/soft_small_in1k.pth')),
        neck=dict(type='FPN', in_channels=[192, 384, 768], out_channels=256, start_level=0,
                  add_extra_convs='on_input', num_outs=5),
        optim_wrapper=dict(
            type='OptimWrapper',
            optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.01),
            paramwise_cfg=dict(norm_decay_mult=0.0,
                               custom_keys={'pos_embed': dict(decay_mult=0.0)})),
        param_scheduler=[
            dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
            dict(type='MultiStepLR', begin=0, end=36, by_epoch=True, milestones=[27, 33],
                 gamma=0.1)],
        batch_size=2, train_cfg=dict(type='EpochBasedTrainLoop', max_epochs=36, val_interval=1)),
    'maskrcnn_nalaformer_base_1x.py': dict(
        backbone=dict(type='mmlinattn.NaLaFormer', arch='base', out_indices=(0, 1, 2, 3),
                      drop_path_rate=0.4,
                      init_cfg=dict(type='Pretrained',
                                    checkpoint='checkpoints/nalaformer_base_in1k.pth')),
        optim_wrapper=dict(
            type='OptimWrapper',
            optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=1e-4),
            paramwise_cfg=dict(norm_decay_mult=0.0)),
        batch_size=2, train_cfg=dict(type='EpochBasedTrainLoop', max_epochs=12, val_interval=1)),
    'upernet_soft_small_cityscapes_80k.py': dict(
        backbone=dict(type='mmlinattn.SOFT', arch='small', out_indices=(0, 1, 2, 3),
                      drop_path_rate=0.1, pinv='cholesky',
                      init_cfg=dict(type='Pretrained',
                                    checkpoint='checkpoints/soft_small_in1k.pth')),
        test_cfg=dict(mode='slide', crop_size=(768, 768), stride=(512, 512)),
        crop=(768, 768),
        optim_wrapper=dict(
            type='OptimWrapper',
            optimizer=dict(type='AdamW', lr=6e-4, betas=(0.9, 0.999), weight_decay=0.01),
            paramwise_cfg=dict(norm_decay_mult=0.0,
                               custom_keys={'pos_embed': dict(decay_mult=0.0)})),
        param_scheduler=[
            dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
            dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=80000,
                 by_epoch=False)],
        batch_size=2, checkpoint_interval=8000,
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=80000, val_interval=8000)),
    'semfpn_ldn_tiny_ade20k_40k.py': dict(
        backbone=dict(type='mmlinattn.LDN', arch='tiny', out_indices=(0, 1, 2, 3),
                      drop_path_rate=0.1,
                      init_cfg=dict(type='Pretrained',
                                    checkpoint='checkpoints/ldn_tiny_in1k.pth')),
        neck=dict(type='FPN', in_channels=[64, 128, 320, 512], out_channels=256, num_outs=4),
        crop=(512, 512),
        optim_wrapper=dict(
            type='OptimWrapper',
            optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=1e-4),
            paramwise_cfg=dict(norm_decay_mult=0.0, custom_keys={
                'tap_logits': dict(decay_mult=0.0), 'step_logit': dict(decay_mult=0.0)})),
        param_scheduler=[dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000,
                              by_epoch=False)],
        batch_size=4, checkpoint_interval=4000,
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=40000, val_interval=4000)),
    'upernet_infvitplain_l4_ade20k_160k.py': dict(
        backbone=dict(type='mmlinattn.InfViTPlain', arch='l4', out_indices=(0, 1, 2, 3),
                      drop_path_rate=0.1,
                      init_cfg=dict(type='Pretrained',
                                    checkpoint='checkpoints/infvitplain_l4_in1k.pth')),
        neck=dict(type='mmlinattn.SimpleFeaturePyramid', in_channels=768,
                  scale_factors=(4.0, 2.0, 1.0, 0.5), in_index=None),
        crop=(512, 512), batch_size=2, checkpoint_interval=16000),
}


@pytest.mark.parametrize('name', sorted(KEY_FACTS))
def test_resolved_config_key_facts(name):
    cfg = plain(load(name).to_dict())
    facts = dict(KEY_FACTS[name])
    for key in ('backbone', 'neck', 'test_cfg'):
        if key in facts:
            assert cfg['model'][key] == facts.pop(key), key
    for key in ('optim_wrapper', 'param_scheduler', 'train_cfg'):
        if key in facts:
            assert cfg[key] == facts.pop(key), key
    assert cfg['train_dataloader']['batch_size'] == facts.pop('batch_size')
    if 'checkpoint_interval' in facts:
        assert cfg['default_hooks']['checkpoint']['interval'] == facts.pop('checkpoint_interval')
    if 'crop' in facts:
        crop = facts.pop('crop')
        assert cfg['model']['data_preprocessor']['size'] == crop
        assert [t['crop_size'] for t in cfg['train_dataloader']['dataset']['pipeline']
                if t['type'] == 'RandomCrop'] == [crop]
    assert not facts


@pytest.mark.parametrize('name', CONFIGS)
def test_config_loads_with_explicit_recipe(name):
    cfg = load(name)
    text = open(osp.join(CONFIG_DIR, name)).read()
    assert '\nimport ' not in text and not text.startswith('import '), \
        'no import statements in configs (mmengine 0.10 + Python 3.11 misread them)'
    assert '# Recipe: ' in text
    assert cfg.custom_imports == dict(imports=['mmlinattn.models', 'mmlinattn.engine'],
                                      allow_failed_imports=False)
    # batch padding is masked out of the backbone (docs/advanced/batch_independence.md)
    assert dict(type='mmlinattn.ValidRegionHook') in cfg.custom_hooks
    bb = cfg.model.backbone
    assert bb.type.startswith('mmlinattn.') and bb.init_cfg.type == 'Pretrained'
    assert cfg.optim_wrapper.optimizer.type == 'AdamW'
    for key in ('lr', 'weight_decay'):
        assert key in cfg.optim_wrapper.optimizer
    assert cfg.train_dataloader.batch_size >= 1
    assert cfg.param_scheduler, 'the LR schedule is stated'
    scope = cfg.default_scope
    if scope == 'mmseg':
        # nothing may download: the base's ImageNet URL is removed
        assert cfg.model.get('pretrained') is None
        assert cfg.train_cfg.max_iters == int(name.rsplit('_', 1)[1][:-4]) * 1000
        # the inherited schedule's checkpoint interval follows the config's length
        assert cfg.default_hooks.checkpoint.interval == cfg.train_cfg.val_interval
    else:
        assert cfg.train_cfg.max_epochs == {'1x': 12, '3x': 36}[name.rsplit('_', 1)[1][:-3]]
    # the backbone replaces the base's ResNet / Swin entirely (`_delete_` took effect)
    # (SOFT++: the pseudo-inverse, test_config_weights.py); an authors' model adds exactly
    # the options of their preset
    extra = {k: bb[k] for k in bb
             if k not in ('type', 'arch', 'out_indices', 'drop_path_rate', 'init_cfg', 'pinv')}
    assert extra == AUTHORS_PRESETS.get(variant(name), {}), extra
    assert '_delete_' not in json.dumps(cfg.to_dict(), default=str)


@pytest.mark.parametrize('name', CONFIGS)
def test_config_pipelines_and_demo_variant_build(name):
    from mmlinattn.datasets.demo_overrides import demo_config
    cfg = load(name)
    scope = cfg.default_scope
    if scope == 'mmdet':
        from mmdet.registry import TRANSFORMS
        from mmdet.utils import register_all_modules
    else:
        from mmseg.registry import TRANSFORMS
        from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope(scope):
        for key in ('train_dataloader', 'test_dataloader'):
            ds = cfg[key].dataset
            for t in ds.pipeline:
                TRANSFORMS.build(t)
    demo = demo_config(cfg, iters=10, data_root='/nonexistent')
    # the demo variant keeps the backbone, and trains it from scratch without the ImageNet file
    assert dict(demo.model.backbone, init_cfg=None) == dict(cfg.model.backbone, init_cfg=None)
    assert demo.model.backbone.init_cfg is None
    assert demo.train_dataloader.dataset.data_root.startswith('/nonexistent')


# --------------------------------------------------------------------------- model runs
_RUNS = {}


def _model_key(cfg) -> str:
    return json.dumps(cfg.model.to_dict(), sort_keys=True, default=str)


def _channels(feats):
    return [int(f.shape[1]) for f in feats]


def _run(name: str) -> dict:
    """Build the config's model, train one step, predict, and record the channels of the
    backbone / neck outputs (cached per model dict)."""
    cfg = load(name)
    key = _model_key(cfg)
    if key in _RUNS:
        if isinstance(_RUNS[key], Exception):
            raise AssertionError(f'the identical model of an earlier config failed: '
                                 f'{_RUNS[key]!r}')
        return _RUNS[key]
    try:
        _RUNS[key] = _run_model(cfg)
    except Exception as err:
        _RUNS[key] = err
        raise
    return _RUNS[key]


def _run_model(cfg) -> dict:
    scope = cfg.default_scope
    model_cfg = cfg.model
    if scope == 'mmseg':
        model_cfg = shrink_seg_model_cfg(model_cfg, (SIZE, SIZE))
        data = seg_batch(SIZE, SIZE, num_classes_of(model_cfg))
    else:
        data = det_batch(SIZE, SIZE, with_mask='roi_head' in model_cfg
                         and 'mask_head' in model_cfg.roi_head)
    torch.manual_seed(0)
    model = build_model(model_cfg, scope)
    loss = train_step(model, data, scope)
    assert torch.isfinite(loss), loss
    no_grad = [n for n, p in model.backbone.named_parameters()
               if p.requires_grad and (p.grad is None or not torch.isfinite(p.grad).all())]
    assert not no_grad, f'backbone parameters without a finite gradient: {no_grad[:5]}'
    preds = predict(model, data, scope)
    assert len(preds) == len(data['inputs'])
    for p, img in zip(preds, data['inputs']):
        h, w = img.shape[-2:]
        if scope == 'mmseg':
            assert tuple(p.pred_sem_seg.data.shape) == (1, h, w)
            assert torch.isfinite(p.seg_logits.data).all()
        else:
            assert torch.isfinite(p.pred_instances.bboxes).all()
            assert len(p.pred_instances.scores) == len(p.pred_instances.bboxes)

    return dict(stages=_stage_channels(model))


def _stage_channels(model) -> list:
    """The channels actually flowing from the backbone through each neck."""
    with torch.no_grad():
        feats = model.backbone(torch.zeros(1, 3, SIZE, SIZE))
        stages = [_channels(feats)]
        if getattr(model, 'with_neck', False):
            necks = list(model.neck) if isinstance(model.neck, torch.nn.Sequential) \
                else [model.neck]
            for neck in necks:
                feats = neck(feats)
                stages.append(_channels(feats))
    return stages


SIZE_ORDER = ('tiny', 'small', 'medium', 'base', 'large', 'l4')


def representatives():
    """One config per (detector, family and variant, dataset): the smallest model's shortest
    schedule.  Its model trains a step and predicts; every config's model is built and its
    channels checked on the meta device (test_config_in_channels_match_real_outputs)."""
    picked = {}
    for name in CONFIGS:
        parts = name[:-len('.py')].split('_')
        detector, family, size = parts[:3]
        dataset = parts[3] if detector in ('upernet', 'semfpn') else 'coco'
        key = (detector, family, variant(name), dataset)
        rank = (SIZE_ORDER.index(size.partition('-')[0]), name)
        if key not in picked or rank < picked[key][0]:
            picked[key] = (rank, name)
    return sorted(name for _, name in picked.values())


REPRESENTATIVES = representatives()


def test_representatives_cover_every_detector_family_and_dataset():
    keys = {(*n[:-3].split('_')[:2], variant(n)) for n in CONFIGS}
    assert keys == {(*n[:-3].split('_')[:2], variant(n)) for n in REPRESENTATIVES}
    assert len(REPRESENTATIVES) < len(CONFIGS) / 2


@pytest.mark.parametrize('name', REPRESENTATIVES)
def test_config_trains_and_predicts(name):
    _run(name)


_META_RUNS = {}


def _meta_channels(name: str) -> list:
    """The config's whole model built on the meta device (no memory, no initialisation
    arithmetic) and the channels its backbone and necks really return for a meta image:
    the module code runs, only the arithmetic is skipped."""
    cfg = load(name)
    key = _model_key(cfg)
    if key not in _META_RUNS:
        model = cfg.model
        with torch.device('meta'):
            _META_RUNS[key] = _stage_channels(build_model(model, cfg.default_scope))
    return _META_RUNS[key]


@pytest.mark.parametrize('name', REPRESENTATIVES)
def test_meta_channels_equal_the_real_run(name):
    """The meta-device run sees the channels of a real one."""
    assert _meta_channels(name) == _run(name)['stages']


@pytest.mark.parametrize('name', CONFIGS)
def test_config_in_channels_match_real_outputs(name):
    cfg = load(name)
    stages = _meta_channels(name)
    necks = cfg.model.get('neck')
    necks = [] if necks is None else necks if isinstance(necks, list) else [necks]
    assert len(stages) == len(necks) + 1
    for neck_cfg, real in zip(necks, stages):
        declared = neck_cfg['in_channels']
        if isinstance(declared, int):  # SimpleFeaturePyramid: one width for its input map(s)
            idx = neck_cfg.get('in_index', -1)
            used = real if idx is None else [real[idx]]
            assert all(c == declared for c in used), (neck_cfg['type'], declared, real)
        else:
            start = neck_cfg.get('start_level', 0)
            assert list(declared) == real, (neck_cfg['type'], declared, real)
            assert 0 <= start < len(real)
    head_in = stages[-1]
    m = cfg.model
    if 'decode_head' in m:
        idx = m.decode_head.get('in_index', -1)
        declared = m.decode_head.in_channels
        if isinstance(declared, int):
            assert head_in[idx] == declared
        else:
            assert [head_in[i] for i in idx] == list(declared), (declared, head_in)
        if m.get('auxiliary_head'):
            aux = m.auxiliary_head
            assert head_in[aux.in_index] == aux.in_channels, (aux.in_channels, head_in)
    for key in ('bbox_head', 'rpn_head'):
        if key in m:
            assert all(c == m[key].in_channels for c in head_in), (key, head_in)
