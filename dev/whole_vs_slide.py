"""Whole-image against sliding-window inference on real photos, same weights (issue 74, target 4).

For each family the nut photos' Semantic FPN config (``configs/photos/semfpn_{family}_pico_nuts.py``:
pico backbone, 256x256 training crop, 400 iterations from scratch) is trained once (seed 0) and
its checkpoint is evaluated on the 4 val photos (512x384, the largest copies the project ships;
the val pipeline's resize to (512, 384) leaves them as they are) by mmseg's own test loop and
``IoUMetric``, three ways:

* ``whole``: mmseg's ``EncoderDecoder`` in whole mode (the configs' default);
* ``slide``: mmseg's ``EncoderDecoder``, ``mode='slide'`` with the training crop, 256x256 tiles at
  stride 171 (2 x 3 tiles per photo);
* ``whole_image``: ``model.type='mmlinattn.WholeImageEncoderDecoder'`` with the striped neck and
  head (``mmlinattn.StripedFPN``, ``mmlinattn.StripedFPNHead``) in whole mode (its default
  stripes and class chunks).

Every training and evaluation is a child process under the shared lock (``--lock``), one at a
time.  The time per image is the model's ``test_step`` (preprocessing + inference), measured per
photo after one untimed warm-up pass over the first photo.

    python dev/whole_vs_slide.py --lock /tmp/mmlinattn-cpu.lock \\
        --out records/whole_image/whole_vs_slide_nuts_zen4.json
"""
import argparse
import fcntl
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import time
from contextlib import contextmanager

from mmlinattn.utils.machine import cpu_name

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
FAMILIES = ('soft', 'nalaformer', 'infvit', 'ldn')
CONFIG = 'configs/photos/semfpn_{family}_pico_nuts.py'
CROP, STRIDE = (256, 256), (171, 171)
MODES = {
    'whole': dict(test_cfg=dict(mode='whole')),
    'slide': dict(test_cfg=dict(mode='slide', crop_size=CROP, stride=STRIDE)),
    'whole_image': dict(type='mmlinattn.WholeImageEncoderDecoder',
                        neck=dict(type='mmlinattn.StripedFPN'),
                        decode_head=dict(type='mmlinattn.StripedFPNHead'),
                        test_cfg=dict(mode='whole')),
}
VAL_IMAGES = 'data/photos/nuts/images/val'


@contextmanager
def locked(path):
    """Hold the shared lock (flock(2), as flock(1) takes it) around one child, so that the
    times below exclude the wait for it."""
    if not path:
        yield
        return
    with open(path, 'a') as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_child(cmd, lock, timeout, **kwargs):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    with locked(lock):
        start = time.time()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, **kwargs)
        return proc, time.time() - start


def train(family, work_dir, lock, timeout):
    """Train the family's config once; the checkpoint path and the wall time."""
    cmd = [sys.executable, 'tools/train.py', CONFIG.format(family=family), '--work-dir',
           osp.relpath(work_dir, ROOT), '--cfg-options', 'randomness.seed=0']
    with open(osp.join(work_dir, 'train_stdout.log'), 'w') as log:
        proc, wall = run_child(cmd, lock, timeout, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f'{family}: training failed, see {work_dir}/train_stdout.log')
    with open(osp.join(work_dir, 'last_checkpoint')) as f:
        return f.read().strip(), wall, ' '.join(cmd[1:])


def evaluate(family, mode, checkpoint, lock, timeout):
    """One evaluation in a child process (this file with ``--child``)."""
    cmd = [sys.executable, osp.abspath(__file__), '--child', family, mode, checkpoint]
    proc, _ = run_child(cmd, lock, timeout, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f'{family} {mode}: evaluation failed\n{proc.stderr[-3000:]}')
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child(family, mode, checkpoint):
    """Run mmseg's test loop on the checkpoint; print one JSON line."""
    import math
    import tempfile

    import torch
    from mmengine.config import Config
    from mmengine.runner import Runner
    from mmseg.evaluation.metrics import IoUMetric

    # IoUMetric returns aAcc, mIoU, mAcc and logs the per-class table; keep the per-class IoU
    # it computes from the same summed areas.
    per_class = {}
    compute = IoUMetric.compute_metrics

    def compute_and_keep(self, results):
        out = compute(self, results)
        areas = [sum(r[i] for r in results) for i in range(4)]
        ret = self.total_area_to_metrics(*areas, ['mIoU'], self.nan_to_num, self.beta)
        names = self.dataset_meta['classes']
        per_class.update({n: None if math.isnan(float(v)) else round(float(v) * 100, 2)
                          for n, v in zip(names, ret['IoU'])})
        return out

    IoUMetric.compute_metrics = compute_and_keep

    cfg = Config.fromfile(osp.join(ROOT, CONFIG.format(family=family)))
    cfg.merge_from_dict(dict(model=MODES[mode]))  # the neck's and head's other keys kept
    cfg.load_from = checkpoint
    cfg.work_dir = tempfile.mkdtemp(prefix='whole_vs_slide_')
    cfg.log_level = 'WARNING'
    runner = Runner.from_cfg(cfg)
    model = runner.model
    seconds = []
    test_step = model.test_step
    warm = []

    def timed_test_step(data):
        if not warm:  # one untimed pass: first-call costs are not inference time
            warm.append(True)
            test_step(data)
        start = time.perf_counter()
        out = test_step(data)
        seconds.append(time.perf_counter() - start)
        return out

    model.test_step = timed_test_step
    metrics = runner.test()
    print(json.dumps(dict(
        mIoU=round(float(metrics['mIoU']), 2), aAcc=round(float(metrics['aAcc']), 2),
        mAcc=round(float(metrics['mAcc']), 2), IoU=per_class, images=len(seconds),
        s_per_image=[round(s, 4) for s in seconds],
        mean_s_per_image=round(sum(seconds) / len(seconds), 4),
        threads=torch.get_num_threads(), test_cfg=dict(cfg.model.test_cfg),
        model_type=cfg.model.type)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--child', nargs=3, metavar=('FAMILY', 'MODE', 'CHECKPOINT'),
                        help=argparse.SUPPRESS)
    parser.add_argument('--families', nargs='+', default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument('--lock', default='', help='flock file around each child')
    parser.add_argument('--work-dir', default='work_dirs/whole_vs_slide')
    parser.add_argument('--reuse', action='store_true',
                        help='evaluate an existing checkpoint instead of training again')
    parser.add_argument('--train-timeout', type=float, default=1800)
    parser.add_argument('--out', default=osp.join(ROOT, 'records', 'whole_image',
                                                  'whole_vs_slide_nuts_zen4.json'))
    args = parser.parse_args()
    if args.child:
        return child(*args.child)

    photos = sorted(osp.basename(p) for p in glob.glob(osp.join(ROOT, VAL_IMAGES, '*.jpg')))
    record = dict(meta=dict(
        machine=cpu_name(), date=time.strftime('%Y-%m-%d'),
        command='python dev/whole_vs_slide.py ' + ' '.join(sys.argv[1:]),
        photos=dict(folder=VAL_IMAGES, names=photos, size_wh=[512, 384],
                    note='the largest copies the project ships (data/photos/README.md: long '
                         'side at most 512); evaluated at that size'),
        training='configs/photos/semfpn_{family}_pico_nuts.py as shipped: 400 iterations, '
                 '256x256 crops, from scratch, randomness.seed=0',
        modes={m: MODES[m] for m in MODES},
        time='model.test_step per photo (preprocess + inference), batch 1, float32, after '
             'one untimed warm-up pass'), families={})
    for family in args.families:
        work_dir = osp.join(ROOT, args.work_dir, family)
        os.makedirs(work_dir, exist_ok=True)
        entry = record['families'][family] = dict(config=CONFIG.format(family=family))
        if args.reuse and osp.exists(osp.join(work_dir, 'last_checkpoint')):
            with open(osp.join(work_dir, 'last_checkpoint')) as f:
                checkpoint = f.read().strip()
            entry['train'] = dict(reused=True)
        else:
            checkpoint, wall, cmd = train(family, work_dir, args.lock, args.train_timeout)
            entry['train'] = dict(wall_s=round(wall, 1), command=cmd)
            print(f'[{family}] trained in {wall:.0f} s', flush=True)
        entry['checkpoint'] = osp.relpath(checkpoint, ROOT)
        for mode in MODES:
            res = entry[mode] = evaluate(family, mode, checkpoint, args.lock, 1200)
            print(f'[{family}] {mode}: mIoU {res["mIoU"]} aAcc {res["aAcc"]} '
                  f'{res["mean_s_per_image"]:.3f} s/image', flush=True)
        record['meta']['threads'] = entry['whole']['threads']
        os.makedirs(osp.dirname(args.out), exist_ok=True)
        with open(args.out, 'w') as f:  # after every family: a partial run still leaves a record
            json.dump(record, f, indent=1)
    print(f'wrote {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
