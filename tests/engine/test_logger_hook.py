"""A two-process (gloo) test run of a real mmengine ``Runner``.  mmengine 0.10's own
``LoggerHook`` writes the test-metrics JSON from every rank at once (a race that once left CI a
JSON line with rank 1's trailing characters); with :class:`RankZeroLoggerHook` only rank 0
writes it, once, and the file holds the metric gathered from both ranks.
``tools/test.py --launcher pytorch`` switches to it."""
import gc
import json
import os
import os.path as osp
import sys

import pytest
import torch
import torch.multiprocessing as mp
from mmengine.config import Config

from dist_helpers import free_port
from mmlinattn.engine.runner import rank_zero_logger

WORLD = 2
VALUES = [float(v) for v in range(8)]


def _worker(rank, port, work_dir, hook_type, record_dir):
    import torch.distributed as dist
    import mmengine.hooks.logger_hook as logger_hook
    from mmengine.evaluator import BaseMetric
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    import mmlinattn.engine  # noqa: F401  (registers RankZeroLoggerHook)

    class Echo(BaseModel):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(()))

        def forward(self, value, mode='predict'):
            return [float(self.scale) * v for v in value]

    class Mean(BaseMetric):
        def process(self, data_batch, data_samples):
            self.results.extend(data_samples)

        def compute_metrics(self, results):
            return {'mean': sum(results) / len(results), 'count': float(len(results))}

    real_dump = logger_hook.dump

    def recording_dump(obj, file=None, **kwargs):
        with open(osp.join(record_dir, f'rank{rank}'), 'a') as f:
            f.write(f'{file}\n')
        return real_dump(obj, file, **kwargs)

    logger_hook.dump = recording_dump
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank))
    dist.init_process_group('gloo', rank=rank, world_size=WORLD)
    try:
        runner = Runner(
            model=Echo(), work_dir=work_dir, launcher='pytorch',
            cfg=dict(model_wrapper_cfg=dict(type='MMDistributedDataParallel', device_ids=None)),
            test_dataloader=dict(dataset=[dict(value=v) for v in VALUES], batch_size=2,
                                 sampler=dict(type='DefaultSampler', shuffle=False)),
            test_evaluator=Mean(), test_cfg=dict(),
            default_hooks=dict(logger=dict(type=hook_type)))
        runner.test()
        # the runner's DDP wrapper holds the group: gloo's threads must stop before the
        # interpreter tears down, or exit can abort (as in mmlinattn/engine/runner.py)
        del runner
        gc.collect()
    finally:
        dist.destroy_process_group()


def _dist_test(tmp_path, hook_type):
    work_dir, record_dir = tmp_path / 'work', tmp_path / 'dumps'
    record_dir.mkdir()
    mp.spawn(_worker, args=(free_port(), str(work_dir), hook_type, str(record_dir)),
             nprocs=WORLD, join=True)
    dumps = {p: open(record_dir / p).read().split() for p in sorted(os.listdir(record_dir))}
    return work_dir, dumps


@pytest.mark.skipif(sys.platform != 'linux', reason='gloo process group on Linux')
def test_rank_zero_logger_hook_dumps_once(tmp_path):
    work_dir, dumps = _dist_test(tmp_path, 'mmlinattn.RankZeroLoggerHook')
    assert list(dumps) == ['rank0'] and len(dumps['rank0']) == 1
    path = dumps['rank0'][0]
    assert osp.dirname(osp.dirname(path)) == str(work_dir)
    with open(path) as f:
        record = json.load(f)
    assert record['mean'] == pytest.approx(sum(VALUES) / len(VALUES))  # rank 0 alone: 3.0
    assert record['count'] == len(VALUES)  # both ranks' halves gathered


def test_test_tool_switches_to_rank_zero_logger_hook():
    cfg = Config(dict(default_hooks=dict(logger=dict(type='LoggerHook', interval=5))))
    rank_zero_logger(cfg)
    assert cfg.default_hooks.logger == dict(type='mmlinattn.RankZeroLoggerHook', interval=5)
    custom = Config(dict(default_hooks=dict(logger=dict(type='MyLoggerHook'))))
    rank_zero_logger(custom)
    assert custom.default_hooks.logger.type == 'MyLoggerHook'  # a user's own hook is kept
