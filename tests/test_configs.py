"""Every config in ``configs/`` (found by listing the directory, so a new config is tested
automatically): it loads, its pipelines and demo variant build, its model builds with the
real mmdet / mmseg registries, trains one step (loss + backward) and predicts on a tiny CPU
input, and every neck / head ``in_channels`` equals the real channels feeding it.

Inputs are shrunk (one 64x64 image for detectors, two 64x64 crops for segmentors, with the
segmentor's pad size and sliding window set to 64), never the models.  The model run
depends only on the config's ``model`` dict, so configs with identical model dicts (e.g.
a 1x and a 3x schedule, a 40k and an 80k schedule) share one run; each config still gets
its own test result.
"""
import json
import os
import os.path as osp
from functools import lru_cache

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from dense_helpers import (build_model, det_batch, num_classes_of, predict, seg_batch,
                           shrink_seg_model_cfg, small_input_env, train_step)

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG_DIR = osp.join(ROOT, 'configs')
CONFIGS = sorted(f for f in os.listdir(CONFIG_DIR)
                 if f.endswith('.py') and osp.isfile(osp.join(CONFIG_DIR, f)))
SIZE = 64


@pytest.fixture(scope='module', autouse=True)
def _fast_config_loading():
    with small_input_env():
        yield


@lru_cache(maxsize=None)
def load(name: str) -> Config:
    return Config.fromfile(osp.join(CONFIG_DIR, name))


def test_config_listing_covers_the_matrix():
    from generate_configs import render_all
    generated = render_all()
    assert sorted(generated) == CONFIGS, (
        'configs/ and tools/generate_configs.py disagree: add hand-written configs to the '
        f'table; missing: {sorted(set(generated) - set(CONFIGS))}, not generated: '
        f'{sorted(set(CONFIGS) - set(generated))}')
    stale = [n for n, text in generated.items()
             if open(osp.join(CONFIG_DIR, n)).read() != text]
    assert not stale, f'edited by hand or stale, rerun tools/generate_configs.py: {stale}'
    # The required (family, size, dataset) matrix, stated independently of the generator's table.
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
    assert expected <= set(CONFIGS), sorted(expected - set(CONFIGS))


def test_model_zoo_page_lists_every_config():
    with open(osp.join(ROOT, 'docs', 'model_zoo.md')) as f:
        text = f.read()
    missing = [n for n in CONFIGS if f'](../configs/{n})' not in text]
    assert not missing, f'rerun tools/model_zoo.py; docs/model_zoo.md lacks {missing}'


@pytest.mark.parametrize('name', CONFIGS)
def test_config_loads_with_explicit_recipe(name):
    cfg = load(name)
    text = open(osp.join(CONFIG_DIR, name)).read()
    assert '\nimport ' not in text and not text.startswith('import '), \
        'no import statements in configs (mmengine 0.10 + Python 3.11 misread them)'
    assert '# Recipe: ' in text
    assert cfg.custom_imports == dict(imports=['mmlinattn.models', 'mmlinattn.engine'],
                                      allow_failed_imports=False)
    # batch padding is masked out of the backbone (docs/batch_independence.md)
    assert dict(type='mmlinattn.ValidRegionHook') in cfg.custom_hooks
    bb = cfg.model.backbone
    assert bb.type.startswith('mmlinattn.') and bb.init_cfg is None
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
    else:
        assert cfg.train_cfg.max_epochs == {'1x': 12, '3x': 36}[name.rsplit('_', 1)[1][:-3]]


@pytest.mark.parametrize('name', CONFIGS)
def test_config_pipelines_and_demo_variant_build(name):
    from demo_overrides import demo_config
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
    assert demo.model.backbone == cfg.model.backbone, 'the demo variant keeps the backbone'
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

    # channels actually flowing from the backbone through each neck
    with torch.no_grad():
        feats = model.backbone(torch.zeros(1, 3, SIZE, SIZE))
        stages = [_channels(feats)]
        if getattr(model, 'with_neck', False):
            necks = list(model.neck) if isinstance(model.neck, torch.nn.Sequential) \
                else [model.neck]
            for neck in necks:
                feats = neck(feats)
                stages.append(_channels(feats))
    return dict(stages=stages)


@pytest.mark.parametrize('name', CONFIGS)
def test_config_trains_and_predicts(name):
    _run(name)


@pytest.mark.parametrize('name', CONFIGS)
def test_config_in_channels_match_real_outputs(name):
    cfg = load(name)
    stages = _run(name)['stages']
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
