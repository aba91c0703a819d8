"""Mixed-precision checks that need a CUDA GPU.  Not part of the CPU test
suite; run it on any CUDA machine:

    python tools/misc/check_amp_gpu.py               # fp16 + bf16 autocast at 2048 x 2048
    python tools/misc/check_amp_gpu.py --train-amp   # also tools/train.py --amp on GPU configs
    python tools/misc/check_amp_gpu.py --families SOFT --size 1024 --dtypes fp16

1. For the smallest real arch of every family: forward and backward under
   ``torch.autocast('cuda', dtype)`` for fp16 and bf16 at ``--size`` (default 2048^2), with a
   dynamic ``GradScaler`` for fp16 exactly as mmengine's ``AmpOptimWrapper`` does; checks
   every output and (unscaled) gradient is finite, and reports time and peak memory.  SOFT
   runs its paper setting (m = (H/32)(W/32) landmarks) unless ``--soft-max-landmarks`` is
   given; an out-of-memory is reported, not raised.
2. ``--train-amp``: ``tools/train.py CONFIG --amp`` for a few iterations of each family's
   RetinaNet / UperNet config on the demo data
   (``tools/dataset_converters/make_demo_data.py``); checks the run
   ends with exit status 0 and only finite losses in its log.

Exit status 0 when every check passed.
"""
import argparse
import glob
import json
import os.path as osp
import subprocess
import sys
import tempfile
import time

import torch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

SMALLEST = {
    'SOFT': dict(type='SOFT', arch='tiny'),
    'NaLaFormer': dict(type='NaLaFormer', arch='tiny'),
    'InfViT': dict(type='InfViT', arch='tiny'),
    'InfViTPlain': dict(type='InfViTPlain', arch='l4'),
    'LDN': dict(type='LDN', arch='tiny'),
}
TRAIN_CONFIGS = [
    'configs/retinanet_soft_tiny_1x.py', 'configs/retinanet_nalaformer_tiny_1x.py',
    'configs/retinanet_infvit_tiny_1x.py', 'configs/retinanet_infvitplain_l4_1x.py',
    'configs/retinanet_ldn_tiny_1x.py', 'configs/upernet_ldn_tiny_ade20k_160k.py',
]
DTYPES = {'fp16': torch.float16, 'bf16': torch.bfloat16}


def check_autocast(family: str, dtype_name: str, size: int, soft_max_landmarks=None) -> dict:
    import mmlinattn.models  # noqa: F401
    from mmlinattn.registry import MODELS
    cfg = dict(SMALLEST[family])
    if family == 'SOFT' and soft_max_landmarks:
        cfg['max_landmarks'] = soft_max_landmarks
    torch.manual_seed(0)
    model = MODELS.build(cfg).cuda().train()
    x = torch.randn(1, 3, size, size, device='cuda')
    dtype = DTYPES[dtype_name]
    scaler = torch.amp.GradScaler('cuda', enabled=dtype == torch.float16)
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    start = time.time()
    try:
        with torch.autocast('cuda', dtype=dtype):
            outs = model(x)
            loss = sum(o.float().square().mean() for o in outs)
        scaler.scale(loss).backward()
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as err:
        return dict(ok=False, error=f'out of memory: {str(err).splitlines()[0]}')
    seconds = time.time() - start
    inv_scale = 1.0 / scaler.get_scale() if scaler.is_enabled() else 1.0
    out_ok = all(torch.isfinite(o.float()).all().item() for o in outs)
    bad = [n for n, p in model.named_parameters()
           if p.grad is None or not torch.isfinite(p.grad * inv_scale).all().item()]
    return dict(ok=out_ok and not bad, outputs_finite=out_ok, bad_grads=bad[:5],
                seconds=round(seconds, 2),
                peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2))


def check_train_amp(config: str, data_root: str, iters: int, work_root: str) -> dict:
    from mmengine.config import Config

    from mmlinattn.datasets.demo_overrides import cfg_option_words, demo_options
    opts = demo_options(Config.fromfile(osp.join(ROOT, config)), iters, data_root=data_root,
                        num_train=8)
    opts['default_hooks.logger.interval'] = 1
    args = cfg_option_words(opts)
    work_dir = osp.join(work_root, osp.splitext(osp.basename(config))[0])
    cmd = [sys.executable, 'tools/train.py', config, '--amp', '--work-dir', work_dir,
           '--cfg-options'] + args
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    losses = []
    for path in glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')):
        with open(path) as f:
            losses += [json.loads(line)['loss'] for line in f if '"loss"' in line]
    finite = bool(losses) and all(abs(v) < float('inf') and v == v for v in losses)
    return dict(ok=proc.returncode == 0 and finite, returncode=proc.returncode,
                losses=losses[:5], tail=proc.stderr[-2000:] if proc.returncode else '')


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='fp16 / bf16 checks on a CUDA GPU')
    parser.add_argument('--families', nargs='+', default=list(SMALLEST))
    parser.add_argument('--dtypes', nargs='+', default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument('--size', type=int, default=2048)
    parser.add_argument('--soft-max-landmarks', type=int, default=None)
    parser.add_argument('--train-amp', action='store_true')
    parser.add_argument('--train-iters', type=int, default=4)
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print('check_amp_gpu.py needs a CUDA GPU; none is available here.')
        return 2
    results, ok = {}, True
    for family in args.families:
        for dt in args.dtypes:
            r = check_autocast(family, dt, args.size, args.soft_max_landmarks)
            results[f'{family}/{dt}/{args.size}'] = r
            ok &= r['ok']
            print(f'{family:12s} {dt} {args.size}^2: {r}', flush=True)
            torch.cuda.empty_cache()
    if args.train_amp:
        from mmlinattn.datasets import make_demo_data
        with tempfile.TemporaryDirectory() as tmp:
            make_demo_data(tmp, num_train=8, num_val=2, logger=None)
            for config in TRAIN_CONFIGS:
                r = check_train_amp(config, tmp, args.train_iters, osp.join(tmp, 'work'))
                results[f'train --amp {config}'] = r
                ok &= r['ok']
                print(f'train --amp {config}: {r}', flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    print('ALL PASSED' if ok else 'SOME CHECKS FAILED')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
