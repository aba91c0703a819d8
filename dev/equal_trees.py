"""Bit-for-bit equality of every backbone between two checkouts (a refactor's "nothing moves").

    python dev/equal_trees.py --before /work/base --after . --json records/kernels/equal.json

For each tree and each kernel mode (``MMLINATTN_KERNELS=plain``; the fast eager forms with
``MMLINATTN_COMPILE=0``; with compiled loops, ``MMLINATTN_COMPILE=1``, on a subset), one
subprocess run from that tree (its own package first on the path) builds every family's tiny
arch with each option setting the backbones expose (one option changed at a time, seed 0),
runs eval (no autograd) and train (forward and backward) in float64 (and float32, where the
oneDNN forms run), and saves the outputs, the input's gradient and every parameter's
gradient.  The two trees' tensors are then compared with ``torch.equal``.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ARCHS = {
    'SOFT': dict(type='SOFT', arch=dict(embed_dims=(32, 64, 96, 128), num_heads=(1, 2, 3, 4),
                                        depths=(1, 1, 2, 1))),
    'NaLaFormer': dict(type='NaLaFormer', arch=dict(embed_dims=(16, 32, 48, 64),
                                                    depths=(1, 1, 2, 1),
                                                    num_heads=(1, 2, 3, 4), mlp_ratios=2.0)),
    'InfViT': dict(type='InfViT', arch=dict(embed_dims=(16, 32, 48, 64), depths=(1, 2, 1, 1),
                                            mlp_ratios=(2, 2, 2, 2))),
    'InfViTPlain': dict(type='InfViTPlain', arch=dict(embed_dims=32, num_layers=3, num_heads=4,
                                                      mlp_ratio=2.0), out_indices=(0, 1, 2)),
    'LDN': dict(type='LDN', arch=dict(embed_dims=[16, 32, 64, 64], depths=[2, 1, 2, 1],
                                      num_heads=[1, 2, 2, 2])),
}
#: every option the backbones expose, one changed at a time from the default
OPTIONS = {
    'SOFT': [{}, dict(newton_init='paper'), dict(newton_init='scaled'), dict(pinv='cholesky'),
             dict(sym_norm=False), dict(landmark_ln_gelu=False), dict(max_landmarks=6),
             dict(landmark_grid='crop', max_landmarks=6), dict(newton_ridge=1e-3),
             dict(newton_iters=5), dict(drop_path_rate=0.2), dict(with_cp=True),
             dict(frozen_stages=1), dict(norm_eval=True),
             dict(arch='small', max_landmarks=6),
             dict(arch=dict(ARCHS['SOFT']['arch'], post_norm=True))],
    'NaLaFormer': [{}, dict(kernel='relu_split'), dict(kernel='relu_split_rope'),
                   dict(attn_types='softmax'), dict(cpe=False), dict(lepe=False),
                   dict(softmax_rope=False), dict(out_norm=False),
                   dict(fuse_feature_maps=False), dict(lam=2.0, alpha=10.0),
                   dict(drop_path_rate=0.2), dict(with_cp=True), dict(frozen_stages=1)],
    'InfViT': [{}, dict(stage_mixers='pure'), dict(stage_mixers='pure', pure_chunk_size=16),
               dict(gamma_mode='power'), dict(learn_gamma=True, gamma=0.5),
               dict(qkv_bias=False), dict(tie_qk=False), dict(pool_then_project=False),
               dict(use_dwconv=False), dict(ffn_recompute='none'), dict(ffn_recompute='last'),
               dict(stem='conv'), dict(drop_path_rate=0.2), dict(with_cp=True),
               dict(frozen_stages=1)],
    'InfViTPlain': [{}, dict(mixer='pure'), dict(with_cls_token=False),
                    dict(gamma_mode='const'), dict(learn_gamma=True, gamma=0.5),
                    dict(tie_qk=False), dict(qkv_bias=False)],
    'LDN': [{}, dict(feature_map='relu'), dict(layer_scale_init_value=None),
            dict(use_diffusion=False), dict(use_local=False), dict(use_attn=False),
            dict(taps='k5'), dict(integrator='implicit_dct'), dict(n_steps=2),
            dict(diffusion_groups=2), dict(pos_enc=None), dict(stem='conv'),
            dict(overlap_downsample=True), dict(drop_path_rate=0.2), dict(with_cp=True),
            dict(frozen_stages=1)],
}
MODES = {'plain': dict(MMLINATTN_KERNELS='plain', MMLINATTN_COMPILE='0'),
         'fast': dict(MMLINATTN_KERNELS='fast', MMLINATTN_COMPILE='0'),
         'compiled': dict(MMLINATTN_KERNELS='fast', MMLINATTN_COMPILE='1')}
#: the compiled mode runs each family's default only (inductor compiles per shape)
COMPILED_SUBSET = True

WORKER = r'''
import json, sys, torch
import mmlinattn.models  # noqa: F401
from mmlinattn.registry import MODELS
cases, out, compiled_subset = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == '1'
torch.set_num_threads(1)
result, errors = {}, {}
for name, (cfg, dtype) in cases.items():
    if compiled_subset and not name.endswith('|{}|float64'):
        continue
    dt = getattr(torch, dtype)
    try:
        torch.manual_seed(0)
        model = MODELS.build(cfg).to(dt)
        x = torch.randn(2, 3, 56, 72, dtype=dt)
        model.eval()
        with torch.no_grad():
            for i, o in enumerate(model(x)):
                result[f'{name}|eval|out{i}'] = o
        model.train()
        xg = x.clone().requires_grad_()
        torch.manual_seed(1)
        outs = model(xg)
        weights = [torch.randn(o.shape, dtype=dt) for o in outs]
        sum((o * w).sum() for o, w in zip(outs, weights)).backward()
        for i, o in enumerate(outs):
            result[f'{name}|train|out{i}'] = o.detach()
        result[f'{name}|train|grad_x'] = xg.grad
        for k, p in model.named_parameters():
            if p.grad is not None:
                result[f'{name}|train|grad|{k}'] = p.grad
    except Exception as e:  # an option a tree does not know: recorded, compared
        errors[name] = f'{type(e).__name__}: {e}'
torch.save(dict(result=result, errors=errors), out)
'''


def cases(families=tuple(OPTIONS)):
    out = {}
    for fam, options in OPTIONS.items():
        if fam not in families:
            continue
        for opt in options:
            for dtype in ('float64', 'float32'):
                cfg = dict(ARCHS[fam], **opt)
                if opt.get('arch') == 'small':
                    cfg['arch'] = 'small'
                out[f'{fam}|{json.dumps(opt, sort_keys=True)}|{dtype}'] = (cfg, dtype)
    return out


def run_tree(tree, mode, path, families):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), **MODES[mode],
               OMP_NUM_THREADS='1')
    subset = '1' if mode == 'compiled' and COMPILED_SUBSET else '0'
    subprocess.run([sys.executable, '-c', WORKER, json.dumps(cases(families)), path, subset],
                   cwd=tree, env=env, check=True)


def main():
    import torch
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--before', required=True)
    parser.add_argument('--after', required=True)
    parser.add_argument('--modes', nargs='+', default=list(MODES), choices=list(MODES))
    parser.add_argument('--families', nargs='+', default=list(OPTIONS), choices=list(OPTIONS))
    parser.add_argument('--json')
    args = parser.parse_args()
    summary = dict(before=os.path.abspath(args.before), after=os.path.abspath(args.after),
                   families=args.families, modes={}, machine=_machine())
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            t = time.time()
            got = {}
            for side in ('before', 'after'):
                path = os.path.join(tmp, f'{side}_{mode}.pt')
                run_tree(getattr(args, side), mode, path, args.families)
                got[side] = torch.load(path, weights_only=True)
            a, b = got['before']['result'], got['after']['result']
            differ = sorted(k for k in a.keys() & b.keys() if not torch.equal(a[k], b[k]))
            missing = sorted(a.keys() ^ b.keys())
            summary['modes'][mode] = dict(
                tensors=len(a), cases=len({'|'.join(k.split('|')[:3]) for k in a}),
                differ=differ[:50], n_differ=len(differ), missing=missing[:50],
                errors_before=got['before']['errors'], errors_after=got['after']['errors'],
                seconds=round(time.time() - t, 1))
            print(f"{mode}: {summary['modes'][mode]['cases']} cases (family x option x "
                  f"dtype), {len(a)} tensors; differ {len(differ)}, missing {len(missing)}, "
                  f"errors {len(got['before']['errors'])}/{len(got['after']['errors'])}",
                  flush=True)
    summary['all_equal'] = all(m['n_differ'] == 0 and not m['missing']
                               and m['errors_before'] == m['errors_after']
                               for m in summary['modes'].values())
    print('ALL BIT-EQUAL' if summary['all_equal'] else 'DIFFERENCES FOUND')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(summary, f, indent=1)
    return 0 if summary['all_equal'] else 1


def _machine():
    import platform
    try:
        with open('/proc/cpuinfo') as f:
            model = next(line.split(':', 1)[1].strip() for line in f if 'model name' in line)
    except (OSError, StopIteration):
        model = platform.processor()
    return f'{model}, {os.cpu_count()} cores'


if __name__ == '__main__':
    sys.exit(main())
