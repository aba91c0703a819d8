"""One backbone timed in several runtimes in one process: eager PyTorch, ``torch.compile``
(inductor), and its ONNX export in ONNX Runtime and OpenVINO (``tools/analysis_tools/
benchmark_runtimes.py``).

Each model is exported once with dynamic H, W and run at every size; a model whose export
cannot serve every size (e.g. a peer that branches on the input size) is exported per size
(``export: fixed``).  ``torch.compile`` compiles ours with ``dynamic=True`` (one graph for
every size, as they promise) and the models named in ``static_compile`` (the peers) per size
(``dynamic=False``, ``export: fixed``): mmdet's Swin-T compiles far faster per size than
with ``dynamic=True`` (docs/user_guides/deployment.md).  The timed
forwards of all (model, runtime) pairs of a size are interleaved round by round in a
shuffled order, so that a drifting machine speed falls on all of them alike; each pair gets
one untimed warm-up forward first.

ONNX Runtime and OpenVINO keep their working memory between runs, so at 2048² the runners
of every model and runtime do not fit a 24 GiB machine together.  With ``peer`` (e.g.
Swin-T) each model is timed in a group of its own with the peer (both in every runtime),
group after group, and only one group's runners are alive at a time; the peer's records
carry ``paired_with`` (the model of their group), and every ratio to the peer is taken
within a group.
"""
import gc
import os
import random
import statistics
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch

from mmlinattn.deployment import TensorGraph, export_onnx, load_runtime

#: ``openvino-bf16``: OpenVINO with bf16 inference precision (CPUs with bf16 instructions)
RUNTIME_CHOICES = ('eager', 'compile', 'onnxruntime', 'openvino', 'openvino-bf16')


class _Model:
    """A built backbone and its runners, made lazily per size."""

    def __init__(self, label: str, module: torch.nn.Module, workdir: str, threads: int,
                 compile_dynamic: bool = True, export_dynamic: bool = True):
        self.label, self.graph = label, TensorGraph(module).eval()
        self.workdir, self.threads = workdir, threads
        self.compile_dynamic = compile_dynamic
        self.dynamic_path = None
        self.export_mode = None if export_dynamic else 'fixed'
        self.compiled = None

    def mode(self, runtime: str) -> Optional[str]:
        """``'dynamic'`` (one graph for all sizes) or ``'fixed'`` (per size); None for eager."""
        if runtime == 'compile':
            return 'dynamic' if self.compile_dynamic else 'fixed'
        return self.export_mode if runtime.startswith(('onnxruntime', 'openvino')) else None

    def onnx_path(self, h: int, w: int) -> str:
        if self.export_mode is None:  # first use: try one dynamic export
            path = os.path.join(self.workdir, f'{self.label}.onnx')
            try:
                export_onnx(self.graph, torch.randn(1, 3, 64, 96), path)
                self.dynamic_path, self.export_mode = path, 'dynamic'
            except RuntimeError:
                self.export_mode = 'fixed'
        if self.export_mode == 'dynamic':
            return self.dynamic_path
        path = os.path.join(self.workdir, f'{self.label}_{h}x{w}.onnx')
        if not os.path.exists(path):
            export_onnx(self.graph, torch.randn(1, 3, h, w), path, dynamic_hw=False)
        return path

    def runner(self, runtime: str, h: int, w: int) -> Callable:
        if runtime == 'eager':
            return self.graph
        if runtime == 'compile':
            if self.compiled is None:
                self.compiled = torch.compile(self.graph, dynamic=self.compile_dynamic)
            return self.compiled
        # OpenVINO with the graph's H, W fixed to the size timed (as a peer's per-size export
        # is): its kernels for dynamic shapes are much slower (load_runtime's static_shapes)
        openvino = runtime.startswith('openvino')
        return load_runtime(self.onnx_path(h, w), 'openvino' if openvino else runtime,
                            self.threads, static_shapes=openvino,
                            precision='bf16' if runtime == 'openvino-bf16' else 'f32')


def groups_of(labels: Sequence[str], peer: Optional[str]) -> List[List[str]]:
    """The models timed together: all at once, or each with ``peer``."""
    if peer is None:
        return [list(labels)]
    if peer not in labels:
        raise ValueError(f'the peer {peer!r} is not among the models {list(labels)}')
    others = [label for label in labels if label != peer]
    return [[label, peer] for label in others] or [[peer]]


def benchmark(models: Dict[str, torch.nn.Module], sizes: Sequence[int],
              runtimes: Sequence[str], rounds: int = 3, threads: int = 2, seed: int = 0,
              log: Callable[[str], None] = print, peer: Optional[str] = None,
              static_compile: Sequence[str] = (), static_export: Sequence[str] = ()
              ) -> List[dict]:
    """Median latency (ms) of one batch-1 forward per (model, runtime, size); with
    ``peer``, group by group; the models in ``static_compile`` compiled per size, those in
    ``static_export`` exported per size without a dynamic attempt (module docstring)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _benchmark(models, sizes, runtimes, rounds, threads, seed, log, peer,
                          static_compile, static_export)
    finally:  # the caller's thread count back (2 threads left set slowed a test process)
        torch.set_num_threads(previous)


def _benchmark(models, sizes, runtimes, rounds, threads, seed, log, peer, static_compile,
               static_export):
    rng = random.Random(seed)
    records = []
    with tempfile.TemporaryDirectory() as workdir, torch.no_grad():
        built = {label: _Model(label, m, workdir, threads,
                               compile_dynamic=label not in static_compile,
                               export_dynamic=label not in static_export)
                 for label, m in models.items()}
        for size in sizes:
            for group in groups_of(list(built), peer):
                pair = group[0] if peer is not None and len(group) > 1 else None
                records += _time_group({k: built[k] for k in group}, size, runtimes, rounds,
                                       rng, log, peer if pair else None, pair)
                gc.collect()  # the group's sessions go before the next group's
    return records


def _time_group(built: Dict[str, '_Model'], size: int, runtimes: Sequence[str], rounds: int,
                rng: random.Random, log: Callable[[str], None], peer: Optional[str],
                pair: Optional[str]) -> List[dict]:
    """One group's interleaved rounds at ``size``; its runners are freed on return."""
    records = []
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(size))
    runners, times = {}, {}
    for label, model in built.items():
        for runtime in runtimes:
            key = (label, runtime)
            try:
                start = time.perf_counter()
                runners[key] = model.runner(runtime, size, size)
                runners[key](x)  # warm-up (and the compile, for 'compile')
                log(f'{label} {runtime} {size}: ready in '
                    f'{time.perf_counter() - start:.0f} s')
                times[key] = []
            except Exception as err:  # reported in the table, not a crash
                log(f'{label} {runtime} {size}: {type(err).__name__}: '
                    f'{str(err)[:200]}')
                record = dict(model=label, runtime=runtime, size=size, status='error',
                              error=str(err)[:300])
                if label == peer:
                    record['paired_with'] = pair
                records.append(record)
    for _ in range(rounds):
        order = list(times)
        rng.shuffle(order)
        for key in order:
            start = time.perf_counter()
            runners[key](x)
            times[key].append(1000 * (time.perf_counter() - start))
    for (label, runtime), ts in times.items():
        record = dict(model=label, runtime=runtime, size=size, status='ok',
                      latency_ms=statistics.median(ts), export=built[label].mode(runtime))
        if label == peer:
            record['paired_with'] = pair
        records.append(record)
    runners.clear()
    return records


def speedups(records: List[dict]) -> List[dict]:
    """Each ok record with ``speedup`` = eager latency / its latency (same model, size)."""
    eager = {(r['model'], r['size'], r.get('paired_with')): r['latency_ms'] for r in records
             if r['status'] == 'ok' and r['runtime'] == 'eager'}
    out = []
    for r in records:
        base = eager.get((r['model'], r['size'], r.get('paired_with')))
        out.append(dict(r, speedup=base / r['latency_ms'] if base and r['status'] == 'ok'
                        else None))
    return out
