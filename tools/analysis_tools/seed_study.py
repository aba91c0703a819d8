"""Train configs over several seeds and evaluate each checkpoint at several input scales:
the mean and spread of a held-out metric per config, and the fraction of it each model
keeps at other scales (resolution transfer).

    python tools/analysis_tools/seed_study.py configs/photos/semfpn_soft_pico_nuts.py \\
        configs/photos/semfpn_r18_nuts.py --seeds 0 1 2 --metric mIoU \\
        --eval-scales 384x288 576x432 --cfg-options train_cfg.max_iters=120 \\
        --work-dir work_dirs/seed_study --jobs 2

Every run is ``tools/train.py`` / ``tools/test.py`` as a user types them; ``--cfg-options``
apply to both (the training protocol), ``--scale-key`` names the test pipeline's resize
(``test_dataloader.dataset.pipeline.1.scale`` in the photo configs) set per evaluation.
``--untrained`` adds each config's initialisation (seed 0) at the first scale.  Writes
``results.json`` and prints a Markdown table.  ``--jobs 2`` runs two at a time with one
thread each (a 2-core machine).
"""
import argparse
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from benchlib.work_dirs import last_metrics
from mmengine.config import DictAction

from mmlinattn.datasets.demo_overrides import cfg_option_words

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='seeds x configs x evaluation scales')
    p.add_argument('configs', nargs='+')
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--metric', default='mIoU', help="e.g. mIoU or 'coco/bbox_mAP'")
    p.add_argument('--eval-scales', nargs='+', required=True, metavar='WxH',
                   help='the first is the training scale')
    p.add_argument('--scale-key', default='test_dataloader.dataset.pipeline.1.scale')
    p.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                   metavar='KEY=VALUE')
    p.add_argument('--work-dir', default='work_dirs/seed_study')
    p.add_argument('--jobs', type=int, default=1)
    p.add_argument('--untrained', action='store_true')
    return p.parse_args(argv)


def _scale(text):
    w, h = (int(v) for v in text.lower().split('x'))
    return f'({w},{h})'


def _tool(args, env, log):
    with open(log, 'w') as f:
        proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, stdout=f,
                              stderr=subprocess.STDOUT)
    if proc.returncode:
        raise RuntimeError(f'{" ".join(args[:2])} failed ({proc.returncode}); see {log}')


def _untrained(config, path, options):
    import torch

    from mmlinattn.engine.runner import build_config_model
    torch.manual_seed(0)
    model, _ = build_config_model(osp.join(ROOT, config), options)
    model.init_weights()
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)


def run_one(args, config, seed, env):
    """Train ``config`` with ``seed`` (None: evaluate the initialisation), then test it at
    every scale: {scale: metric}."""
    name = osp.splitext(osp.basename(config))[0]
    work = osp.abspath(osp.join(args.work_dir, name, 'untrained' if seed is None
                                else f'seed{seed}'))
    os.makedirs(work, exist_ok=True)
    scales = args.eval_scales[:1] if seed is None else args.eval_scales
    words = cfg_option_words(args.cfg_options)
    if seed is None:
        ckpt = osp.join(work, 'untrained.pth')  # written by main() beforehand
    else:
        _tool(['tools/train.py', config, '--work-dir', work, '--cfg-options',
               *words, f'randomness.seed={seed}'], env, osp.join(work, 'train.log'))
        with open(osp.join(work, 'last_checkpoint')) as f:
            ckpt = f.read().strip()
    out = {}
    for scale in scales:
        test = osp.join(work, f'test_{scale}')
        _tool(['tools/test.py', config, ckpt, '--work-dir', test, '--cfg-options',
               *words, f'{args.scale_key}={_scale(scale)}'], env, test + '.log')
        out[scale] = last_metrics(test)[args.metric]
    print(f'{name} seed {seed}: {out}', flush=True)
    return out


def table(results, args):
    first, rest = args.eval_scales[0], args.eval_scales[1:]
    head = ['config'] + [f'seed {s}' for s in args.seeds] + [f'mean ± sd ({first})']
    head += [f'{s} (fraction)' for s in rest] + (['untrained'] if args.untrained else [])
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for config, res in results.items():
        runs = [res[str(s)] for s in args.seeds]
        base = [r[first] for r in runs]
        mean = statistics.mean(base)
        sd = statistics.stdev(base) if len(base) > 1 else 0.0
        row = [osp.basename(config)] + [f'{v:.3f}' for v in base] + [f'{mean:.3f} ± {sd:.3f}']
        for s in rest:
            m = statistics.mean(r[s] for r in runs)
            row.append(f'{m:.3f} ({m / mean:.2f}x)' if mean else f'{m:.3f}')
        if args.untrained:
            row.append(f"{res['untrained'][first]:.3f}")
        lines.append('| ' + ' | '.join(row) + ' |')
    return '\n'.join(lines)


def main(argv=None):
    args = parse_args(argv)
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    if args.jobs > 1:
        env['OMP_NUM_THREADS'] = '1'
    jobs = [(c, s) for c in args.configs for s in args.seeds]
    if args.untrained:  # built here, one at a time: the registries are not thread-safe
        for c in args.configs:
            work = osp.join(args.work_dir, osp.splitext(osp.basename(c))[0], 'untrained')
            os.makedirs(work, exist_ok=True)
            _untrained(c, osp.join(work, 'untrained.pth'), args.cfg_options)
        jobs += [(c, None) for c in args.configs]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = list(pool.map(lambda job: run_one(args, job[0], job[1], env), jobs))
    results = {}
    for (config, seed), out in zip(jobs, done):
        results.setdefault(config, {})['untrained' if seed is None else str(seed)] = out
    os.makedirs(args.work_dir, exist_ok=True)
    with open(osp.join(args.work_dir, 'results.json'), 'w') as f:
        json.dump(dict(args=vars(args), results=results), f, indent=1)
    print(table(results, args))
    return 0


if __name__ == '__main__':
    sys.exit(main())
