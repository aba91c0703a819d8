"""Times the linear-attention core's sums over tokens (``phi_k^T V`` and, in the backward,
``phi_q^T dL/du``) as one matmul and in segments (a batched matmul of segments, then their
sum; ``mmlinattn.kernels.chunked._token_sum``), in float32 like the core under
autocast, for the four stages of a pyramid at ``--size``.  Meant for a GPU, where the one
matmul leaves most of the device idle; it runs on the CPU too.

    PYTHONPATH=tools/analysis_tools python dev/bench_token_sums.py --device cuda --size 2048 \
        --json sums.json

Prints one row per stage: milliseconds per sum, median of ``--repeats``, for each segment
length (0: one matmul), and the fastest; exit status 0 when every result equals the one
matmul's (max |diff| / max |value| below 1e-4).
"""
import argparse
import json
import sys

import torch

from benchlib.cases import median_ms
import mmlinattn.kernels.chunked as la
from mmlinattn.kernels import policy


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--size', type=int, default=2048, help='image side; stages at stride 4-32')
    # defaults: LDN-small, whose core spent the most in this sum on an H100
    p.add_argument('--heads', type=int, nargs=4, default=[2, 4, 10, 16],
                   help='heads per stage (batch of the matmuls)')
    p.add_argument('--features', type=int, default=32, help='F: feature-map width per head')
    p.add_argument('--width', type=int, default=32, help='D: value width per head (+1 sum)')
    p.add_argument('--segments', type=int, nargs='+',
                   default=[0, 1024, 2048, policy.DEVICE_SEGMENT_TOKENS, 16384])
    p.add_argument('--repeats', type=int, default=20)
    p.add_argument('--json', help='write the rows here')
    args = p.parse_args(argv)
    rows, ok = [], True
    for stage, heads in enumerate(args.heads):
        n = (args.size // (4 << stage)) ** 2
        a = torch.rand(heads, n, args.features, device=args.device)
        b = torch.randn(heads, n, args.width + 1, device=args.device)
        want = la._token_sum(a, b, 0)
        row = dict(stage=stage + 1, heads=heads, tokens=n, ms={})
        for seg in args.segments:
            err = ((la._token_sum(a, b, seg) - want).abs().max() / want.abs().max()).item()
            ok &= err < 1e-4
            row['ms'][seg] = median_ms(lambda: la._token_sum(a, b, seg), args.device, args.repeats)
        row['fastest'] = min(row['ms'], key=row['ms'].get)
        rows.append(row)
        cells = '  '.join(f'{s}: {t:7.3f}' for s, t in row['ms'].items())
        print(f'stage {stage + 1}  {heads} x {n:7d} tokens  ms per sum  {cells}  '
              f'fastest: {row["fastest"]}')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(device=args.device, size=args.size, rows=rows), f, indent=1)
    if not ok:
        print('a segmented sum differs from the one matmul', file=sys.stderr)
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
