"""Which pseudo-inverse the shipped SOFT++ configs run: equality and cost.

    flock /tmp/mmlinattn-cpu.lock .venv/bin/python dev/soft_pinv_decision.py \
        --out records/soft_pinv_decision_zen4.json [--rounds 3] [--skip-equality] [--skip-cost]

SOFT++ (Lu et al., "Softmax-free Linear Transformers", arXiv 2207.03341) applies the
Moore-Penrose inverse A^+ of the m x m landmark matrix (Sec. 3.2, Eq. 9) normalised as in
Eq. 17, and computes it with 20 Newton-Schulz steps (Eq. 10, Alg. 2).  Under the paper's
landmark rule m grows with the image (about 1 050 per stage at 1344x800), and the backbone
also offers ``pinv='cholesky'`` (a Cholesky solve of A + 1e-6 tr(A)/m I) and
``max_landmarks`` (pooled landmarks, not the paper's rule).

Part 1, equality (float64): a SOFT++ backbone in float64 on real photographs
(``data/photos``) resized to 800x1344; at every SOFT layer the same landmarks and ``P^T V``
go through (a) ``torch.linalg.pinv`` (SVD, the reference A^+), (b) Newton-Schulz, 20 steps,
default init, (c) the Cholesky form.  Reported per layer: max|delta|/max|ref| of the
normalised products ``N(A^+) P^T V`` and of the attention outputs ``P N(A^+) P^T V``, cond(A)
and the paper's convergence measure ``||A A_T A - A||_2 / ||A||_2`` (Fig. 5); then three
whole forwards (each applying one form everywhere) compared at the four stage outputs.
The weights are a seeded random initialisation: no trained SOFT++ weights exist here.

Part 2, cost (float32, 2 threads): the RetinaNet of configs/retinanet_soft_small_1x.py with
pinv='newton', pinv='cholesky' and max_landmarks=49, and mmdet's RetinaNet Swin-T
(swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py), whole inference (``mode='predict'``, NMS
included) on one 1333x800 photograph padded to 1344x800, in one process, interleaved, median
of ``--rounds`` after one warm-up each; plus MACs by the repo's flop counting
(:func:`mmlinattn.benchmark.model_flops.measure_model`, fake tensors).  The flop counter does
not count ``cholesky`` / ``cholesky_solve``: their MACs (m^3/6 per factorisation, m^2 k per
two triangular solves) are added from the shapes seen.
"""
import argparse
import glob
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import mmdet
import torch
from PIL import Image

import mmlinattn.kernels.soft as ksoft
import mmlinattn.models.layers.soft_attention as lsoft
from mmlinattn.ops.soft import (cholesky_pinv_solve, gaussian_kernel, newton_schulz_pinv,
                                symmetric_normalize)

MEAN = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1)
STD = torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1)
PHOTOS = ('data/photos/bccd/images/test/BloodImage_00007.jpg',
          'data/photos/nuts/images/train/0.jpg')
SIZE = (800, 1344)          # (H, W): 1333x800 padded to a multiple of 32


def load_photo(path, size=SIZE, normalize=True):
    img = Image.open(path).convert('RGB').resize((size[1], size[0]), Image.BILINEAR)
    x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).float()
    return ((x - MEAN) / STD if normalize else x)[None]


def rel(a, ref):
    return float((a - ref).abs().max() / ref.abs().max())


# ------------------------------------------------------------------ part 1: equality
class Probe:
    """Replaces the layers' ``soft_attention``: applies one pseudo-inverse form everywhere
    (``mode``) and, with ``compare``, measures the three forms on the same inputs."""

    def __init__(self, original):
        self.original = original
        self.mode = 'pinv'
        self.compare = False
        self.layers = []

    def __call__(self, q, landmarks, v, num_iters=20, init='safe', sym_norm=True, ridge=0.0,
                 valid=None, landmark_valid=None, pinv='newton'):
        assert valid is None and landmark_valid is None and sym_norm and ridge == 0.0
        p = gaussian_kernel(q, landmarks, denom=2.0)                    # (B, h, n, m)
        a = gaussian_kernel(landmarks, landmarks, denom=2.0)            # (B, h, m, m)
        pv = p.transpose(-1, -2) @ v
        forms = {}
        if self.compare or self.mode == 'pinv':
            # A^+ from one eigendecomposition (torch.linalg.pinv(hermitian=True)'s cutoff)
            ev, vec = torch.linalg.eigh(a)                              # ascending
            cut = ev[..., -1:] * a.shape[-1] * torch.finfo(a.dtype).eps
            inv = torch.where(ev > cut, 1 / ev, torch.zeros_like(ev))
            a_pinv = (vec * inv[..., None, :]) @ vec.transpose(-1, -2)
            forms['pinv'] = symmetric_normalize(a_pinv, a) @ pv
        if self.compare or self.mode == 'newton':
            y = newton_schulz_pinv(a, num_iters, init)
            forms['newton'] = symmetric_normalize(y, a) @ pv
        if self.compare or self.mode == 'cholesky':
            dinv = a.sum(-1, keepdim=True).rsqrt()
            forms['cholesky'] = dinv * cholesky_pinv_solve(a, dinv * pv)
        if self.compare:
            ref = forms['pinv']
            out_ref = p @ ref
            cond = (ev[..., -1] / ev[..., 0].clamp_min(1e-300))
            # Fig. 5's ||A A_T A - A||_2 / ||A||_2 (symmetric: the 2-norm is max |eigenvalue|)
            resid = torch.linalg.eigvalsh(a @ y @ a - a).abs().amax(-1)
            conv = (resid / ev[..., -1]).flatten().tolist()
            self.layers.append(dict(
                tokens=q.shape[-2], landmarks=a.shape[-1], heads=a.shape[1],
                cond_A_max=float(cond.max()), cond_A_median=float(cond.median()),
                lambda_min_A=float(ev[..., 0].min()), lambda_max_A=float(ev[..., -1].max()),
                newton_convergence_max=max(conv),
                product_rel_err=dict(newton=rel(forms['newton'], ref),
                                     cholesky=rel(forms['cholesky'], ref)),
                output_rel_err=dict(newton=rel(p @ forms['newton'], out_ref),
                                    cholesky=rel(p @ forms['cholesky'], out_ref))))
            print(f"  m={a.shape[-1]} h={a.shape[1]} cond<={self.layers[-1]['cond_A_max']:.3g}"
                  f" NS conv {max(conv):.2e} | product newton "
                  f"{self.layers[-1]['product_rel_err']['newton']:.2e} cholesky "
                  f"{self.layers[-1]['product_rel_err']['cholesky']:.2e}", flush=True)
        return p @ forms[self.mode]


def equality(arch, photos, size, seed=0):
    from mmlinattn.models.backbones.soft import SOFT
    torch.manual_seed(seed)
    model = SOFT(arch=arch, out_indices=(0, 1, 2, 3)).double().eval()
    probe = Probe(lsoft.soft_attention)
    lsoft.soft_attention = probe
    results = []
    try:
        for path in photos:
            x = load_photo(path, size).double()
            row = dict(photo=path, input_hw=list(size))
            outs = {}
            for mode in ('pinv', 'newton', 'cholesky'):
                probe.mode, probe.compare, probe.layers = mode, mode == 'pinv', []
                t = time.perf_counter()
                with torch.no_grad():
                    outs[mode] = model(x)
                print(f'{path} {mode}: {time.perf_counter() - t:.1f} s', flush=True)
                if mode == 'pinv':
                    row['layers'] = probe.layers
            row['stage_output_rel_err'] = {
                mode: [rel(o, r) for o, r in zip(outs[mode], outs['pinv'])]
                for mode in ('newton', 'cholesky')}
            for key in ('product_rel_err', 'output_rel_err'):
                row[key + '_max'] = {
                    mode: max(layer[key][mode] for layer in row['layers'])
                    for mode in ('newton', 'cholesky')}
            row['cond_A_max'] = max(layer['cond_A_max'] for layer in row['layers'])
            row['newton_convergence_max'] = max(layer['newton_convergence_max']
                                                for layer in row['layers'])
            print(json.dumps({k: v for k, v in row.items() if k != 'layers'}), flush=True)
            results.append(row)
    finally:
        lsoft.soft_attention = probe.original
    return dict(arch=arch, dtype='float64', weights=f'random init, torch.manual_seed({seed})',
                newton=dict(iters=20, init='safe'), cholesky_jitter=ksoft.CHOLESKY_JITTER,
                photos=results)


# ------------------------------------------------------------------ part 2: cost
class CholeskyMacs:
    """Counts the MACs of the Cholesky factorisations and solves (the flop counter does not)."""

    def __init__(self):
        self.macs = 0
        self.original = ksoft.nystrom_middle

    def __call__(self, landmarks, keep, pv, *args, **kwargs):
        # after num_iters, init, sym_norm, ridge
        pinv = args[4] if len(args) > 4 else kwargs.get('pinv')
        if pinv == 'cholesky':
            m, k = pv.shape[-2], pv.shape[-1]
            mats = pv.numel() // (m * k)
            self.macs += mats * (m ** 3 // 6 + m * m * k)
        return self.original(landmarks, keep, pv, *args, **kwargs)


def detector_inputs(photo):
    from mmdet.structures import DetDataSample
    h, w = 800, 1333
    x = load_photo(photo, (h, w), normalize=False)
    x = torch.nn.functional.pad(x, (0, 1344 - w, 0, 0))
    sample = DetDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w),
                                         scale_factor=(1.0, 1.0), pad_shape=(800, 1344),
                                         batch_input_shape=(800, 1344)))
    return x, [sample]


def cost(rounds, photo, only=None):
    from mmlinattn.benchmark.model_flops import build_config_model, measure_model
    torch.set_num_threads(2)
    cfg = 'configs/retinanet_soft_small_1x.py'
    variants = {
        'soft_small_newton': (cfg, {'model.backbone.pinv': 'newton'}),
        'soft_small_cholesky': (cfg, {'model.backbone.pinv': 'cholesky'}),
        'soft_small_max_landmarks_49': (cfg, {'model.backbone.pinv': 'newton',
                                              'model.backbone.max_landmarks': 49}),
        'swin_t': (os.path.join(os.path.dirname(mmdet.__file__),
                                '.mim/configs/swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py'), None),
    }
    if only:
        variants = {k: v for k, v in variants.items() if k in only}
    models, flops = {}, {}
    counter = CholeskyMacs()
    ksoft.nystrom_middle = counter
    try:
        for name, (path, options) in variants.items():
            torch.manual_seed(0)
            model, _ = build_config_model(path, options)
            models[name] = model
            counter.macs = 0
            # the Cholesky retry reads a value, which fake tensors do not have: a real forward
            r = measure_model(model, (800, 1333), real=name == 'soft_small_cholesky')
            flops[name] = dict(gmacs=round(r['flops'] / 2e9 + counter.macs / 1e9, 1),
                               gmacs_backbone=round(r['flops_backbone'] / 2e9
                                                    + counter.macs / 1e9, 1),
                               gmacs_newton=round(r['flops_newton'] / 2e9, 1),
                               gmacs_cholesky_uncounted=round(counter.macs / 1e9, 1),
                               params_m=round(r['params'] / 1e6, 2))
            print(name, flops[name], flush=True)
    finally:
        ksoft.nystrom_middle = counter.original
    preproc = dict(mean=MEAN.view(1, 3, 1, 1), std=STD.view(1, 3, 1, 1))
    raw, samples = detector_inputs(photo)
    x = (raw - preproc['mean']) / preproc['std']
    x[..., 1333:] = 0
    times = {name: [] for name in models}
    for r in range(rounds + 1):                    # round 0: warm-up, not kept
        for name, model in models.items():
            t = time.perf_counter()
            with torch.no_grad():
                out = model(x, [s.clone() for s in samples], mode='predict')
            dt = time.perf_counter() - t
            assert len(out[0].pred_instances.bboxes) >= 0
            if r:
                times[name].append(dt)
            print(f'round {r} {name}: {dt:.2f} s', flush=True)
    med = {name: statistics.median(t) for name, t in times.items()}
    return dict(
        config=cfg, peer='mmdet swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py',
        input='one photograph, 1333x800 padded to 1344x800, mode=predict (NMS included)',
        dtype='float32', threads=torch.get_num_threads(), rounds=rounds,
        warmup='one forward per model before the kept rounds, same interleaved order',
        photo=photo, seconds=times, median_seconds={k: round(v, 3) for k, v in med.items()},
        ratio_to_swin_t={k: round(v / med['swin_t'], 2) for k, v in med.items()},
        macs=flops)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', required=True)
    parser.add_argument('--arch', default='small')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--size', type=int, nargs=2, default=list(SIZE))
    parser.add_argument('--skip-equality', action='store_true')
    parser.add_argument('--skip-cost', action='store_true')
    parser.add_argument('--variants', nargs='+', help='a subset of the cost variants (a check)')
    args = parser.parse_args(argv)
    try:
        with open(args.out) as f:
            record = json.load(f)
    except FileNotFoundError:
        record = {}
    record.update(
        command='flock /tmp/mmlinattn-cpu.lock .venv/bin/python dev/soft_pinv_decision.py '
                + ' '.join(sys.argv[1:]),
        machine='AMD EPYC, AVX-512, family 25 model 17 (Zen 4), 2 cores',
        torch=torch.__version__, python=platform.python_version())
    if not args.skip_equality:
        record['equality'] = equality(args.arch, PHOTOS, tuple(args.size))
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)
    if not args.skip_cost:
        record['cost'] = cost(args.rounds, PHOTOS[1], args.variants)
    with open(args.out, 'w') as f:
        json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
