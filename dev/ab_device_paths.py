"""Times whole backbones with one of the off-CPU paths switched on and off in the same
process: ``segments`` (the linear-attention core's sums over tokens as a batched matmul of
segments, ``DEVICE_SEGMENT_TOKENS``; off: one matmul) or ``slices`` (depthwise convs past
cuDNN's 32-bit index limit on channel slices, ``INDEX32_ELEMENTS``; off: whole).  Meant for
a GPU; on the CPU neither path runs, so both sides time the same code.

    PYTHONPATH=tools/analysis_tools python dev/ab_device_paths.py --change segments \\
        --models LDN:small NaLaFormer:small --sizes 2048 8192 --json ab.json

Eval forward, batch 1, under autocast in ``--dtype``; after one warm-up forward per side
(compilation, peak memory and outputs), the sides alternate for ``--rounds`` rounds.  One
row per model and size: median ms on and off, their ratio, peak MiB of each side (CUDA) and
the largest output difference relative to the largest output value.
"""
import argparse
import contextlib
import json
import statistics
import time

import torch

from benchlib.cases import sync
from benchlib.specs import build_model, parse_model_spec
from mmlinattn.kernels import policy

#: change -> (module, constant, value when off)
CHANGES = {'segments': (policy, 'DEVICE_SEGMENT_TOKENS', 0),
           'slices': (policy, 'INDEX32_ELEMENTS', 2**62)}


@contextlib.contextmanager
def switched(change: str, on: bool):
    """The path of ``change`` as shipped (``on``) or its off value, restored on exit."""
    module, name, off = CHANGES[change]
    kept = getattr(module, name)
    setattr(module, name, kept if on else off)
    try:
        yield
    finally:
        setattr(module, name, kept)


def _peak_reset(device: str) -> None:
    if device.startswith('cuda'):
        torch.cuda.reset_peak_memory_stats()


def _peak_mib(device: str) -> float:
    return torch.cuda.max_memory_allocated() / 2**20 if device.startswith('cuda') else 0.0


def ab_case(spec: str, size: int, change: str, device: str, dtype: str, rounds: int) -> dict:
    model = build_model(parse_model_spec(spec)).to(device).eval()
    x = torch.randn(1, 3, size, size, device=device)
    cast = torch.autocast(device.split(':')[0], dtype=getattr(torch, dtype),
                          enabled=dtype != 'float32')

    def forward():
        with torch.no_grad(), cast:
            out = model(x)
        sync(device)
        return out

    outs, peak, times = {}, {}, {True: [], False: []}
    for on in (True, False):
        with switched(change, on):
            forward()
            _peak_reset(device)
            outs[on] = [o.float() for o in forward()]
            peak[on] = _peak_mib(device)
    diff = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
               for a, b in zip(outs[True], outs[False]))
    del outs
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            with switched(change, on):
                t0 = time.perf_counter()
                forward()
                times[on].append((time.perf_counter() - t0) * 1e3)
    on_ms, off_ms = statistics.median(times[True]), statistics.median(times[False])
    return dict(model=spec, size=size, change=change, device=device, dtype=dtype,
                on_ms=on_ms, off_ms=off_ms, ratio=on_ms / off_ms, on_all_ms=times[True],
                off_all_ms=times[False], peak_mib_on=peak[True], peak_mib_off=peak[False],
                rel_diff=diff)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--change', choices=sorted(CHANGES), required=True)
    p.add_argument('--models', nargs='+', required=True, help='benchmark model specs')
    p.add_argument('--sizes', type=int, nargs='+', default=[2048])
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--dtype', default='float16', choices=['float16', 'bfloat16', 'float32'])
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--json', help='write the rows here')
    args = p.parse_args(argv)
    if args.device == 'cpu':
        print('on the CPU neither path runs: both sides time the same code')
    rows = []
    for spec in args.models:
        for size in args.sizes:
            row = ab_case(spec, size, args.change, args.device, args.dtype, args.rounds)
            rows.append(row)
            print(f'{spec} {size}² {args.change}: on {row["on_ms"]:.1f} ms, off '
                  f'{row["off_ms"]:.1f} ms, on / off {row["ratio"]:.2f}, peak MiB '
                  f'{row["peak_mib_on"]:.0f} / {row["peak_mib_off"]:.0f}, outputs differ by '
                  f'{row["rel_diff"]:.1e}', flush=True)
            if args.device.startswith('cuda'):
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
