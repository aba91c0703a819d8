"""Times LDN's linear-attention core (``mmlinattn.kernels.fast_linear_attention``, eager inference)
with the Triton kernels (``MMLINATTN_TRITON=1``) and without them (the chunked torch core
in a float32 island), in one process, for the four stages of a pyramid at each ``--size``,
in float16, bfloat16 and float32; and checks every result against the plain op in float64
on the same device.  Meant for a GPU: the kernels run on CUDA, or on the CPU in Triton's
interpreter (``TRITON_INTERPRET=1``, small ``--sizes``: a check of this script, not a time).

    PYTHONPATH=tools/analysis_tools python dev/bench_triton_core.py --sizes 2048 8192 \
        --json triton_core.json

Prints one row per (size, stage, dtype): milliseconds per call, median of ``--repeats``,
both ways, their ratio and each way's relative error (max |diff| / max |float64|); exit
status 0 when every error is within the dtype's tolerance (float32 1e-5, half 1e-2).
"""
import argparse
import json
import os
import sys

import torch

from benchlib.cases import median_ms
from mmlinattn import kernels, ops
from mmlinattn.kernels import policy

TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def run_core(q, k, v, triton: bool):
    os.environ[policy.TRITON_ENV] = '1' if triton else '0'
    with torch.no_grad():
        return kernels.fast_linear_attention(q, k, v)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--device', default='cuda')
    p.add_argument('--sizes', type=int, nargs='+', default=[2048, 8192],
                   help='image sides; stages at stride 4-32')
    # defaults: LDN-small (heads per stage, 32 channels per head)
    p.add_argument('--heads', type=int, nargs=4, default=[2, 4, 10, 16])
    p.add_argument('--head-dim', type=int, default=32)
    p.add_argument('--dtypes', nargs='+', default=['float16', 'bfloat16', 'float32'])
    p.add_argument('--repeats', type=int, default=10)
    p.add_argument('--json', help='write the rows here')
    args = p.parse_args(argv)
    device_type = torch.device(args.device).type
    if device_type not in policy.TRITON_DEVICES:
        from mmlinattn.kernels import triton_linear
        if not triton_linear.INTERPRETED:
            print(f'the Triton kernels run on {policy.TRITON_DEVICES}, or anywhere with '
                  f'TRITON_INTERPRET=1 set', file=sys.stderr)
            return 2
        policy.TRITON_DEVICES += (device_type, )
    rows, ok = [], True
    for size in args.sizes:
        for stage, heads in enumerate(args.heads):
            n = (size // (4 << stage)) ** 2
            g = torch.Generator(device=args.device).manual_seed(stage)
            q, k, v = (torch.randn(1, heads, n, args.head_dim, device=args.device, generator=g,
                                   dtype=torch.float64) for _ in range(3))
            want = ops.linear_attention(q, k, v)
            for name in args.dtypes:
                dtype = getattr(torch, name)
                qd, kd, vd = (t.to(dtype) for t in (q, k, v))
                row = dict(size=size, stage=stage + 1, heads=heads, tokens=n, dtype=name)
                for way, flag in (('triton', True), ('torch', False)):
                    try:
                        got = run_core(qd, kd, vd, flag)
                        err = ((got.double() - want).abs().max() / want.abs().max()).item()
                        row[f'{way}_error'] = err
                        ok &= err <= TOLERANCE[dtype]
                        row[f'{way}_ms'] = median_ms(lambda: run_core(qd, kd, vd, flag),
                                                   args.device, args.repeats)
                    except torch.cuda.OutOfMemoryError as exc:
                        row[f'{way}_ms'] = None
                        row[f'{way}_note'] = str(exc).splitlines()[0][:200]
                        torch.cuda.empty_cache()
                if row.get('triton_ms') and row.get('torch_ms'):
                    row['speedup'] = row['torch_ms'] / row['triton_ms']
                rows.append(row)
                print(f"{size}^2 stage {stage + 1} {heads} x {n:8d} tokens {name:8s} "
                      f"triton {row.get('triton_ms') or float('nan'):8.3f} ms "
                      f"(err {row.get('triton_error', float('nan')):.1e})  "
                      f"torch {row.get('torch_ms') or float('nan'):8.3f} ms "
                      f"(err {row.get('torch_error', float('nan')):.1e})  "
                      f"x{row.get('speedup', float('nan')):.2f}", flush=True)
    os.environ.pop(policy.TRITON_ENV, None)
    if args.json:
        with open(args.json, 'w') as f:
            name = (torch.cuda.get_device_name(args.device) if args.device.startswith('cuda')
                    else args.device)
            json.dump(dict(device=name, rows=rows), f, indent=1)
    if not ok:
        print('a result is off the float64 one by more than its tolerance', file=sys.stderr)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
