"""Summarise a demo run: the trained model's metrics next to an untrained model's, the wall
time, and a PNG of the training loss.

    python tools/analysis_tools/summarize_demo.py WORK_DIR [--seconds N] [--no-baseline]

WORK_DIR is the ``--work-dir`` of tools/train.py (it holds the dumped config); the trained
model's metrics are read from ``WORK_DIR/test`` (tools/test.py's ``--work-dir``).
"""
import argparse
import glob
import json
import os.path as osp
import sys

from benchlib.work_dirs import last_metrics
from mmengine.config import Config

from mmlinattn.utils.checkpoint_schemes import install_safe_checkpoint_loading
from mmlinattn.utils.external_configs import prepare_external_configs
from mmlinattn.engine.runner import register_library

KEYS = ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'mIoU', 'aAcc', 'mAcc')


def latest_json(d: str, pattern: str) -> str:
    files = sorted(glob.glob(osp.join(d, pattern)))
    if not files:
        raise SystemExit(f'no {pattern} under {d}: did the run finish?')
    return files[-1]


def read_metrics(test_dir: str) -> dict:
    try:
        return last_metrics(test_dir)
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from None


def untrained_metrics(cfg_path: str, work_dir: str) -> dict:
    from mmengine.runner import Runner
    cfg = Config.fromfile(cfg_path)
    register_library(cfg.default_scope)
    cfg.work_dir = osp.join(work_dir, 'untrained')
    cfg.load_from = None
    cfg.resume = False
    runner = Runner.from_cfg(cfg)
    return runner.test()


def plot_losses(work_dir: str, out: str, trained: dict, untrained: dict) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    scalars = latest_json(work_dir, '*/vis_data/scalars.json')
    steps, losses = [], []
    with open(scalars) as f:
        for line in f:
            rec = json.loads(line)
            if 'loss' in rec and 'iter' in rec:
                steps.append(rec['iter'])
                losses.append(rec['loss'])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(steps, losses)
    ax1.set_xlabel('iteration')
    ax1.set_ylabel('training loss')
    ax1.set_title('loss')
    keys = [k for k in KEYS if k in trained]
    x = range(len(keys))
    bars = [ax2.bar([i - 0.2 for i in x], [untrained.get(k, 0) for k in keys], 0.4,
                    label='untrained'),
            ax2.bar([i + 0.2 for i in x], [trained[k] for k in keys], 0.4, label='trained')]
    for b in bars:  # an untrained model's bar is often 0 high: print the values
        ax2.bar_label(b, fmt='%.3f')
    ax2.set_xticks(list(x), [k.split('/')[-1] for k in keys])
    ax2.set_title('evaluation')
    ax2.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description='summarise a demo run')
    parser.add_argument('work_dir')
    parser.add_argument('--seconds', type=int, help='wall time of the whole run')
    parser.add_argument('--no-baseline', action='store_true',
                        help='skip evaluating an untrained model')
    args = parser.parse_args()
    install_safe_checkpoint_loading()
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    trained = read_metrics(osp.join(args.work_dir, 'test'))
    cfg_path = latest_json(args.work_dir, '*.py')
    untrained = {} if args.no_baseline else untrained_metrics(cfg_path, args.work_dir)
    png = osp.join(args.work_dir, 'summary.png')
    plot_losses(args.work_dir, png, trained, untrained)
    lines = ['', '=' * 60, f'demo result ({osp.basename(cfg_path)})']
    for k in KEYS:
        if k in trained:
            base = f'   untrained {untrained[k]:.3f}' if k in untrained else ''
            lines.append(f'  {k:<20} trained {trained[k]:.3f}{base}')
    if args.seconds is not None:
        lines.append(f'  wall time            {args.seconds // 60} min {args.seconds % 60} s')
    lines += [f'  loss curve + metrics {png}', '=' * 60]
    print('\n'.join(lines))
    return 0


if __name__ == '__main__':
    sys.exit(main())
