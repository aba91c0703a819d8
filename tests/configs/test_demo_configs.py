"""The configs in ``configs/demo/`` run as they are on the demo data, with exactly the
settings ``tools/misc/demo_overrides.py CONFIG --iters 400`` gives, and a missing dataset names
the command that works for the config at hand."""
import os
import os.path as osp

import pytest
from mmengine.config import Config

from mmlinattn.datasets.demo import DEMO_CLASSES
from mmlinattn.datasets.demo_overrides import demo_config, demo_options
from mmlinattn.utils.data_check import check_datasets
from mmlinattn.engine.runner import check_config_datasets
from repo_paths import ROOT

DEMO_DIR = osp.join(ROOT, 'configs', 'demo')
DEMO_CONFIGS = sorted(f for f in os.listdir(DEMO_DIR) if f.endswith('_demo.py'))


@pytest.mark.parametrize('name', DEMO_CONFIGS)
def test_demo_config_is_its_own_400_iteration_demo_variant(name):
    cfg = Config.fromfile(osp.join(DEMO_DIR, name))
    assert demo_options(cfg, 400) == {}, 'the config differs from its demo_overrides form'
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        ds = cfg[key].dataset
        assert ds.data_root == 'data/demo/coco/'
        assert tuple(ds.metainfo.classes) == DEMO_CLASSES
    heads = ([cfg.model.bbox_head] if 'bbox_head' in cfg.model  # one-stage
             else [cfg.model.roi_head.bbox_head, cfg.model.roi_head.mask_head])
    assert all(head.num_classes == len(DEMO_CLASSES) for head in heads)
    if 'roi_head' in cfg.model:  # Mask R-CNN trains on the masks too
        loads = [t for t in cfg.train_dataloader.dataset.pipeline
                 if t.type == 'LoadAnnotations']
        assert loads and loads[0].get('with_mask')
    # and the demo variant of another length still changes the schedule
    assert demo_config(cfg, 20).train_cfg.max_epochs == 2


def test_missing_dataset_names_the_working_command(tmp_path):
    cfg = Config(dict(train_dataloader=dict(dataset=dict(
        type='CocoDataset', data_root=str(tmp_path / 'coco') + '/',
        ann_file='annotations/instances_train2017.json'))))
    with pytest.raises(SystemExit) as err:
        check_config_datasets(cfg, ('train_dataloader', ), 'configs/x.py',
                              'python tools/train.py configs/x.py')
    assert ('python tools/train.py configs/x.py --cfg-options '
            '$(python tools/misc/demo_overrides.py configs/x.py)') in str(err.value)


def test_missing_demo_data_says_how_to_make_it(tmp_path, monkeypatch):
    cfg = Config.fromfile(osp.join(DEMO_DIR, DEMO_CONFIGS[0]))
    monkeypatch.chdir(tmp_path)  # no data/ here
    problems = check_datasets(cfg, ('train_dataloader', ), 'unused')
    assert problems and ('make it with `python tools/dataset_converters/make_demo_data.py`'
                         in problems[0])
    assert 'demo_overrides' not in problems[0]
