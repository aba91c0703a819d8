"""Which pseudo-inverse the shipped SOFT++ configs run: equality, cost, float32, the authors'.

    export PYTHONPATH=tools/analysis_tools:tests  # the flop counter; the authors' layout
    flock /tmp/mmlinattn-cpu.lock .venv/bin/python dev/soft_pinv_decision.py \
        --out records/soft_pinv_decision_zen4.json [--rounds 3] [--skip-equality] [--skip-cost]
    flock /tmp/mmlinattn-cpu.lock .venv/bin/python dev/soft_pinv_decision.py \
        --out records/soft_pinv_float32_zen3.json --skip-equality --skip-cost --float32 \
        [--photos PHOTO ...] [--official [--official-size 224 224]]

Parts 3 and 4 add to the record they find: photographs and sizes of earlier runs with the same
settings stay (each row keeps its command), so a long run can be split into short ones.

SOFT++ (Lu et al., "Softmax-free Linear Transformers", arXiv 2207.03341) applies the
Moore-Penrose inverse A^+ of the m x m landmark matrix (Sec. 3.2, Eq. 9) normalised as in
Eq. 17, and computes it with 20 Newton-Schulz steps (Eq. 10, Alg. 2).  Under the paper's
landmark rule m grows with the image (about 1 050 per stage at 1344x800), and the backbone
also offers ``pinv='cholesky'`` (a ridge-regularised solve with (A + lambda I)^-1, lambda =
1e-6 tr(A)/m raised 100-fold up to 3 times where the factorisation fails) and
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
(:func:`benchlib.model_flops.measure_model`, fake tensors).  The flop counter does
not count ``cholesky`` / ``cholesky_solve``: their MACs (m^3/6 per factorisation, m^2 k per
two triangular solves) are added from the shapes seen.

Part 3, float32 (``--float32``): what the configs run.  A SOFT++ backbone (``--float32-arch``,
seeded random init) in float32 on one photograph of each shipped set resized to 800x1344,
through the shipped path (``pinv='cholesky'``, the fast forms).  At every SOFT layer, on the
float32 A of that forward: how many matrices the factorisation fails at the base ridge and how
often their lambda is raised; and, against the same layer computed in float64 (q, landmarks
and v promoted) with A^+, max|delta|/max|ref| of the normalised products ``N(.) P^T V`` and of
the attention outputs, for the Cholesky form and for 20 Newton-Schulz steps (the backbone's
``newton_iters`` and ``newton_init``), both in float32.

Part 4, the authors' model (``--official``): the ``tiny-norm`` arch with
``OFFICIAL_PRESETS['norm']`` (the attention of their SOFT-Norm code, 20 Newton steps with their
halving rule), random weights in their checkpoint layout (``tests/official_layouts.py``,
landmark LayerNorm gain 0.3 so that A is not close to I) through ``convert_soft_checkpoint``:
no trained weights are on this machine.  On one photograph, the backbone run with an exact
A^+ (eigendecomposition) everywhere against (a) ``pinv='cholesky'`` and (b) their 20 Newton
steps, each in float64 and float32: the max |delta| of the four stage outputs, against the
exact run in float64 and in the same dtype.
"""
import argparse
import datetime
import json
import math
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
                                ridged_cholesky, symmetric_normalize)
from mmlinattn.utils.machine import cpu_name

MEAN = torch.tensor([123.675, 116.28, 103.53]).view(3, 1, 1)
STD = torch.tensor([58.395, 57.12, 57.375]).view(3, 1, 1)
PHOTOS = ('data/photos/bccd/images/test/BloodImage_00007.jpg',
          'data/photos/nuts/images/train/0.jpg')
#: one photograph of each shipped set (part 3)
SET_PHOTOS = PHOTOS + ('data/photos/cards/images/test/IMG_2383.jpg', )
SIZE = (800, 1344)          # (H, W): 1333x800 padded to a multiple of 32


def load_photo(path, size=SIZE, normalize=True):
    img = Image.open(path).convert('RGB').resize((size[1], size[0]), Image.BILINEAR)
    x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).float()
    return ((x - MEAN) / STD if normalize else x)[None]


def rel(a, ref):
    return float((a - ref).abs().max() / ref.abs().max())


def exact_pinv(a):
    """A^+ of symmetric A from one eigendecomposition (torch.linalg.pinv(hermitian=True)'s
    cutoff), with the eigenvalues (ascending)."""
    ev, vec = torch.linalg.eigh(a)
    cut = ev[..., -1:] * a.shape[-1] * torch.finfo(a.dtype).eps
    inv = torch.where(ev > cut, 1 / ev, torch.zeros_like(ev))
    return (vec * inv[..., None, :]) @ vec.transpose(-1, -2), ev


def patched_attention(probe):
    """The layers' attention replaced by ``probe`` (restore with :func:`restore_attention`)."""
    lsoft.fast_soft_attention = probe
    return probe


def restore_attention(probe):
    lsoft.fast_soft_attention = probe.original


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
            a_pinv, ev = exact_pinv(a)
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
            cond = (ev[..., -1] / ev[..., 0].clamp_min(torch.finfo(ev.dtype).tiny))
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
    probe = patched_attention(Probe(lsoft.fast_soft_attention))
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
        restore_attention(probe)
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
    from benchlib.model_flops import measure_model
    from mmlinattn.engine.runner import build_config_model
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


# ------------------------------------------------------------------ part 3: float32
class Float32Probe:
    """Around the layers' attention (the shipped path runs unchanged): on each call's float32
    A and ``P^T V``, the Cholesky form's retries and both forms' errors against A^+ in
    float64."""

    def __init__(self, original, newton_iters):
        self.original = original
        self.newton_iters = newton_iters
        self.layers = []

    def __call__(self, q, landmarks, v, num_iters=20, init='safe', sym_norm=True, ridge=0.0,
                 valid=None, landmark_valid=None, pinv='newton'):
        assert valid is None and landmark_valid is None and sym_norm and ridge == 0.0
        assert pinv == 'cholesky' and q.dtype == torch.float32
        p = ksoft.fast_gaussian_kernel(q, landmarks, denom=2.0)          # (B, h, n, m)
        a = ksoft.fast_gaussian_kernel(landmarks, landmarks, denom=2.0)  # (B, h, m, m)
        pv = p.transpose(-1, -2) @ v
        _, lam = ridged_cholesky(a)
        base = ksoft.CHOLESKY_JITTER * a.diagonal(dim1=-2, dim2=-1).mean(-1, keepdim=True)
        raises = torch.round(torch.log(lam / base) / math.log(100)).flatten()
        # the reference: the same layer inputs in float64 with A^+
        q64, lm64 = q.double(), landmarks.double()
        p64 = gaussian_kernel(q64, lm64, denom=2.0)
        a64 = gaussian_kernel(lm64, lm64, denom=2.0)
        a_pinv, ev = exact_pinv(a64)
        ref = symmetric_normalize(a_pinv, a64) @ (p64.transpose(-1, -2) @ v.double())
        dinv = a.sum(-1, keepdim=True).rsqrt()
        forms = dict(cholesky=dinv * cholesky_pinv_solve(a, dinv * pv),
                     newton=symmetric_normalize(newton_schulz_pinv(a, num_iters, init), a) @ pv)
        cond = ev[..., -1] / ev[..., 0].clamp_min(torch.finfo(ev.dtype).tiny)
        self.layers.append(dict(
            landmarks=a.shape[-1], heads=a.shape[1], cond_A64_max=float(cond.max()),
            newton=dict(iters=num_iters, init=init),
            base_failed=int((raises > 0).sum()), ridge_raises_max=int(raises.max()),
            product_rel_err={k: rel(f.double(), ref) for k, f in forms.items()},
            output_rel_err={k: rel(p.double() @ f.double(), p64 @ ref)
                            for k, f in forms.items()}))
        row = self.layers[-1]
        print(f"  m={row['landmarks']} h={row['heads']} cond<={row['cond_A64_max']:.3g} failed "
              f"{row['base_failed']} raises {row['ridge_raises_max']} | output cholesky "
              f"{row['output_rel_err']['cholesky']:.2e} newton "
              f"{row['output_rel_err']['newton']:.2e}", flush=True)
        return self.original(q, landmarks, v, num_iters, init, sym_norm, ridge, valid,
                             landmark_valid, pinv)


def float32_photos(arch, photos, size, seed=0):
    from mmlinattn.models.backbones.soft import SOFT
    torch.manual_seed(seed)
    model = SOFT(arch=arch, out_indices=(0, 1, 2, 3), pinv='cholesky').eval()
    probe = patched_attention(Float32Probe(lsoft.fast_soft_attention, 20))
    results = []
    try:
        for path in photos:
            probe.layers = []
            t = time.perf_counter()
            with torch.no_grad():
                model(load_photo(path, size))
            assert probe.layers, 'the probe saw no SOFT layer'
            layers = probe.layers
            row = dict(photo=path, input_hw=list(size), layers=layers,
                       soft_layers=len(layers),
                       matrices=sum(layer['heads'] for layer in layers),
                       base_failed=sum(layer['base_failed'] for layer in layers),
                       ridge_raises_max=max(layer['ridge_raises_max'] for layer in layers),
                       cond_A64_max=max(layer['cond_A64_max'] for layer in layers))
            for key in ('product_rel_err', 'output_rel_err'):
                row[key + '_max'] = {k: max(layer[key][k] for layer in layers)
                                     for k in ('cholesky', 'newton')}
            print(f'{path}: {time.perf_counter() - t:.1f} s', json.dumps(
                {k: v for k, v in row.items() if k != 'layers'}), flush=True)
            results.append(row)
    finally:
        restore_attention(probe)
    return dict(arch=arch, dtype='float32', weights=f'random init, torch.manual_seed({seed})',
                path="the shipped configs' pinv='cholesky', fast forms",
                reference='the layer in float64 on the same float32 inputs (q, landmarks, v), '
                          'A^+ from an eigendecomposition',
                cholesky_jitter=ksoft.CHOLESKY_JITTER, photos=results)


def float32_summary(rows):
    """Over the photographs: matrices, failed base factorisations, most raises, worst errors."""
    return dict(photos=len(rows), matrices=sum(r['matrices'] for r in rows),
                base_failed=sum(r['base_failed'] for r in rows),
                ridge_raises_max=max(r['ridge_raises_max'] for r in rows),
                **{key: {k: max(r[key][k] for r in rows) for k in ('cholesky', 'newton')}
                   for key in ('product_rel_err_max', 'output_rel_err_max')})


# ------------------------------------------------------------------ part 4: the authors' model
def official_model(dtype, seed=0):
    """``tiny-norm`` with OFFICIAL_PRESETS['norm'] on random weights in the authors' layout."""
    from official_layouts import soft_official_state_dict  # tests/ on PYTHONPATH
    from mmlinattn.models.backbones.soft import OFFICIAL_PRESETS, SOFT
    from mmlinattn.models.converters.soft import convert_soft_checkpoint
    model = SOFT(arch='tiny-norm', out_indices=(0, 1, 2, 3), **OFFICIAL_PRESETS['norm'])
    a = model.arch
    sd = soft_official_state_dict(a['embed_dims'], a['depths'], a['num_heads'], seed=seed)
    model.load_state_dict(convert_soft_checkpoint(sd)[0], strict=True)
    return model.to(dtype).eval()


def official(photo, size, seed=0):
    """The authors' model with an exact A^+ against pinv='cholesky' and their Newton steps."""
    x = load_photo(photo, size)
    probe = patched_attention(Probe(lsoft.fast_soft_attention))
    outs, layers = {}, {}
    try:
        for dtype in (torch.float64, torch.float32):
            model = official_model(dtype, seed)
            name = str(dtype).split('.')[1]
            for mode in ('pinv', 'cholesky', 'newton'):
                # the exact run also measures the three forms layer by layer
                probe.mode, probe.compare, probe.layers = mode, mode == 'pinv', []
                with torch.no_grad():
                    outs[name, mode] = [o.double() for o in model(x.to(dtype))]
                if mode == 'pinv':
                    layers[name] = [{k: layer[k] for k in (
                        'landmarks', 'heads', 'cond_A_max', 'newton_convergence_max',
                        'output_rel_err')} for layer in probe.layers]
    finally:
        restore_attention(probe)

    def diff(a, b):
        return [float((o - r).abs().max()) for o, r in zip(outs[a], outs[b])]
    rows = {}
    for dt in ('float64', 'float32'):
        for mode in ('cholesky', 'newton', 'pinv'):
            rows[f'{dt}_{mode}'] = dict(vs_exact_float64=diff((dt, mode), ('float64', 'pinv')),
                                        vs_exact_same_dtype=diff((dt, mode), (dt, 'pinv')))
    rows['output_abs_max'] = [float(o.abs().max()) for o in outs['float64', 'pinv']]
    print(json.dumps(rows), flush=True)
    return dict(arch='tiny-norm', preset="OFFICIAL_PRESETS['norm']",
                newton=dict(iters=20, init='paper'),
                weights=f'random, in the authors\' checkpoint layout (tests/official_layouts.py '
                        f'soft_official_state_dict, seed {seed}, landmark LayerNorm gain 0.3), '
                        f'through convert_soft_checkpoint',
                photo=photo, input_hw=list(size),
                measure='max |delta| per stage output (stages 1-4)', results=rows,
                layers=layers)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', required=True)
    parser.add_argument('--arch', default='small')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--size', type=int, nargs=2, default=list(SIZE))
    parser.add_argument('--skip-equality', action='store_true')
    parser.add_argument('--skip-cost', action='store_true')
    parser.add_argument('--variants', nargs='+', help='a subset of the cost variants (a check)')
    parser.add_argument('--float32', action='store_true', help='part 3')
    parser.add_argument('--float32-arch', default='tiny')
    parser.add_argument('--photos', nargs='+', default=list(SET_PHOTOS), help='part 3')
    parser.add_argument('--official', action='store_true', help="part 4, the authors' model")
    parser.add_argument('--official-size', type=int, nargs=2, default=[224, 224])
    args = parser.parse_args(argv)
    try:
        with open(args.out) as f:
            record = json.load(f)
    except FileNotFoundError:
        record = {}
    record.update(
        command='flock /tmp/mmlinattn-cpu.lock .venv/bin/python dev/soft_pinv_decision.py '
                + ' '.join(sys.argv[1:]),
        machine=f'{cpu_name()}, {os.cpu_count()} cores',
        date=datetime.date.today().isoformat(),
        torch=torch.__version__, python=platform.python_version())
    if not args.skip_equality:
        record['equality'] = equality(args.arch, PHOTOS, tuple(args.size))
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)
    if not args.skip_cost:
        record['cost'] = cost(args.rounds, PHOTOS[1], args.variants)
    command = record['command']
    if args.float32:   # photos of an earlier run with the same settings are kept
        new = float32_photos(args.float32_arch, args.photos, tuple(args.size))
        old = record.get('float32', {})
        if {k: v for k, v in old.items() if k not in ('photos', 'summary')} == {
                k: v for k, v in new.items() if k != 'photos'}:
            new['photos'] = [r for r in old['photos'] if r['photo'] not in args.photos] + \
                new['photos']
        for row in new['photos']:
            row.setdefault('command', command)
        new['summary'] = float32_summary(new['photos'])
        record['float32'] = new
        with open(args.out, 'w') as f:
            json.dump(record, f, indent=1)
    if args.official:  # one entry per input size
        h, w = args.official_size
        record.setdefault('official', {})[f'{h}x{w}'] = dict(official(PHOTOS[1], (h, w)),
                                                              command=command)
    with open(args.out, 'w') as f:
        json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
