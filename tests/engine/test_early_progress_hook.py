"""EarlyProgressHook: every one of the first iterations is logged exactly once, whatever the
LoggerHook interval; later ones only at the logger's interval."""
import glob
import os.path as osp
import re

import pytest
import torch
from mmengine.model import BaseModel
from mmengine.runner import Runner

import mmlinattn.engine  # noqa: F401  (registers the hook)

MAX_ITERS = 7


class Toy(BaseModel):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, x, mode='loss'):
        return dict(loss=(self.w * x).pow(2).mean())


def _logged_iters(tmp_path, logger_interval, hooks):
    runner = Runner(
        model=Toy(), work_dir=str(tmp_path),
        train_dataloader=dict(dataset=[dict(x=torch.ones(1))] * 100, batch_size=1,
                              sampler=dict(type='DefaultSampler', shuffle=False),
                              collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        train_cfg=dict(by_epoch=False, max_iters=MAX_ITERS),
        log_processor=dict(by_epoch=False),
        default_hooks=dict(logger=dict(type='LoggerHook', interval=logger_interval),
                           checkpoint=dict(type='CheckpointHook', interval=10 ** 6)),
        custom_hooks=hooks, default_scope='mmengine',
        experiment_name=f'early_progress_{tmp_path.name}')  # a logger (and file) per run
    runner.train()
    (log_file,) = glob.glob(osp.join(str(tmp_path), '*', '*.log'))
    with open(log_file) as f:
        text = f.read()
    return [int(m) for m in re.findall(rf'Iter\(train\) \[\s*(\d+)/{MAX_ITERS}\]', text)]


@pytest.mark.parametrize('interval,expected', [(50, [1, 2, 3]), (2, [1, 2, 3, 4, 6])])
def test_first_iterations_logged_once(tmp_path, interval, expected):
    hooks = [dict(type='mmlinattn.EarlyProgressHook', num_iters=3)]
    assert _logged_iters(tmp_path, interval, hooks) == expected


def test_without_hook_logger_interval_only(tmp_path):
    assert _logged_iters(tmp_path, 2, []) == [2, 4, 6]
