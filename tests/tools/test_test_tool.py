"""``tools/test.py`` takes the flags of mmdet's and mmseg's test tools: ``--show``,
``--wait-time`` and ``--tta`` (their config edits: :mod:`mmlinattn.engine.runner`)."""
import os.path as osp
import sys

import pytest
import torch
from mmengine.config import Config

from mmlinattn.engine.runner import enable_show, enable_tta
from repo_paths import ROOT
from tool_runs import tool as tool_process

DEMO_CONFIG = 'configs/demo/retinanet_soft_pico_demo.py'


def test_show_is_a_flag_not_a_prefix_of_show_dir(tmp_path):
    # parsed: the run gets as far as looking for the config (argparse would stop with exit
    # status 2 and its usage line if --show were taken for --show-dir, which needs a value)
    proc = tool_process([sys.executable, 'tools/test.py', str(tmp_path / 'c.py'), 'w.pth',
                         '--show', '--wait-time', '0.5', '--tta'])
    assert proc.returncode == 1 and 'c.py' in proc.stderr and 'does not exist' in proc.stderr
    cfg = Config.fromfile(osp.join(ROOT, DEMO_CONFIG))
    enable_show(cfg, 'mmdet', None, True, 0.5)
    hook = cfg.default_hooks.visualization
    assert hook.draw and hook.show and hook.wait_time == 0.5


@pytest.mark.parametrize('config', [DEMO_CONFIG, 'configs/upernet_ldn_tiny_ade20k_160k.py'])
def test_tta_wraps_the_model_and_builds(config):
    cfg = Config.fromfile(osp.join(ROOT, config))
    scope = cfg.default_scope
    enable_tta(cfg, scope)
    assert cfg.model.module.backbone.type.startswith('mmlinattn.')
    if scope == 'mmdet':
        from mmdet.registry import MODELS, TRANSFORMS
        from mmdet.utils import register_all_modules
    else:
        from mmseg.registry import MODELS, TRANSFORMS
        from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=True)
    pipeline = cfg.test_dataloader.dataset.pipeline
    assert any(t['type'] == 'TestTimeAug' for t in pipeline)
    for t in pipeline:
        TRANSFORMS.build(t)
    assert type(MODELS.build(cfg.model)).__name__ == cfg.tta_model.type


@pytest.mark.slow
def test_test_py_with_tta_and_show_dir_on_the_demo_data(tmp_path):
    """A real run: the detector wrapped in mmdet's TTA model evaluates two demo images and
    paints them."""
    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules

    from make_demo_data import make_demo_data
    make_demo_data(str(tmp_path / 'demo'), num_train=1, num_val=2, layouts=('coco', ),
                   logger=None)
    register_all_modules(init_default_scope=True)
    cfg = Config.fromfile(osp.join(ROOT, DEMO_CONFIG))
    ckpt = tmp_path / 'random.pth'
    torch.save({'state_dict': MODELS.build(cfg.model).state_dict(), 'meta': {}}, ckpt)
    root = f'{tmp_path}/demo/coco/'
    proc = tool_process(
        [sys.executable, 'tools/test.py', DEMO_CONFIG, str(ckpt), '--tta', '--show-dir', 'vis',
         '--work-dir', str(tmp_path / 'work'), '--cfg-options',
         f'test_dataloader.dataset.data_root={root}',
         f'test_evaluator.ann_file={root}annotations/instances_val2017.json'])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'coco/bbox_mAP' in proc.stdout + proc.stderr
    assert len(list((tmp_path / 'work').glob('*/vis/*.jpg'))) == 2
