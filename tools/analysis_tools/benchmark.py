#!/usr/bin/env python
"""Latency, peak memory, parameters and FLOPs of mmlinattn backbones and their mmdet peers
across input sizes, each case in its own process with a memory cap and a time limit.

Examples::

    python tools/analysis_tools/benchmark.py --quick --json out.json
    python tools/analysis_tools/benchmark.py \\
        --models SOFT:small:max_landmarks=49 Swin-T \\
        --sizes 512 1024 2048 --json cpu.json --csv cpu.csv --plot cpu.png
    python tools/analysis_tools/benchmark.py --device cuda --dtype float16 \\
        --json gpu.json   # any CUDA box

Models: ours as ``NAME:ARCH[:key=value ...]`` (a registry name of ``mmlinattn.MODELS``, an
arch name or dict, then constructor keywords, values parsed as Python literals), e.g.
``SOFT:small``, ``SOFT:small:max_landmarks=64``, ``InfViT:small:stage_mixers='pure'``; the
peers by name, optionally with keywords: ``Swin-T`` (mmdet ``SwinTransformer()``, the tiny
defaults), ``PVTv2-b1`` / ``PVTv2-b2`` (mmdet ``PyramidVisionTransformerV2`` with the b1 / b2
settings of mmdet's configs), ``ResNet-50`` (mmdet ``ResNet(depth=50)``).

What each number means (see ``docs/benchmarks.md``):

* ``latency_ms_*``: wall time of one forward (``mode='infer'``, ``torch.no_grad``, eval mode)
  or one forward + backward of ``sum(mean(out))`` (``mode='train'``, train mode), median /
  min / max over the timed repeats after the warm-up; CUDA runs are synchronised.
* ``gflops``: FLOPs of that step from ``torch.utils.flop_counter.FlopCounterMode`` (a
  multiply-add is 2 FLOPs; every matmul, einsum, convolution and attention kernel, grouped
  convolution backward counted per group), ``newton_gflops``: the part spent in SOFT++'s
  Newton-Schulz pseudo-inverse (forward iterations), ``gmacs = gflops / 2``.
* ``peak_mem_mb``: the memory a step needs beyond the built model and its input, taken over
  one plain step after the warm-up (not the FLOP-counting step, which runs with the fused
  paths off, nor the first plain step's one-time costs such as compiling).  CPU: the peak
  RSS of the case's process (``VmHWM``, reset just before that step through
  ``/proc/self/clear_refs``) minus its RSS at that moment.  CUDA:
  ``torch.cuda.max_memory_allocated()`` minus the allocated bytes at that moment;
  ``peak_total_mb`` is the absolute peak (VmHWM / allocator peak).
* ``status``: ``ok``, ``oom`` (allocation failed under the memory cap, or the process was
  killed by the kernel), ``timeout`` (killed after ``--timeout`` s), ``skipped`` (a smaller
  size of the same model and mode already hit oom / timeout) or ``error``.

* ``latency_method``: ``isolated`` (the case's own process, the timed steps after its
  warm-up) or ``interleaved`` (``--interleave R``, the default on CPU: R more steps of each
  model of that size and mode, each model warm in a process of its own, the models stepping
  one at a time, once per round, in a shuffled order; the isolated times are kept as
  ``isolated_latency_ms_*``) or ``interleaved_pairs`` (``--interleave-pairs``, and whenever
  the warm workers of all models would not fit in memory together: each model interleaved
  with the reference peer alone; its ratio to the peer comes from those rounds,
  ``paired_ref_latency_ms_median``) or ``alternated_pairs`` (the same, where the two warm
  workers would not fit in memory together, as in training at 2048² on 24 GiB, or with
  ``--interleave-pairs alternate``: one worker process at a time, a fresh one per timed
  step; for the peer: when any of its pairs was alternated).

The cases run size by size (every model at the smallest size, then the next size), so the
models compared at one size are measured minutes apart on a machine whose speed drifts; the
interleaved rounds then put every model's timed steps into the same minutes.  The outputs
list the records model by model.  Each case runs in a fresh child process forked from a
server process that has only imported the libraries (``multiprocessing`` ``forkserver``).
On CPU the child builds the model, runs one step on a 64 x 64 input (lazy imports, thread
pool, kernel set-up), allocates the input, then caps its address space at its current size
plus ``--mem-cap-mb`` (``RLIMIT_AS``): the step itself may add at most that much.  On CUDA
``--mem-cap-mb`` sets ``torch.cuda.set_per_process_memory_fraction``.

The measuring machinery is :mod:`benchlib`; this file is its command line.
"""
import argparse
import json
import os
import sys
import time

from benchlib import environment, parse_model_spec, parse_size, run_sweep
from benchlib.interleave import PAIR_METHODS
from benchlib.memory import mem_available_mb
from benchlib.report import (markdown_ratios, markdown_summary, plot_title, replot,
                                        write_csv, write_markdown, write_plot)
from benchlib.specs import (CPU_SIZES, DEFAULT_MODELS, GPU_EXTRA_SIZES, GPU_SIZES,
                                       INTERLEAVE_ROUNDS, QUICK_SIZES)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--models', nargs='+', default=None,
                   help=f'model specs (default: {" ".join(DEFAULT_MODELS)})')
    p.add_argument('--sizes', nargs='+', default=None,
                   help='square sizes S or HxW (default CPU: 512 1024 2048; quick: 256 512; '
                        'CUDA: 512 ... 8192, plus 9216 for InfViTPlain:l4)')
    p.add_argument('--device', default='cpu', help="'cpu' or 'cuda[:i]'")
    p.add_argument('--dtype', default=None, choices=['float32', 'float16', 'bfloat16'],
                   help='compute dtype (default float32 on CPU, float16 on CUDA); half '
                        'dtypes run under autocast unless --cast-model')
    p.add_argument('--cast-model', action='store_true',
                   help='convert the model and input to --dtype instead of autocast')
    p.add_argument('--compile', action='store_true',
                   help='torch.compile each model (compilation happens in the warm-up steps; '
                        'FLOPs are counted on fake tensors of the eager model)')
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--train', action='store_true',
                   help='also measure forward + backward (mode "train")')
    p.add_argument('--modes', nargs='+', choices=['infer', 'train'], default=None,
                   help='modes to measure (default: infer; infer train with --train)')
    p.add_argument('--warmup', type=int, default=None,
                   help='warm-up steps (the first one counts the FLOPs); default 1')
    p.add_argument('--repeats', type=int, default=None,
                   help='timed steps of the isolated run of each case (default 5; 2 with '
                        '--quick or --interleave)')
    p.add_argument('--interleave', type=int, default=None, metavar='R',
                   help='after the isolated runs at a size, time R more steps of every model '
                        'that ran there, each warm in its own process, one step per model per '
                        'round in a shuffled order; these steps then give the latency fields '
                        '(default: '
                        f'{INTERLEAVE_ROUNDS} on CPU, 0 = off with --quick and on CUDA). '
                        'Models whose step takes longer than --budget / R keep their '
                        'isolated times')
    p.add_argument('--interleave-pairs', nargs='?', const='warm', default=None,
                   choices=PAIR_METHODS,
                   help='interleave each model with the reference peer (Swin-T) alone instead '
                        'of all models together; the default when all would not fit in '
                        'memory together (training at detection sizes). A pair keeps both '
                        "workers warm ('warm', the default) where they fit in memory together; "
                        "otherwise, or with 'alternate', one worker at a time, a fresh one "
                        'for every timed step (build and 2 untimed steps each)')
    p.add_argument('--budget', type=float, default=None,
                   help='seconds of timed steps per case before stopping early (at least one '
                        'step; default 60, quick 8)')
    p.add_argument('--timeout', type=float, default=None,
                   help='hard time limit per case in s, build and warm-up included '
                        '(default CPU 600, quick 90, CUDA 600)')
    p.add_argument('--mem-cap-mb', type=float, default=None,
                   help='CPU: address space a step may add to the built model and its input '
                        '(RLIMIT_AS; default 70%% of MemAvailable at start); CUDA: device memory '
                        'via set_per_process_memory_fraction (default: no cap)')
    p.add_argument('--threads', type=int, default=0,
                   help='torch intra-op threads per case (default: torch default)')
    p.add_argument('--cpu-malloc', choices=['reuse', 'system'], default='reuse',
                   help="CPU: 'reuse' makes glibc keep freed memory for reuse instead of "
                        "returning it to the kernel (no page faults on every large tensor, "
                        "like CUDA's caching allocator; ~40%% faster at 2048^2 for every model "
                        "here) for the timed steps; peak memory is always taken in the "
                        "warm-up under glibc's defaults. 'system': glibc's defaults throughout")
    p.add_argument('--flops', choices=['real', 'fake', 'none'], default='real',
                   help='count FLOPs during the first warm-up step (real), on fake tensors '
                        'before running (fake) or not at all; failed cases are re-counted '
                        'on fake tensors unless none')
    p.add_argument('--no-skip', action='store_true',
                   help='run larger sizes even after an oom / timeout of the same model')
    p.add_argument('--profile', type=int, default=0, metavar='K',
                   help='store the top-K ops of one profiled step per case (torch.profiler)')
    p.add_argument('--matmul-size', type=int, default=None,
                   help='n of the n x n matmul rate probe (default 2048 CPU, 8192 CUDA)')
    p.add_argument('--copy-mib', type=int, default=512,
                   help='MiB copied by the bandwidth probe (the memory side of the roofline '
                        'bound; default 512, above any last-level cache)')
    p.add_argument('--quick', action='store_true',
                   help='small sizes, fewer repeats: all families and peers in < 5 min on '
                        '2 CPU cores')
    p.add_argument('--json', default=None, help='output JSON (records + meta + summary)')
    p.add_argument('--csv', default=None, help='output CSV (records)')
    p.add_argument('--plot', default=None, help='output PNG (log-log latency and memory)')
    p.add_argument('--replot', metavar='JSON', default=None,
                   help='only re-render --plot from the --json of a finished run')
    p.add_argument('--plot-time', choices=['wall', 'cpu'], default='wall',
                   help='time axis of the plot: wall latency or process CPU time per step (the '
                        'load-robust choice with --threads 1 on a shared machine)')
    p.add_argument('--markdown', default=None, help='output Markdown tables')
    p.add_argument('--quiet', action='store_true')
    return p.parse_args(argv)


def _settings(args) -> dict:
    """The run's settings with every default resolved (see the flags' help)."""
    cuda = args.device.startswith('cuda')
    interleave = args.interleave
    if interleave is None:
        interleave = 0 if args.quick or cuda else INTERLEAVE_ROUNDS
    repeats = args.repeats
    if repeats is None:
        repeats = 2 if args.quick or interleave else 5
    mem_cap = args.mem_cap_mb
    if mem_cap is None and not cuda:
        avail = mem_available_mb()
        mem_cap = 0.7 * avail if avail else None
    return dict(
        cuda=cuda, dtype=args.dtype or ('float16' if cuda else 'float32'),
        modes=args.modes or (['infer', 'train'] if args.train else ['infer']),
        warmup=1 if args.warmup is None else args.warmup, interleave=interleave,
        repeats=repeats, mem_cap=mem_cap,
        budget=args.budget if args.budget is not None else (8.0 if args.quick else 60.0),
        timeout=args.timeout if args.timeout is not None else (90.0 if args.quick else 600.0),
        matmul_size=args.matmul_size or (8192 if cuda else 2048))


def main(argv=None) -> dict:
    args = parse_args(argv)
    time_key = 'cpu_ms_median' if args.plot_time == 'cpu' else 'latency_ms_median'
    if args.replot:
        if not args.plot:
            raise SystemExit('--replot JSON needs --plot PNG')
        replot(args.replot, args.plot, time_key)
        return {}
    s = _settings(args)
    specs = [parse_model_spec(m) for m in (args.models or DEFAULT_MODELS)]
    if args.sizes:
        sizes = [parse_size(v) for v in args.sizes]
    else:
        sizes = [(v, v) for v in (GPU_SIZES if s['cuda'] else QUICK_SIZES if args.quick
                                  else CPU_SIZES)]
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    t_start, started = time.perf_counter(), time.strftime('%Y-%m-%d %H:%M:%S')
    env_start = environment(args.device)
    case_kwargs = dict(batch=args.batch, device=args.device, dtype=s['dtype'],
                       cast_model=args.cast_model, compile=args.compile, threads=args.threads,
                       cpu_malloc=args.cpu_malloc, warmup=s['warmup'], repeats=s['repeats'],
                       budget_s=s['budget'], mem_cap_mb=s['mem_cap'], flops=args.flops,
                       profile=args.profile)
    res = run_sweep(specs, sizes, s['modes'], case_kwargs, timeout=s['timeout'],
                    interleave=s['interleave'], matmul_size=s['matmul_size'],
                    copy_mib=args.copy_mib,
                    no_skip=args.no_skip, interleave_pairs=args.interleave_pairs,
                    extra_sizes=GPU_EXTRA_SIZES if s['cuda'] and not args.sizes else None,
                    log=log)
    env = environment(args.device)
    meta = dict(
        command=' '.join([os.path.basename(sys.argv[0])] + (sys.argv[1:] if argv is None
                                                            else list(argv))),
        started=started, wall_s=time.perf_counter() - t_start,
        device=args.device, dtype=s['dtype'], batch=args.batch, threads=args.threads or None,
        cpu_count=env['cpu_count'], platform=env['platform'], processor=env['processor'],
        torch=env['torch'], python=env['python'], loadavg_start=env_start['loadavg'],
        loadavg_end=env['loadavg'], mem_cap_mb=s['mem_cap'], timeout_s=s['timeout'],
        warmup=s['warmup'], repeats=s['repeats'], budget_s=s['budget'], quick=args.quick,
        cpu_malloc=None if s['cuda'] else args.cpu_malloc, interleave=res['interleave'],
        matmul=res['matmul'], gpu=env['gpu'])
    records, summary = res['records'], res['summary']
    out = dict(meta=meta, records=records, summary=summary)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=1, default=str)
    if args.csv:
        write_csv(args.csv, records)
    if args.plot and not any(r['status'] == 'ok' for r in records):
        log(f'no case ran to the end, so there is nothing to plot: {args.plot} not written')
    elif args.plot:
        write_plot(args.plot, records, title=plot_title(meta, time_key, records),
                   time_key=time_key)
    if args.markdown:
        write_markdown(args.markdown, records, summary)
    log('\n' + markdown_summary(summary) + '\n\n' + markdown_ratios(summary))
    log(f"total wall time {meta['wall_s']:.0f}s")
    return out


if __name__ == '__main__':
    main()
