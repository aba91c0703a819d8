"""Short demo runs learn: the LR schedule that ``tools/misc/demo_overrides.py`` shrinks still
reaches the base learning rate, checked by stepping mmengine's real schedulers as
``ParamSchedulerHook`` does in an iteration-based run."""
import logging
import os
import os.path as osp

import pytest
import mmengine.optim  # noqa: F401  (registers the LR schedulers)
import torch
from mmengine.config import Config
from mmengine.registry import PARAM_SCHEDULERS

from mmlinattn.datasets.demo_overrides import demo_config, rescale_schedule
from repo_paths import ROOT

UPERNET = sorted(f for f in os.listdir(osp.join(ROOT, 'configs')) if f.startswith('upernet_'))
SWIN_SCHEDULE = [  # mmseg's Swin / UperNet recipe, as a user config inherits it
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False),
]


def lr_per_iter(schedulers, iters: int, base_lr: float = 1.0):
    """The LR each of ``iters`` training iterations runs with."""
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=base_lr)
    built = [PARAM_SCHEDULERS.build(dict(s, optimizer=opt)) for s in schedulers]
    lrs = []
    for _ in range(iters):
        lrs.append(opt.param_groups[0]['lr'])
        opt.step()
        for s in built:
            s.step()
    return lrs


def test_swin_schedule_shrunk_to_20_iters_reaches_base_lr():
    scheds = [dict(s) for s in SWIN_SCHEDULE]
    rescale_schedule(scheds, 160000, 20, by_epoch_loop=False)
    lrs = lr_per_iter(scheds, 20)
    assert max(lrs) == pytest.approx(1.0, rel=1e-6)
    assert lrs[-1] < 0.2  # and PolyLR still decays it


@pytest.mark.parametrize('name', UPERNET)
def test_upernet_demo_run_of_20_iters_reaches_base_lr(name):
    cfg = Config.fromfile(osp.join(ROOT, 'configs', name))
    demo = demo_config(cfg, iters=20, data_root='/nonexistent')
    base = demo.optim_wrapper.optimizer.lr
    lrs = lr_per_iter(demo.param_scheduler, demo.train_cfg.max_iters, base)
    assert max(lrs) == pytest.approx(base, rel=1e-6), (
        f'{name}: the LR peaks at {max(lrs):.3g}, base {base:.3g}')
    assert lrs[-1] < 0.5 * base


@pytest.mark.parametrize('iters', [2, 5, 20, 400, 4000])
def test_warmup_and_decay_stay_chained(iters):
    """The decay starts where the warm-up ends, at every run length, and mmengine accepts
    the schedulers (it refuses end <= begin, which a 2-iteration run once produced)."""
    scheds = [dict(s) for s in SWIN_SCHEDULE]
    rescale_schedule(scheds, 160000, iters, by_epoch_loop=False)
    assert scheds[0]['end'] - scheds[0]['begin'] >= 2
    assert scheds[1]['begin'] == scheds[0]['end']
    assert len(lr_per_iter(scheds, iters)) == iters



class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_train_tool_warns_about_a_one_step_warmup():
    from mmengine.logging import MMLogger
    from mmlinattn.engine.runner import warn_stuck_warmup
    logger = MMLogger.get_instance('test_demo_schedule')  # becomes the current logger
    records = _Records()
    logger.addHandler(records)
    try:
        warn_stuck_warmup(Config(dict(param_scheduler=[dict(SWIN_SCHEDULE[0], end=1)])))
        assert any('start_factor' in m for m in records.messages)
        records.messages.clear()
        warn_stuck_warmup(Config(dict(param_scheduler=[dict(SWIN_SCHEDULE[0], end=2)])))
        assert not records.messages
    finally:
        logger.removeHandler(records)
