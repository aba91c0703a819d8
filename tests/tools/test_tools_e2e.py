"""End-to-end runs of the real command-line tools on the demo datasets.

Every run goes through ``tools/train.py`` / ``tools/test.py`` / ``tools/dist_train.sh`` in a
subprocess, exactly as a user types them, with the demo overrides of
``tools/misc/demo_overrides.py`` (:mod:`mmlinattn.datasets.demo_overrides`).
"""
import glob
import json
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config

from dist_helpers import free_port
from tool_runs import last_metrics, run, tool as tool_process
from train_runs import check_image_demo

from mmlinattn.datasets.demo_overrides import cfg_option_words, demo_options
from mmlinattn.utils.checkpoint import safe_load_checkpoint  # mmengine's HistoryBuffer allowed
from repo_paths import ROOT

NUM_TRAIN = 8  # batch 4 -> 2 iterations per epoch
# Detection images at half the demo's 320 x 320: nothing these runs check depends on the
# size, and a step costs a third.
DET_SCALE = (160, 160)

pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def demo_root(tmp_path_factory):
    from make_demo_data import make_demo_data
    root = str(tmp_path_factory.mktemp('demo'))
    make_demo_data(root, num_train=NUM_TRAIN, num_val=2, logger=None)
    return root


def cfg_options(config, demo_root, iters=2, extra=None, num_train=NUM_TRAIN):
    opts = demo_options(Config.fromfile(osp.join(ROOT, config)), iters, data_root=demo_root,
                        num_train=num_train, det_scale=DET_SCALE)
    opts.update(extra or {})
    return cfg_option_words(opts)


def train(config, work_dir, opts, *extra):
    return run([sys.executable, 'tools/train.py', config, '--work-dir', str(work_dir),
                *extra, '--cfg-options', *opts])


# The segmentation head layouts after two iterations (no learning expected); the detection
# ones (RetinaNet, Mask R-CNN), and Semantic FPN, train until they detect and segment held-out
# photographs in tests/tools/test_learns_on_photos.py, which draws their checkpoints the
# same way. UperNet at the photo config's width on the nut photos (its pyramid pooling and
# auxiliary head are the layout; the tiny config's 512-channel head made this run 3x longer).
CASES = [
    ('configs/photos/upernet_ldn_pico_nuts.py', 'mIoU', {}),
    ('configs/semfpn_ldn_tiny_ade20k_40k.py', 'mIoU', {}),
]


@pytest.mark.parametrize('config,metric,extra', CASES,
                         ids=[osp.basename(c[0]) for c in CASES])
def test_tools_run_every_head_layout(config, metric, extra, demo_root, tmp_path):
    """Plumbing of the segmentation head layouts (two iterations): train, test with the
    real metric, draw with the checkpoint."""
    opts = cfg_options(config, demo_root, extra=extra)
    train(config, tmp_path / 'train', opts)
    with open(tmp_path / 'train' / 'last_checkpoint') as f:
        ckpt = f.read().strip()
    assert osp.isfile(ckpt)
    run([sys.executable, 'tools/test.py', config, ckpt, '--work-dir', str(tmp_path / 'test'),
         '--cfg-options', *opts])
    metrics = last_metrics(tmp_path / 'test')
    assert metric in metrics, metrics
    assert 0.0 <= metrics[metric] <= 100.0
    check_image_demo(tmp_path / 'train' / osp.basename(config), ckpt, tmp_path / 'inference',
                     snippet='upernet' in config)


def _gloo_threads_at_exit(stderr):
    """Per worker rank, the gloo threads still running when the interpreter finalizes."""
    reports = re.findall(r'\[threads-at-exit rank=(\d+)\] (.*)', stderr)
    assert sorted(rank for rank, _ in reports) == ['0', '1'], stderr[-3000:]
    return {rank: [n for n in names.split() if 'gloo' in n] for rank, names in reports}


def test_dist_train_gloo_two_processes(demo_root, tmp_path):
    # the README demo's pico detector: the launch, gloo and the sharded evaluation are the
    # point, not the widths
    config = 'configs/demo/retinanet_soft_pico_demo.py'
    # frozen_stages: DDP must not wait for gradients of frozen parameters; that
    # fails at a rank's second iteration, so two epochs of one iteration per rank
    opts = cfg_options(config, demo_root, extra={'model.test_cfg.score_thr': 0.0,
                                                 'model.backbone.frozen_stages': 0,
                                                 'train_cfg.max_epochs': 2})
    # tests/exit_threads makes every process list its threads at exit: the tools must have
    # stopped gloo's threads (left to finalization, they abort 1 run in 12-24 under load).
    env = dict(os.environ, PYTHON=sys.executable, PORT=str(free_port()), OMP_NUM_THREADS='1',
               PYTHONPATH=os.pathsep.join(filter(None, [osp.join(ROOT, 'tests', 'exit_threads'),
                                                        os.environ.get('PYTHONPATH')])))
    proc = subprocess.run(['bash', 'tools/dist_train.sh', config, '2', '--work-dir',
                           str(tmp_path), '--cfg-options', *opts], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert _gloo_threads_at_exit(proc.stderr) == {'0': [], '1': []}
    log = ''.join(open(p).read() for p in glob.glob(str(tmp_path / '*' / '*.log')))
    assert 'Distributed training: True' in log
    assert "'world_size': 2" in log or 'world_size: 2' in log or 'GPU number: 2' in log \
        or 'distributed' in log.lower()
    assert osp.isfile(tmp_path / 'epoch_1.pth')

    # the same checkpoint evaluated by 2 processes through tools/dist_test.sh
    env['PORT'] = str(free_port())
    test_dir = tmp_path / 'dist_test'
    proc = subprocess.run(['bash', 'tools/dist_test.sh', config, str(tmp_path / 'epoch_1.pth'),
                           '2', '--work-dir', str(test_dir), '--cfg-options', *opts], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert _gloo_threads_at_exit(proc.stderr) == {'0': [], '1': []}
    assert 'coco/bbox_mAP' in last_metrics(test_dir)


@pytest.mark.parametrize('script, nargs', [('dist_train.sh', 2), ('dist_test.sh', 3)])
def test_dist_scripts_print_usage_without_arguments(script, nargs):
    proc = subprocess.run(['bash', f'tools/{script}'], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith(f'usage: bash tools/{script} CONFIG')


def _losses(work_dir):
    out = {}
    for path in glob.glob(osp.join(str(work_dir), '*', 'vis_data', 'scalars.json')):
        for line in open(path):
            rec = json.loads(line)
            if 'loss' in rec and 'iter' in rec:
                out[rec['iter']] = rec['loss']
    return out


@pytest.mark.parametrize('seed', [0, None])
def test_resume_matches_uninterrupted_run(seed, demo_root, tmp_path):
    """Stop after epoch 1 (2 iterations), resume to epoch 2: same weights and losses as
    training 2 epochs straight with the same seed.  Flip is disabled so the data are
    deterministic.  Without ``randomness.seed`` (mmdet's runtime sets none) the interrupted
    run draws one; the uninterrupted reference run is given that seed.  The README demo's
    pico detector: a training step of the tiny config's 256-channel head costs 3-4 times
    as much, and nothing of resuming depends on the widths."""
    config = 'configs/demo/retinanet_soft_pico_demo.py'
    no_flip = {'train_dataloader.dataset.pipeline.3.prob': 0.0,
               'default_hooks.logger.interval': 1, 'default_hooks.checkpoint.interval': 1}
    opts = cfg_options(config, demo_root, iters=4, extra=no_flip)
    seeded = opts + ([f'randomness.seed={seed}'] if seed is not None else [])
    train(config, tmp_path / 'part', seeded + ['train_cfg.max_epochs=1'])
    assert osp.isfile(tmp_path / 'part' / 'epoch_1.pth')
    assert not osp.isfile(tmp_path / 'part' / 'epoch_2.pth')
    drawn = safe_load_checkpoint(tmp_path / 'part' / 'epoch_1.pth')['meta']['seed']
    train(config, tmp_path / 'full', opts + [f'randomness.seed={drawn}'])
    train(config, tmp_path / 'part', seeded, '--resume', str(tmp_path / 'part' / 'epoch_1.pth'))

    full = safe_load_checkpoint(tmp_path / 'full' / 'epoch_2.pth')['state_dict']
    resumed = safe_load_checkpoint(tmp_path / 'part' / 'epoch_2.pth')['state_dict']
    assert full.keys() == resumed.keys()
    for k in full:
        torch.testing.assert_close(resumed[k], full[k], rtol=0, atol=0, msg=k)
    lf, lr = _losses(tmp_path / 'full'), _losses(tmp_path / 'part')
    assert set(lf) == {1, 2, 3, 4} and set(lr) == {1, 2, 3, 4}
    assert lf == lr


@pytest.mark.parametrize('case', ['unrelated_keys', 'other_arch'])
def test_test_py_refuses_checkpoint_that_does_not_fit(case, demo_root, tmp_path):
    """tools/test.py stops (exit 1, match report) instead of evaluating random weights;
    --allow-partial evaluates anyway."""
    from archs import build
    config = 'configs/retinanet_soft_tiny_1x.py'
    if case == 'unrelated_keys':
        sd = {'encoder.layer1.weight': torch.zeros(8, 3), 'head.fc.weight': torch.zeros(2, 8)}
    else:  # the backbone of a detector with other widths (the config's is SOFT-tiny)
        sd = {f'backbone.{k}': v for k, v in build('SOFT').state_dict().items()}
    ckpt = tmp_path / f'{case}.pth'
    torch.save({'state_dict': sd, 'meta': {}}, ckpt)
    args = [sys.executable, 'tools/test.py', config, str(ckpt), '--work-dir',
            str(tmp_path / 'test')]
    opts = ['--cfg-options', *cfg_options(config, demo_root)]
    proc = tool_process(args + opts)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'CheckpointMismatchError' in proc.stderr and 'filled only' in proc.stderr
    assert '--allow-partial' in proc.stderr and 'Traceback' not in proc.stderr
    assert (('other shapes' in proc.stderr) if case == 'other_arch'
            else ('holds no detector / segmentor keys' in proc.stderr)), proc.stderr
    if case == 'unrelated_keys':
        run(args + ['--allow-partial'] + opts)
        assert 'coco/bbox_mAP' in last_metrics(tmp_path / 'test')


def test_train_py_checks_load_from_and_resume_files(demo_root, tmp_path):
    """tools/train.py: a ``load_from`` checkpoint that fills under half of the model stops
    the run (exit 1, match report, ``--allow-partial`` named) instead of training from
    scratch, while a fine-tune file (another class count) passes the check; ``--resume``
    from a weights-only file says to use ``load_from``."""
    from archs import build

    from mmlinattn.engine.runner import build_config_model
    config = 'configs/demo/retinanet_soft_pico_demo.py'
    words = cfg_options(config, demo_root)
    other = tmp_path / 'other_arch.pth'  # a detector with other backbone and head widths
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in build('SOFT').state_dict()
                               .items()}, 'meta': {}}, other)
    proc = tool_process([sys.executable, 'tools/train.py', config, '--work-dir',
                         str(tmp_path / 'other'), '--cfg-options', *words,
                         f'load_from={other}'])
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'CheckpointMismatchError' in proc.stderr and 'filled only' in proc.stderr
    assert 'train from a checkpoint that fills less than half' in proc.stderr
    assert '--allow-partial' in proc.stderr and 'Traceback' not in proc.stderr
    assert not glob.glob(str(tmp_path / 'other' / '*.pth'))

    # a fine-tune: the same detector with more classes (its classifier does not fit)
    # passes the same check tools/train.py adds (in-process: the run is the one above)
    from mmengine.config import ConfigDict

    from mmlinattn.engine.runner import FINETUNE_MIN_MATCH, check_load_from
    from mmlinattn.utils.checkpoint import check_model_checkpoint
    model, _ = build_config_model(osp.join(ROOT, config))
    sd = {k: (torch.zeros(v.shape[0] + 9, *v.shape[1:]) if 'retina_cls' in k else v)
          for k, v in model.state_dict().items()}
    report = check_model_checkpoint(model, {'state_dict': sd}, 'finetune.pth',
                                    FINETUNE_MIN_MATCH)
    assert 0.9 < report['fraction'] < 1.0 and len(report['shape_mismatch']) == 2, report
    cfg = ConfigDict(load_from='finetune.pth')
    check_load_from(cfg)
    assert [h['min_match'] for h in cfg.custom_hooks] == [FINETUNE_MIN_MATCH]
    weights = tmp_path / 'finetune.pth'
    torch.save({'state_dict': sd}, weights)

    # --resume needs training state; the weights-only file names load_from instead
    proc = tool_process([sys.executable, 'tools/train.py', config, '--work-dir',
                         str(tmp_path / 'resume'), '--resume', str(weights),
                         '--cfg-options', *words])
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'holds weights but no training state' in proc.stderr, proc.stderr[-3000:]
    assert f'load_from={weights}' in proc.stderr and 'Traceback' not in proc.stderr


def test_missing_dataset_message(tmp_path):
    proc = tool_process([sys.executable, 'tools/train.py', 'configs/retinanet_soft_tiny_1x.py',
                         '--work-dir', str(tmp_path), '--cfg-options',
                         f'train_dataloader.dataset.data_root={tmp_path}/nope/',
                         f'val_dataloader.dataset.data_root={tmp_path}/nope/'])
    assert proc.returncode != 0
    assert 'annotations/instances_train2017.json' in proc.stderr
    assert 'make_demo_data.py' in proc.stderr
    assert 'Traceback' not in proc.stderr
