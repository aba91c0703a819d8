"""Checks that need a CUDA GPU: the GPU against the CPU, and mixed precision.  Not part of
the CPU test suite; run it on any CUDA machine:

    python dev/check_amp_gpu.py               # fp16 + bf16 autocast at 2048 x 2048
    python dev/check_amp_gpu.py --train-amp   # also tools/train.py --amp on GPU configs
    python dev/check_amp_gpu.py --families SOFT --size 1024 --dtypes fp16
    python dev/check_amp_gpu.py --no-parity   # checks 1 (and 2) only
    python dev/check_amp_gpu.py --parity-only # check 0 only
    bash dev/gpu_checks.sh OUT_DIR            # checks 1 and 0, the GPU benchmark and more

0. For the smallest real arch of every family (and SOFT++ with ``pinv='cholesky'``): the
   same weights in float32 on the GPU (TF32 off) and on the CPU, each against the CPU in
   float64, at a size that is neither square nor a multiple of 32: the outputs of an
   eval-mode forward and the input gradient of a training-mode forward and backward; the
   GPU's max |err| / max |ref| within ``PARITY_TOL`` or ten times the CPU's own float32 one
   (SOFT++'s float32 input gradient was up to ~1e-2 off float64 on the CPU for some inputs).
   This checks the GPU code paths (NaLa's feature maps compiled with Triton instead of C++,
   cuBLAS and cuDNN, tensors made inside ``forward``) against the CPU ones the test suite
   checks against the papers' equations.
1. For the smallest real arch of every family (and SOFT++ with ``pinv='cholesky'``):
   forward and backward under ``torch.autocast('cuda', dtype)`` for fp16 and bf16 at
   ``--size`` (default 2048^2), with a dynamic ``GradScaler`` for fp16 exactly as mmengine's
   ``AmpOptimWrapper`` does; checks every output and (unscaled) gradient is finite, and
   reports time and peak memory.  SOFT++ runs its paper setting (m = (H/32)(W/32)
   landmarks; at 2048^2 its token-to-landmark kernels took more than an H100's 80 GB in
   training) unless ``--soft-max-landmarks`` is given, SOFT++ ``pinv='cholesky'`` always the
   paper's landmark rule; an out-of-memory is reported, not raised.
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

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

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
#: GPU float32 against the CPU in float64: max abs difference over max abs value, allowed up
#: to this or to ``PARITY_SLACK`` times the CPU's own float32 difference, the larger
PARITY_TOL, PARITY_SLACK = 1e-4, 10.0
#: checked besides the smallest archs, by checks 0 and 1
EXTRA = {"SOFT pinv='cholesky'": dict(type='SOFT', arch='tiny', pinv='cholesky')}


def _outputs_and_input_grad(model, x: torch.Tensor):
    """Eval-mode outputs, then the input gradient of a training-mode forward and backward
    of ``sum(out * r)`` with fixed random ``r`` (a loss of the outputs' squares would have
    almost no gradient behind the backbones' final norms: it measured rounding only)."""
    with torch.no_grad():
        outs = [o.double().cpu() for o in model.eval()(x)]
    x = x.detach().clone().requires_grad_(True)
    train_outs = model.train()(x)
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in train_outs]
    sum((o * w.to(o)).sum() for o, w in zip(train_outs, weights)).backward()
    return outs, x.grad.double().cpu()


# three dtype / device pairs, each with its own shape classes, compile NaLa's maps more often
# than dynamo's default limit (8) allows; past it the GPU would run them eagerly and the check
# would miss the Triton code it is for
@torch._dynamo.config.patch(recompile_limit=64)
def check_parity(cfg: dict, device: str = 'cuda', size=(200, 328)) -> dict:
    """One model in float32 on ``device`` and on the CPU, each against the CPU in float64:
    outputs and input gradient (see ``PARITY_TOL``)."""
    import mmlinattn.models  # noqa: F401
    from mmlinattn.deployment.runtimes import max_relative_difference
    from mmlinattn.registry import MODELS
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cfg = dict(cfg, drop_path_rate=0.0)  # the same function in training mode everywhere
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    state = model.state_dict()
    x = torch.randn(1, 3, *size)
    start = time.time()
    ref = _outputs_and_input_grad(model.double(), x.double())
    runs = {}
    for name, dev in (('cpu', 'cpu'), ('gpu', device)):
        m = MODELS.build(cfg).to(dev)
        m.load_state_dict(state)
        runs[name] = _outputs_and_input_grad(m, x.to(dev))
    err = {name: (max_relative_difference(outs, ref[0]), max_relative_difference([g], [ref[1]]))
           for name, (outs, g) in runs.items()}
    ok = all(e_gpu <= max(PARITY_TOL, PARITY_SLACK * e_cpu)
             for e_gpu, e_cpu in zip(err['gpu'], err['cpu']))
    return dict(ok=ok, output=dict(gpu=float(f"{err['gpu'][0]:.2g}"),
                                   cpu=float(f"{err['cpu'][0]:.2g}")),
                input_grad=dict(gpu=float(f"{err['gpu'][1]:.2g}"),
                                cpu=float(f"{err['cpu'][1]:.2g}")),
                seconds=round(time.time() - start, 1))


def models_to_check(families, soft_max_landmarks=None) -> dict:
    """The models of checks 0 and 1 by name: the smallest arch of each of ``families``
    (SOFT++ with ``soft_max_landmarks`` pooled landmarks if given), and those of ``EXTRA``
    whose family is among them (SOFT++ ``pinv='cholesky'`` keeps the paper's landmark rule)."""
    cfgs = {f: dict(SMALLEST[f]) for f in families}
    if soft_max_landmarks and 'SOFT' in cfgs:
        cfgs['SOFT']['max_landmarks'] = soft_max_landmarks
    return {**cfgs, **{k: v for k, v in EXTRA.items() if k.split()[0] in families}}


def check_autocast(cfg: dict, dtype_name: str, size: int, device: str = 'cuda') -> dict:
    """Forward and backward of ``cfg`` at ``size``² under autocast to ``dtype_name`` on
    ``device`` (fp16 with a dynamic ``GradScaler``); finite outputs and unscaled gradients,
    time and (CUDA) peak memory; an out-of-memory is reported, not raised."""
    import mmlinattn.models  # noqa: F401
    from mmlinattn.registry import MODELS
    cuda = device == 'cuda'
    torch.manual_seed(0)
    model = MODELS.build(cfg).to(device).train()
    x = torch.randn(1, 3, size, size, device=device)
    dtype = DTYPES[dtype_name]
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
    start = time.time()
    try:
        with torch.autocast(device, dtype=dtype):
            outs = model(x)
            loss = sum(o.float().square().mean() for o in outs)
        scaler.scale(loss).backward()
        if cuda:
            torch.cuda.synchronize()
    except torch.OutOfMemoryError as err:
        return dict(ok=False, error=f'out of memory: {str(err).splitlines()[0]}')
    seconds = time.time() - start
    inv_scale = 1.0 / scaler.get_scale() if scaler.is_enabled() else 1.0
    out_ok = all(torch.isfinite(o.float()).all().item() for o in outs)
    bad = [n for n, p in model.named_parameters()
           if p.grad is None or not torch.isfinite(p.grad * inv_scale).all().item()]
    result = dict(ok=out_ok and not bad, outputs_finite=out_ok, bad_grads=bad[:5],
                  seconds=round(seconds, 2))
    if cuda:
        result['peak_gib'] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return result


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
    parser = argparse.ArgumentParser(
        description='GPU / CPU parity and fp16 / bf16 checks on a CUDA GPU')
    parser.add_argument('--families', nargs='+', default=list(SMALLEST), choices=list(SMALLEST))
    parser.add_argument('--dtypes', nargs='+', default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument('--size', type=int, default=2048)
    parser.add_argument('--soft-max-landmarks', type=int, default=None)
    which = parser.add_mutually_exclusive_group()
    which.add_argument('--no-parity', action='store_true',
                       help='skip check 0 (GPU against CPU; it compiles kernels for three '
                            'dtype / device pairs: ~80 s for SOFT++ on an H100 machine)')
    which.add_argument('--parity-only', action='store_true', help='run check 0 only')
    parser.add_argument('--train-amp', action='store_true')
    parser.add_argument('--train-iters', type=int, default=4)
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args(argv)
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    if not torch.cuda.is_available():
        print('check_amp_gpu.py needs a CUDA GPU; none is available here.')
        return 2
    results, ok = {}, True
    parity = {} if args.no_parity else models_to_check(args.families)
    for name, cfg in parity.items():
        r = check_parity(cfg)
        results[f'{name}/parity'] = r
        ok &= r['ok']
        print(f'{name:12s} float32 vs CPU float64: {r}', flush=True)
    amp = {} if args.parity_only else models_to_check(args.families, args.soft_max_landmarks)
    for name, cfg in amp.items():
        for dt in args.dtypes:
            r = check_autocast(cfg, dt, args.size)
            results[f'{name}/{dt}/{args.size}'] = r
            ok &= r['ok']
            print(f'{name:12s} {dt} {args.size}^2: {r}', flush=True)
            torch.cuda.empty_cache()
    if args.train_amp and not args.parity_only:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, 'tools/dataset_converters/make_demo_data.py', '--out',
                            tmp, '--num-train', '8', '--num-val', '2'], cwd=ROOT, check=True,
                           capture_output=True)
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
