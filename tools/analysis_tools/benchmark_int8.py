"""Latency of backbones in ONNX Runtime or OpenVINO, float32 against int8 (static QDQ,
Conv / MatMul / Gemm), batch 1 on the CPU, in one process: the timed forwards of a size
interleaved across models and precisions, the median of ``--rounds``; above
``--together-max-size`` one model's two graphs at a time (each record names the models
timed in its rounds, ``timed_with``).

    python tools/analysis_tools/benchmark_int8.py [--models SOFT:small:max_landmarks=49 ...
        Swin-T] [--sizes 1024 2048] [--rounds 3] [--threads 2] [--calib-size 512]
        [--calib-inputs 4] [--runtime onnxruntime|openvino] [--float-depthwise]
        [--quantizer onnxruntime|nncf] [--json out.json]

Both runtimes run the same two graphs: ONNX Runtime executes the QDQ pairs as written,
OpenVINO folds them into its own int8 kernels.  ``--quantizer nncf`` times OpenVINO's own
quantizer (NNCF, its default preset with one scale per activation tensor) instead.

Our backbones are exported once with dynamic H, W and calibrated at ``--calib-size``; a
peer whose forward fixes its size (Swin-T) is exported and calibrated per size (its
calibration at 2048² keeps every intermediate tensor of a forward, beyond 24 GiB: skipped
above ``--peer-max-size``).  Calibration uses random normal inputs, which is enough for the
latency: the metric drop is measured on real images with tools/deployment/quantize_onnx.py
and tools/test.py (docs/user_guides/deployment.md).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

from benchlib.specs import FIXED_SIZE_EXPORT, build_model, parse_model_spec
from mmlinattn.deployment import TensorGraph, export_onnx, load_runtime
from mmlinattn.deployment.quantize import quantize_nncf, quantize_static
from mmlinattn.utils.machine import cpu_name

DEFAULT_MODELS = ['SOFT:small:max_landmarks=49', 'NaLaFormer:small', 'InfViT:small',
                  'LDN:small', 'Swin-T']


def parse_args(argv=None):
    p = argparse.ArgumentParser(description='float32 vs int8 latency in a CPU runtime')
    p.add_argument('--models', nargs='+', default=DEFAULT_MODELS,
                   help='model specs, e.g. NaLaFormer:small or Swin-T (default: the four '
                        "families' small archs and Swin-T)")
    p.add_argument('--sizes', nargs='+', type=int, default=[1024, 2048],
                   help='square input sizes to time')
    p.add_argument('--rounds', type=int, default=3, help='timed forwards per graph (median)')
    p.add_argument('--threads', type=int, default=2, help="the runtimes' intra-op threads")
    p.add_argument('--calib-size', type=int, default=512,
                   help='square size of the calibration inputs (dynamic-size exports)')
    p.add_argument('--calib-inputs', type=int, default=4,
                   help='random calibration inputs per int8 graph')
    p.add_argument('--peer-max-size', type=int, default=1024,
                   help='largest size at which a fixed-size model (Swin-T) is calibrated')
    p.add_argument('--together-max-size', type=int, default=1024,
                   help='up to this size all models are loaded and timed in the same rounds; '
                        'above it one model (its two graphs) at a time: at 2048² the '
                        'runtimes of the four families and the peer together exceed 24 GiB')
    p.add_argument('--runtime', default='onnxruntime', choices=('onnxruntime', 'openvino'),
                   help='runtime of both graphs (OpenVINO with static shapes)')
    p.add_argument('--quantizer', default='onnxruntime', choices=('onnxruntime', 'nncf'),
                   help="onnxruntime: the static QDQ graph of quantize_onnx.py (either "
                        "runtime); nncf: OpenVINO's NNCF (OpenVINO only)")
    p.add_argument('--float-depthwise', action='store_true',
                   help='keep the depthwise convolutions of the int8 graphs in float32')
    p.add_argument('--fixed', action='store_true',
                   help='export and calibrate every model per size (fixed H, W)')
    p.add_argument('--json', help='write the records here')
    return p.parse_args(argv)


def _graphs(label, graph, size, args, workdir, fixed):
    """(float32 path, int8 path) for ``graph`` at ``size``."""
    at = size if fixed else args.calib_size
    stem = os.path.join(workdir, f'{label.replace(":", "_")}' + (f'_{size}' if fixed else ''))
    fp32 = stem + '.onnx'
    nncf = args.quantizer == 'nncf'
    int8 = stem + ('.nncf.xml' if nncf else '.int8.onnx')
    if not os.path.exists(fp32):
        export_onnx(graph, torch.randn(1, 3, at, at), fp32, dynamic_hw=not fixed)
    if not os.path.exists(int8):
        gen = torch.Generator().manual_seed(0)
        inputs = [torch.randn(1, 3, at, at, generator=gen).numpy()
                  for _ in range(args.calib_inputs)]
        if nncf:
            quantize_nncf(fp32, int8, inputs, args.float_depthwise)
        else:
            quantize_static(fp32, int8, inputs, float_depthwise=args.float_depthwise)
    return fp32, int8


def _time_group(labels, models, size, args, workdir):
    """Both precisions of every model of ``labels`` loaded together and timed in the same
    rounds (so drift reaches them alike); their records, each naming the group."""
    runners = {}
    for label in labels:
        graph, fixed = models[label]
        paths = _graphs(label, graph, size, args, workdir, fixed)
        for precision, path in zip(('float32', 'int8'), paths):
            runners[label, precision] = load_runtime(path, args.runtime, args.threads,
                                                     static_shapes=args.runtime == 'openvino')
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    times = {key: [] for key in runners}
    for run in runners.values():  # warm-up
        run(x)
    for _ in range(args.rounds):
        for key, run in runners.items():
            t = time.perf_counter()
            run(x)
            times[key].append(1000 * (time.perf_counter() - t))
    for label in labels:
        f, i = (statistics.median(times[label, p]) for p in ('float32', 'int8'))
        print(f'{size}² {label:32s} float32 {f:8.1f} ms  int8 {i:8.1f} ms  '
              f'speed-up {f / i:.2f}x', flush=True)
    return [dict(model=label, precision=precision, size=size, ms=statistics.median(ts),
                 runs=ts, timed_with=list(labels))
            for (label, precision), ts in times.items()]


def main(argv=None):
    args = parse_args(argv)
    if args.quantizer == 'nncf' and args.runtime != 'openvino':
        raise SystemExit('--quantizer nncf writes an OpenVINO graph: use it with --runtime '
                         'openvino')
    torch.set_num_threads(args.threads)
    records = []
    with tempfile.TemporaryDirectory() as workdir:
        models = {}
        for text in args.models:
            spec = parse_model_spec(text)
            models[text] = (TensorGraph(build_model(spec)).eval(),
                            spec.model in FIXED_SIZE_EXPORT or args.fixed)
        for size in args.sizes:
            labels = []
            for label, (graph, fixed) in models.items():
                if fixed and size > args.peer_max_size:
                    print(f'{label} at {size}: skipped (calibration above --peer-max-size)')
                    continue
                labels.append(label)
            groups = [labels] if size <= args.together_max_size else [[l] for l in labels]
            for group in groups:
                records += _time_group(group, models, size, args, workdir)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(cpu=cpu_name(), runtime=args.runtime, threads=args.threads,
                           rounds=args.rounds, quantizer=args.quantizer,
                           float_depthwise=args.float_depthwise,
                           records=records), f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
