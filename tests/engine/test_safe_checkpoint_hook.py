"""SafeCheckpointHook: a checkpoint save that fails (here: a real file-size limit,
``RLIMIT_FSIZE``) keeps the previous checkpoint and ``last_checkpoint`` naming it, where
mmengine's ``CheckpointHook`` deletes it first and leaves a truncated file; normal runs save
what mmengine's hook saves.

The failing runs happen in one subprocess (this file run as a script): the limit applies to
every file the process writes.  Each case is run with both hooks: :func:`_problems` must
find problems with mmengine's hook (the bug this hook exists for) and none with ours.
"""
import json
import os
import os.path as osp
import signal
import sys

import pytest
import torch
from mmengine.evaluator import BaseMetric, Evaluator
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from mmengine.runner import Runner

import mmlinattn.engine  # noqa: F401  (registers the hook, installs the safe loader)
from mmlinattn.utils.checkpoint import safe_load_checkpoint

PLAIN, SAFE = 'CheckpointHook', 'mmlinattn.SafeCheckpointHook'
#: (name, max_keep_ckpts, what fails): the epoch-2 checkpoint, or the epoch-2 best one
CASES = [('keep1', 1, 'epoch'), ('keep_all', -1, 'epoch'), ('best', -1, 'best')]


class Toy(BaseModel):
    def __init__(self):
        super().__init__()
        # 64 KiB of weights: each checkpoint is mostly this tensor
        self.w = torch.nn.Parameter(torch.zeros(64, 256))

    def forward(self, x, mode='loss'):
        if mode == 'loss':
            return dict(loss=(self.w.sum() - x.sum()) ** 2)
        return [dict(x=x)]


class Rising(BaseMetric):
    """A score that improves at every evaluation, so each one saves a new best."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def process(self, data_batch, data_samples):
        self.results.append(0)

    def compute_metrics(self, results):
        self.calls += 1
        return dict(score=float(self.calls))


class LimitWritesAfter(Hook):
    """From the end of train epoch ``epoch`` (after the checkpoint hook saved it), files
    may not grow past half that epoch's checkpoint: the next checkpoint write hits the
    limit part-way, as on a full disk."""

    priority = 'LOWEST'  # after CheckpointHook (VERY_LOW)

    def __init__(self, epoch):
        self.epoch = epoch

    def after_train_epoch(self, runner):
        import resource
        if runner.epoch + 1 == self.epoch:
            size = osp.getsize(osp.join(runner.work_dir, f'epoch_{self.epoch}.pth'))
            # the soft limit only, so the next case can lift it again
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, hard))


class Loaded(Hook):
    """Records the epoch of the checkpoint a run resumed from."""

    epoch = None

    def after_load_checkpoint(self, runner, checkpoint):
        self.epoch = checkpoint['meta']['epoch']


def _runner(work_dir, hook, max_keep, epochs, save_best=False, custom_hooks=(), **kwargs):
    checkpoint = dict(type=hook, interval=1, max_keep_ckpts=max_keep)
    val = {}
    if save_best:
        checkpoint.update(save_best='score', rule='greater')
        val = dict(val_dataloader=dict(dataset=[dict(x=torch.ones(1))] * 2, batch_size=2,
                                       sampler=dict(type='DefaultSampler', shuffle=False),
                                       collate_fn=dict(type='default_collate')),
                   val_evaluator=Evaluator(Rising()), val_cfg=dict())
    return Runner(
        model=Toy(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=[dict(x=torch.ones(1))] * 4, batch_size=2,
                              sampler=dict(type='DefaultSampler', shuffle=False),
                              collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=1e-4)),
        train_cfg=dict(by_epoch=True, max_epochs=epochs, val_interval=1),
        default_hooks=dict(checkpoint=checkpoint, logger=dict(type='LoggerHook', interval=50)),
        custom_hooks=list(custom_hooks), default_scope='mmengine',
        # a logger and message hub per run: mmengine keeps them by this name
        experiment_name=f'safe_ckpt_{str(work_dir).replace(os.sep, "_")}_{"_".join(kwargs)}',
        **val, **kwargs)


def _failing_runs(root):
    """Every case with both hooks, writes limited from epoch 1 (``epoch`` cases) or
    epoch 2 (``best``: epoch_2.pth is saved, its best checkpoint is not) on: the error
    each run ended with, in ``root/results.json``."""
    import resource
    import traceback
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write raises EFBIG instead
    initial = resource.getrlimit(resource.RLIMIT_FSIZE)
    results = {}
    for name, max_keep, fails in CASES:
        for hook in (PLAIN, SAFE):
            work_dir = osp.join(root, f'{name}-{hook.split(".")[-1]}')
            limit = LimitWritesAfter(1 if fails == 'epoch' else 2)
            runner = _runner(work_dir, hook, max_keep, 2, save_best=fails == 'best',
                             custom_hooks=[limit])
            try:
                runner.train()
                error = None
            except Exception as err:  # what Python would print, notes included
                error = ''.join(traceback.format_exception(type(err), err, err.__traceback__))
            finally:
                resource.setrlimit(resource.RLIMIT_FSIZE, initial)
            results[f'{name}-{hook}'] = dict(work_dir=work_dir, error=error)
    with open(osp.join(root, 'results.json'), 'w') as f:
        json.dump(results, f)


@pytest.fixture(scope='module')
def failing_runs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('failing'))
    from tool_runs import tool
    # forked from the suite's warm interpreter; one thread is plenty for the toy model
    proc = tool([sys.executable, __file__, root], env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    with open(osp.join(root, 'results.json')) as f:
        return json.load(f)


def _files(work_dir):
    """The files of ``work_dir`` but the runner's config dump (``<timestamp>.py``)."""
    return sorted(f for f in os.listdir(work_dir)
                  if osp.isfile(osp.join(work_dir, f)) and not f.endswith('.py'))


def _loads(path):
    try:
        safe_load_checkpoint(path)
        return True
    except Exception:
        return False


def _problems(work_dir, error, fails):
    """What a failed epoch-2 save must not leave behind."""
    problems = []
    keep = 'best_score_epoch_1.pth' if fails == 'best' else 'epoch_1.pth'
    lost = 'best_score_epoch_2.pth' if fails == 'best' else 'epoch_2.pth'
    if not _loads(osp.join(work_dir, keep)):
        problems.append(f'previous checkpoint {keep} is gone or unreadable')
    with open(osp.join(work_dir, 'last_checkpoint')) as f:
        last = f.read()
    if not _loads(last):
        problems.append(f'last_checkpoint names {last}, which is missing or unreadable')
    left = [f for f in _files(work_dir) if f == lost or f.startswith('.')]
    if left:
        problems.append(f'the failed save left {left}')
    if error is None or 'File too large' not in error:
        problems.append(f'the run did not end with the write error: {error}')
    elif not any(osp.join(work_dir, lost) in line and keep in line and 'intact' in line
                 for line in error.splitlines()):
        problems.append('the error does not name the failed file and the intact one')
    return problems


@pytest.mark.skipif(not hasattr(signal, 'SIGXFSZ'), reason='POSIX file-size limits')
@pytest.mark.parametrize('hook', [PLAIN, SAFE])
@pytest.mark.parametrize('name,max_keep,fails', CASES)
def test_failed_save_keeps_previous_checkpoint(failing_runs, name, max_keep, fails, hook):
    run = failing_runs[f'{name}-{hook}']
    problems = _problems(run['work_dir'], run['error'], fails)
    if hook == PLAIN:  # mmengine's hook: the bug is there
        assert problems, 'mmengine\'s CheckpointHook survived the failed save'
        if max_keep == 1 or fails == 'best':  # it deleted the previous one first
            assert any('is gone' in p for p in problems), problems
        return
    assert problems == []
    expected = {'keep1': ['epoch_1.pth', 'last_checkpoint'],
                'keep_all': ['epoch_1.pth', 'last_checkpoint'],
                'best': ['best_score_epoch_1.pth', 'epoch_1.pth', 'epoch_2.pth',
                         'last_checkpoint']}[name]
    assert _files(run['work_dir']) == expected
    if fails == 'best':  # what a resume from epoch_2.pth takes as the best: still there
        hub = safe_load_checkpoint(osp.join(run['work_dir'], 'epoch_2.pth'))['message_hub']
        assert osp.isfile(hub['runtime_info']['best_ckpt'])
    else:  # --resume (mmengine's resume=True, no path) picks epoch 1 up and saves epoch 2
        loaded = Loaded()
        runner = _runner(run['work_dir'], SAFE, max_keep, 2, custom_hooks=[loaded],
                         resume=True)
        runner.train()
        assert (loaded.epoch, runner.epoch) == (1, 2)
        assert _files(run['work_dir']) == (['epoch_2.pth', 'last_checkpoint'] if max_keep == 1
                                           else ['epoch_1.pth', 'epoch_2.pth',
                                                 'last_checkpoint'])


def _saved(work_dir):
    """The files a run left, last_checkpoint's content and each checkpoint's bookkeeping,
    with paths relative to ``work_dir``."""
    def rel(value):
        return osp.relpath(value, work_dir) if isinstance(value, str) else value
    with open(osp.join(work_dir, 'last_checkpoint')) as f:
        saved = dict(files=_files(work_dir), last_checkpoint=rel(f.read()))
    for name in saved['files']:
        if name.endswith('.pth'):
            ckpt = safe_load_checkpoint(osp.join(work_dir, name))
            info = ckpt['message_hub']['runtime_info']
            saved[name] = dict(keys=sorted(ckpt), epoch=ckpt['meta']['epoch'],
                               **{k: rel(info.get(k)) for k in
                                  ('last_ckpt', 'keep_ckpt_ids', 'best_ckpt')})
    return saved


@pytest.mark.parametrize('max_keep,save_best', [(1, False), (-1, True)])
def test_normal_run_saves_what_mmengine_saves(tmp_path, max_keep, save_best):
    saved = {}
    for hook in (PLAIN, SAFE):
        work_dir = tmp_path / hook.split('.')[-1]
        _runner(work_dir, hook, max_keep, 3, save_best=save_best).train()
        saved[hook] = _saved(str(work_dir))
    assert saved[SAFE] == saved[PLAIN]
    files = saved[SAFE]['files']
    assert saved[SAFE]['last_checkpoint'] == 'epoch_3.pth'
    if max_keep == 1:
        assert files == ['epoch_3.pth', 'last_checkpoint']
    else:  # one best checkpoint, the latest
        assert files == ['best_score_epoch_3.pth', 'epoch_1.pth', 'epoch_2.pth',
                         'epoch_3.pth', 'last_checkpoint']


def test_replace_with_keeps_the_file_on_error(tmp_path):
    """How ``last_checkpoint`` is written too: a write that fails half-way changes nothing."""
    from mmlinattn.engine.safe_checkpoint_hook import replace_with
    path = tmp_path / 'last_checkpoint'
    path.write_text('old')

    def fail(partial):
        with open(partial, 'w') as f:
            f.write('ne')
        raise OSError(28, 'No space left on device')
    with pytest.raises(OSError, match='No space'):
        replace_with(str(path), fail)
    assert os.listdir(tmp_path) == ['last_checkpoint'] and path.read_text() == 'old'

    def write(partial):
        with open(partial, 'w') as f:
            f.write('new')
    replace_with(str(path), write)
    assert os.listdir(tmp_path) == ['last_checkpoint'] and path.read_text() == 'new'


@pytest.mark.parametrize('config', ['retinanet_soft_tiny_1x.py',
                                    'semfpn_soft_tiny_ade20k_40k.py'])
def test_configs_build_the_safe_hook(config):
    """mmdet's and mmseg's ``default_hooks.checkpoint`` (with the configs' intervals)
    become the safe hook in the configs' scope, as tools/train.py builds them."""
    from mmengine.config import Config
    from mmengine.registry import HOOKS, DefaultScope

    from mmlinattn.engine import SafeCheckpointHook
    from mmlinattn.engine.runner import use_safe_checkpoint_hook
    from repo_paths import ROOT
    cfg = Config.fromfile(osp.join(ROOT, 'configs', config))
    before = dict(cfg.default_hooks.checkpoint)
    use_safe_checkpoint_hook(cfg)
    after = dict(cfg.default_hooks.checkpoint)
    assert after == dict(before, type=SAFE)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        hook = HOOKS.build(after)
    assert type(hook) is SafeCheckpointHook
    assert (hook.interval, hook.by_epoch) == (before['interval'],
                                              before.get('by_epoch', True))


def test_other_checkpoint_hooks_are_kept():
    from mmengine.config import Config

    from mmlinattn.engine.runner import use_safe_checkpoint_hook
    for hook in ('MyCheckpointHook', SAFE):
        cfg = Config(dict(default_hooks=dict(checkpoint=dict(type=hook, interval=2))))
        use_safe_checkpoint_hook(cfg)
        assert cfg.default_hooks.checkpoint.type == hook
    use_safe_checkpoint_hook(Config(dict()))  # no default_hooks: nothing to do


if __name__ == '__main__':
    _failing_runs(sys.argv[1])
