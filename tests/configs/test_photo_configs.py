"""The configs in ``configs/photos/`` read the shipped photo sets (data/photos/) as they are:
their classes and heads match the set, their datasets pass the pre-flight check, the demo's
400-iteration length is their own schedule (``tools/demo.sh CONFIG`` runs them unchanged),
and a moved data folder names the fix."""
import os
import os.path as osp

import pytest
from mmengine.config import Config

from mmlinattn.datasets.demo_overrides import demo_config, demo_options, reads_photo_set
from mmlinattn.datasets.photos import PHOTO_SETS
from mmlinattn.utils.data_check import check_datasets
from repo_paths import ROOT

PHOTO_DIR = osp.join(ROOT, 'configs', 'photos')
PHOTO_CONFIGS = sorted(f for f in os.listdir(PHOTO_DIR) if f.endswith('.py'))


def _set_of(name):
    return next(s for s in PHOTO_SETS if name.endswith(f'_{s}.py'))


def _heads(model):
    if 'bbox_head' in model:
        return [model.bbox_head]
    if 'roi_head' in model:
        return [model.roi_head.bbox_head, model.roi_head.mask_head]
    return [model.decode_head]


def test_every_family_has_a_photo_detector_and_segmentor():
    for fam in ('soft', 'nalaformer', 'infvit', 'ldn'):
        assert f'retinanet_{fam}_pico_bccd.py' in PHOTO_CONFIGS
        assert f'retinanet_{fam}_pico_cards.py' in PHOTO_CONFIGS
        assert f'semfpn_{fam}_pico_nuts.py' in PHOTO_CONFIGS
    assert 'maskrcnn_ldn_pico_nuts.py' in PHOTO_CONFIGS


@pytest.mark.parametrize('name', PHOTO_CONFIGS)
def test_photo_config_reads_its_set_as_it_is(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # data_root is relative, as in every OpenMMLab config
    cfg = Config.fromfile(osp.join(PHOTO_DIR, name))
    spec = PHOTO_SETS[_set_of(name)]
    assert reads_photo_set(cfg)
    assert demo_options(cfg, 400) == {}, 'the schedule is not the demo length'
    assert demo_config(cfg, 100).train_cfg != cfg.train_cfg  # another length rescales it
    seg = cfg.default_scope == 'mmseg'
    classes = ('background', ) + spec['classes'] if seg else spec['classes']
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        ds = cfg[key].dataset
        assert ds.data_root == f'data/photos/{_set_of(name)}/'
        assert tuple(ds.metainfo.classes) == tuple(classes)
    assert all(h.num_classes == len(classes) for h in _heads(cfg.model))
    assert check_datasets(cfg, ('train_dataloader', 'val_dataloader', 'test_dataloader')) == []
    if 'roi_head' in cfg.model:
        assert cfg.train_dataloader.dataset.pipeline[1].with_mask
        assert set(cfg.val_evaluator.metric) == {'bbox', 'segm'}


def test_a_moved_photo_folder_names_where_the_sets_live(tmp_path, monkeypatch):
    cfg = Config.fromfile(osp.join(PHOTO_DIR, 'retinanet_soft_pico_bccd.py'))
    monkeypatch.chdir(tmp_path)  # not the repository root: data/photos/ is not here
    problems = check_datasets(cfg, ('train_dataloader', ))
    assert len(problems) == 1
    assert 'ships with the repository in data/photos/' in problems[0]
    assert 'make_photo_data.py' in problems[0] and 'make_demo_data' not in problems[0]
