"""Latency of backbones in eager PyTorch, torch.compile, ONNX Runtime and OpenVINO, in one
process on one machine (batch 1, float32 unless ``openvino-bf16``, CPU).

    python tools/analysis_tools/benchmark_runtimes.py \\
        [--models NaLaFormer:small SOFT:small:max_landmarks=49 Swin-T ...] \\
        [--sizes 512 1024 2048] [--runtimes eager onnxruntime openvino [compile]
        [openvino-bf16]] \\
        [--rounds 3] [--threads 2] [--pair-with Swin-T] [--cpu-malloc reuse|system]
        [--json out.json] [--markdown out.md] [--plot out.png]

Models as in tools/analysis_tools/benchmark.py (``NAME:ARCH[:key=value]`` for ours, peer
names such as ``Swin-T``).  Each is exported to ONNX once with dynamic H, W (per size when
that fails, and straight away for Swin, whose forward fixes them), and compiled with
``dynamic=True`` (peers: per size); the timed forwards of a size are interleaved across
models and runtimes
(:mod:`benchlib.runtime_benchmark`).  ``speedup`` = eager / runtime latency.
``--pair-with PEER`` times each model in a group with PEER only, one group after the other
(the runtimes' working memory of every model at 2048² does not fit 24 GiB at once); the
table then has a PEER row per group, and ``/ peer`` is the latency ratio within the group.
``--cpu-malloc system`` (default) leaves glibc as it is; ``reuse`` (the default of
tools/analysis_tools/benchmark.py) makes it keep freed memory, which spares eager PyTorch a
page fault on every large tensor: measured both ways in
docs/benchmarks.md ("Runtimes").
"""
import argparse
import json
import sys
import time

from benchlib.memory import apply_cpu_malloc
from benchlib.runtime_benchmark import RUNTIME_CHOICES, benchmark, speedups
from benchlib.specs import FIXED_SIZE_EXPORT, build_model, parse_model_spec
from mmlinattn.utils.machine import cpu_name

DEFAULT_MODELS = ['SOFT:small:max_landmarks=49', 'NaLaFormer:small', 'InfViT:small',
                  'LDN:small', 'Swin-T']


def markdown(records) -> str:
    """Latency (speed-up over eager) per runtime; with paired groups also each model's
    latency over the peer's in the same group and runtime (``/ peer``)."""
    runtimes = list(dict.fromkeys(r['runtime'] for r in records))
    paired = {r.get('paired_with') for r in records} - {None}
    lines = ['| model | size | ' + ' | '.join(f'{rt} ms (speed-up)' for rt in runtimes)
             + (' | ' + ' | '.join(f'{rt} / peer' for rt in runtimes) if paired else '')
             + ' |', '|---|---|' + '---|' * len(runtimes) * (2 if paired else 1)]
    keys = list(dict.fromkeys((r['model'], r['size'], r.get('paired_with')) for r in records))
    by = {(r['model'], r['size'], r.get('paired_with'), r['runtime']): r for r in records}
    peer = {(r['paired_with'], r['size'], r['runtime']): r for r in records
            if r.get('paired_with') and r['status'] == 'ok'}
    for model, size, pair in keys:
        cells = []
        for rt in runtimes:
            r = by.get((model, size, pair, rt))
            if r is None or r['status'] != 'ok':
                cells.append('error' if r else '-')
            else:
                cells.append(f"{r['latency_ms']:.0f} ({r['speedup']:.2f}x)")
        if paired:
            for rt in runtimes:
                r, p = by.get((model, size, pair, rt)), peer.get((model, size, rt))
                ok = r is not None and p is not None and r['status'] == 'ok'
                cells.append(f"{r['latency_ms'] / p['latency_ms']:.2f}" if ok else '-')
        name = f'{model} (with {pair})' if pair else model
        lines.append(f'| {name} | {size}² | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines) + '\n'


def plot(path: str, records) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    runtimes = [rt for rt in dict.fromkeys(r['runtime'] for r in records) if rt != 'eager']
    models = list(dict.fromkeys(r['model'] for r in records))
    fig, axes = plt.subplots(1, len(runtimes), figsize=(5 * len(runtimes), 4), squeeze=False)
    for ax, rt in zip(axes[0], runtimes):
        for model in models:
            by_size = {}  # a paired peer has one record per group: their mean
            for r in records:
                if r['model'] == model and r['runtime'] == rt and r.get('speedup'):
                    by_size.setdefault(r['size'], []).append(r['speedup'])
            pts = [(size, sum(v) / len(v)) for size, v in sorted(by_size.items())]
            if pts:
                ax.plot(*zip(*pts), marker='o', label=model)
        ax.axhline(1.0, color='grey', lw=0.8)
        ax.set_xscale('log', base=2)
        ax.set_xlabel('input size (square)')
        ax.set_ylabel(f'speed-up over eager ({rt})')
        ax.set_title(rt)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='backbone latency per runtime')
    parser.add_argument('--models', nargs='+', default=DEFAULT_MODELS)
    parser.add_argument('--sizes', nargs='+', type=int, default=[512, 1024, 2048])
    parser.add_argument('--runtimes', nargs='+', choices=RUNTIME_CHOICES,
                        default=['eager', 'onnxruntime', 'openvino'])
    parser.add_argument('--rounds', type=int, default=3, help='timed forwards per case')
    parser.add_argument('--threads', type=int, default=2, help='intra-op threads, every runtime')
    parser.add_argument('--pair-with', metavar='PEER',
                        help='time each model in a group with PEER only (one of --models)')
    parser.add_argument('--cpu-malloc', choices=['reuse', 'system'], default='system',
                        help="'system': glibc's defaults; 'reuse': glibc keeps freed memory "
                        "(eager PyTorch without page faults on its large tensors, as in "
                        "tools/analysis_tools/benchmark.py)")
    parser.add_argument('--json')
    parser.add_argument('--markdown')
    parser.add_argument('--plot')
    args = parser.parse_args(argv)
    if 'eager' not in args.runtimes:
        parser.error('--runtimes must include eager (the speed-ups are relative to it)')
    if min(args.sizes) < 64:
        parser.error(f'--sizes must be at least 64, got {args.sizes}')
    cpu_malloc = apply_cpu_malloc(args.cpu_malloc)  # before the models' first tensors
    specs = [parse_model_spec(m) for m in args.models]
    models = {}
    for spec in specs:
        model = build_model(spec)
        model.eval()  # not chained: mmdet's backbones override train() without returning self
        models[spec.label] = model
    if args.pair_with and args.pair_with not in models:
        parser.error(f'--pair-with {args.pair_with} must be one of the --models labels '
                     f'{list(models)}')
    records = speedups(benchmark(models, args.sizes, args.runtimes, args.rounds,
                                 args.threads, log=lambda m: print(m, flush=True),
                                 peer=args.pair_with,
                                 static_compile=[s.label for s in specs if s.peer],
                                 static_export=[s.label for s in specs
                                                if s.peer and s.model in FIXED_SIZE_EXPORT]))
    table = markdown(records)
    print(table)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(cpu=cpu_name(), date=time.strftime('%Y-%m-%d %H:%M', time.gmtime()),
                           threads=args.threads, rounds=args.rounds, cpu_malloc=cpu_malloc,
                           records=records), f, indent=1)
    if args.markdown:
        with open(args.markdown, 'w') as f:
            f.write(table)
    if args.plot:
        plot(args.plot, records)
    return 0


if __name__ == '__main__':
    sys.exit(main())
