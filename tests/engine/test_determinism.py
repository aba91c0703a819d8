"""Determinism: with a fixed seed and ``deterministic=True``, two CPU
training runs of a demo config give identical losses, iteration by iteration.

The real mmengine ``Runner`` trains mmdet's RetinaNet with an LDN backbone (a narrow arch,
drop-path on, so the random stream matters) on the demo COCO data, with the hooks
``tools/train.py`` adds (``RNGStateHook``) and ``ValidRegionHook`` (padded batches).
"""
import math

import pytest
import torch
from mmlinattn.datasets.demo_overrides import demo_config
from mmengine.config import Config
from mmengine.hooks import Hook

CONFIG = 'configs/retinanet_ldn_tiny_1x.py'
ITERS = 10
NUM_TRAIN = 8
ARCH = dict(embed_dims=[16, 32, 48, 64], depths=[1, 1, 2, 1], num_heads=[1, 2, 2, 2])


class _LossRecorder(Hook):
    def __init__(self):
        self.losses = []

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.losses.append(outputs['loss'].item())


@pytest.fixture
def restore_determinism():
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
             torch.backends.cudnn.deterministic)
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[1:]


def _train(root, data_root, run):
    from mmdet.utils import register_all_modules
    from mmengine.runner import Runner

    import mmlinattn.engine  # noqa: F401
    import mmlinattn.models  # noqa: F401
    register_all_modules(init_default_scope=False)
    cfg = demo_config(Config.fromfile(f'{root}/{CONFIG}'), ITERS, data_root=data_root,
                      num_train=NUM_TRAIN)
    # a narrow detector at a small scale: the runner, data and RNG paths are the real ones
    cfg.model.backbone.arch = ARCH
    cfg.model.neck.update(in_channels=ARCH['embed_dims'][1:], out_channels=32)
    cfg.model.bbox_head.update(in_channels=32, feat_channels=32, stacked_convs=1)
    for t in cfg.train_dataloader.dataset.pipeline:
        if t['type'] == 'Resize':
            t['scale'] = (160, 128)
    cfg.randomness = dict(seed=0, deterministic=True)
    cfg.train_cfg.val_interval = 1000                    # training losses only
    cfg.default_hooks.checkpoint.interval = 1000
    cfg.default_hooks.visualization = dict(type='DetVisualizationHook', draw=False)
    cfg.custom_hooks = [dict(type='mmlinattn.RNGStateHook'),
                        dict(type='mmlinattn.ValidRegionHook')]
    cfg.work_dir = f'{data_root}/run{run}'
    cfg.experiment_name = f'determinism_{run}'
    runner = Runner.from_cfg(cfg)
    recorder = _LossRecorder()
    runner.register_hook(recorder)
    runner.train()
    return recorder.losses


@pytest.mark.slow
def test_two_seeded_deterministic_runs_give_identical_losses(tmp_path, restore_determinism):
    from make_demo_data import make_demo_data
    from repo_paths import ROOT as root
    make_demo_data(str(tmp_path), num_train=NUM_TRAIN, num_val=2, layouts=['coco'],
                   logger=None)
    first = _train(root, str(tmp_path), 0)
    second = _train(root, str(tmp_path), 1)
    assert len(first) == ITERS, first
    assert all(math.isfinite(v) for v in first)
    assert len(set(first)) > 1, first             # the losses move: real training steps
    assert first == second                        # bit-identical, iteration by iteration
