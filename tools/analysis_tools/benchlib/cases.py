"""One benchmark case: a (model, input size, mode) measured in the current process, meant for
a fresh child (:func:`case_child` through :func:`~.isolation.run_isolated`), and the dense
matmul rate of the machine for reference.

What each number means (``docs/benchmarks.md``):

* ``latency_ms_*``: wall time of one forward (``mode='infer'``, ``torch.no_grad``, eval mode)
  or one forward + backward of ``sum(mean(out))`` (``mode='train'``, train mode), median /
  min / max over the timed repeats after the warm-up; CUDA runs are synchronised.
* ``flops_total``: FLOPs of that step (:mod:`.flops`), ``flops_newton``: the part spent in
  SOFT++'s Newton-Schulz pseudo-inverse, ``block_bytes``: the bytes of every block's input
  and output in its forward (counted with the FLOPs).
* ``peak_mem_mb``: the memory a step needs beyond the built model and its input.  CPU: the
  peak RSS (``VmHWM``, reset just before the first step) minus the RSS after the model and
  the input were created; with ``cpu_malloc='reuse'`` glibc's mmap threshold is fixed at
  128 KiB until then (:func:`~.memory.return_freed_cpu_memory`), so that RSS follows the live
  tensors.  CUDA: ``torch.cuda.max_memory_allocated()`` minus the allocated
  bytes after the model and the input were created; ``peak_total_mb`` is the absolute peak.

On CPU the case builds the model, runs one step on a 64 x 64 input (lazy imports, thread
pool, kernel set-up), allocates the input, then caps its address space at its current size
plus ``mem_cap_mb`` (``RLIMIT_AS``): the step itself may add at most that much.  On CUDA
``mem_cap_mb`` sets ``torch.cuda.set_per_process_memory_fraction``.
"""
import os
import statistics
import time
import traceback
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .flops import count_block_bytes, count_flops
from .memory import (apply_cpu_malloc, cap_address_space, current_rss_kb, is_oom, peak_rss_kb,
                     reset_peak_rss, return_freed_cpu_memory)
from .specs import ModelSpec, build_model
from .stats import time_stats

__all__ = ['Case', 'run_case', 'case_child', 'make_step', 'prepared_model', 'case_input',
           'sync', 'median_ms', 'matmul_rate', 'matmul_child', 'copy_bandwidth']


@dataclass
class Case:
    spec: Dict[str, Any]
    height: int
    width: int
    batch: int = 1
    mode: str = 'infer'
    device: str = 'cpu'
    dtype: str = 'float32'
    cast_model: bool = False
    compile: bool = False            # torch.compile the model (FLOPs then counted on fake tensors)
    threads: int = 0
    cpu_malloc: str = 'reuse'        # 'reuse' (glibc keeps freed memory) or 'system'
    warmup: int = 1
    repeats: int = 5
    budget_s: float = 60.0
    mem_cap_mb: Optional[float] = None
    flops: str = 'real'              # 'real' (during the first warm-up step), 'fake', 'none'
    profile: int = 0                 # top-k hotspots from torch.profiler (0 = off)
    seed: int = 0


def sync(device: str) -> None:
    import torch
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def median_ms(fn, device: str, repeats: int) -> float:
    """Median wall milliseconds of ``repeats`` calls of ``fn`` after one untimed call
    (compilation, library handles), each synchronised on ``device``."""
    fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _autocast(case: Case):
    import torch
    if case.dtype == 'float32' or case.cast_model:
        return nullcontext()
    return torch.autocast(device_type=case.device.split(':')[0], dtype=getattr(torch, case.dtype))


def make_step(model, x, case: Case):
    import torch

    def infer():
        with torch.no_grad(), _autocast(case):
            return model(x)

    def train():
        model.zero_grad(set_to_none=True)
        with _autocast(case):
            outs = model(x)
            loss = sum(o.float().mean() for o in outs)
        loss.backward()
        return outs

    return infer if case.mode == 'infer' else train


def _fake_flops(model, case: Case) -> Dict[str, int]:
    """FLOPs of one step on fake tensors (shapes only: no compute, no activation memory)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    totals: Dict[str, int] = {}
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(case.batch, 3, case.height, case.width, device=case.device,
                        dtype=getattr(torch, case.dtype) if case.cast_model else torch.float32)
        step = make_step(model, x, case)
        with count_flops(totals), count_block_bytes(model, totals):
            step()
    model.zero_grad(set_to_none=True)
    return totals


def _top_ops(prof, k: int, device: str) -> Tuple[List[dict], float]:
    """The ``k`` ops with the most self time in ``prof`` and the total of all of them (ms).
    On CUDA the rows are the kernels themselves: an aten op's self device time repeats
    that of the kernels it launched, and the kernels' total is the time the GPU was busy."""
    from torch.autograd import DeviceType
    cuda = device.startswith('cuda')
    rows = []
    for e in prof.key_averages():
        if cuda and e.device_type == DeviceType.CPU:
            continue
        t = e.self_device_time_total if cuda else e.self_cpu_time_total
        rows.append(dict(op=e.key, self_ms=t / 1e3, calls=e.count))
    rows.sort(key=lambda r: -r['self_ms'])
    total = sum(r['self_ms'] for r in rows)
    for r in rows:
        r['share'] = r['self_ms'] / (total or 1.0)
    return rows[:k], total


def prepared_model(spec: ModelSpec, case: Case):
    """The built model in the case's mode, dtype (``cast_model``) and device."""
    import torch
    model = build_model(spec)
    model.train(case.mode == 'train')
    if case.cast_model and case.dtype != 'float32':
        model = model.to(getattr(torch, case.dtype))
    return model.to(case.device)


def case_input(case: Case, hw: Optional[Tuple[int, int]] = None):
    """The case's random input batch (``hw``: another size, batch 1)."""
    import torch
    dtype = getattr(torch, case.dtype) if case.cast_model else torch.float32
    shape = (case.batch, 3, case.height, case.width) if hw is None else (1, 3, *hw)
    return torch.randn(shape, device=case.device, dtype=dtype)


def run_case(case: Case) -> Dict[str, Any]:
    """Measure one (model, size, mode) in the current process; returns a result dict.

    Meant to run in a fresh child (see :func:`~.isolation.run_isolated`): it caps the address space
    (CPU), resets the peak-RSS counter and changes global torch settings.
    """
    res: Dict[str, Any] = dict(status='error', note='')
    import torch
    if case.threads:
        torch.set_num_threads(case.threads)
    mem_limit = None
    torch.manual_seed(case.seed)
    spec = ModelSpec(**case.spec)
    cuda = case.device.startswith('cuda')
    # peak memory is taken before the switch to reuse; until then freed memory goes back to
    # the kernel from the first allocation on, so the peak RSS is the live tensors' peak
    live_rss = not cuda and case.cpu_malloc == 'reuse' and return_freed_cpu_memory()
    model = x = None
    try:
        model = prepared_model(spec, case)
        res['params_m'] = sum(p.numel() for p in model.parameters()) / 1e6
        if case.flops == 'fake' or (case.compile and case.flops == 'real'):
            totals = _fake_flops(model, case)
            res.update(flops_total=totals['total'], flops_newton=totals['newton'],
                       block_bytes=totals['block_bytes'], flops_method='fake')
        if case.repeats <= 0 and case.warmup <= 0:
            res['status'] = 'ok'
            return res
        if cuda and case.mem_cap_mb:
            total = torch.cuda.get_device_properties(torch.device(case.device)).total_memory
            torch.cuda.set_per_process_memory_fraction(
                min(1.0, case.mem_cap_mb * 2**20 / total), torch.device(case.device))
        if not cuda and case.mem_cap_mb:
            # one (eager) step on a small input first, so that lazy imports, the thread pool
            # (a thread that cannot get its stack aborts the process instead of raising) and
            # kernel initialisation happen before the cap
            small = min(64, case.height), min(64, case.width)
            make_step(model, case_input(case, small), case)()
            model.zero_grad(set_to_none=True)
        if case.compile:
            model = torch.compile(model)
        x = case_input(case)
        if not cuda and case.mem_cap_mb:
            # the step may add at most mem_cap_mb of address space to the built model + input
            mem_limit = cap_address_space(case.mem_cap_mb)
        step = make_step(model, x, case)
        sync(case.device)
        # the baseline until the one taken after the warm-up (below); it stays where the
        # CPU's peak cannot be reset (a failed warm-up also keeps it in the record)
        if cuda:
            base = torch.cuda.memory_allocated()
            res['mem_method'] = 'cuda_max_memory_allocated'
        else:
            base = current_rss_kb() * 1024
            res['mem_method'] = (('vmhwm_reset' if reset_peak_rss() else 'ru_maxrss')
                                 + ('_mmap_128k' if live_rss else ''))
        res['baseline_mem_mb'] = base / 2**20

        # the FLOP-counting step runs under a dispatch mode, where our compiled functions
        # (NaLa's feature maps, SOFT++'s kernel) stay eager: at least one plain step follows
        # it, which compiles them (seconds) before the steps that are measured
        counted = case.flops == 'real' and not case.compile
        n_warm = counted + max(case.warmup - counted, 1)
        for i in range(n_warm):
            if i == 0 and counted:
                totals: Dict[str, int] = {}
                with count_flops(totals), count_block_bytes(model, totals):
                    step()
                res.update(flops_total=totals['total'], flops_newton=totals['newton'],
                           block_bytes=totals['block_bytes'], flops_method='real')
            else:
                step()
            sync(case.device)
        # memory is a warmed-up plain step's peak above what is resident just before it: not
        # the FLOP-counting step's (a dispatch mode with global module hooks, which turns the
        # fused paths off), nor the first plain step's one-time costs (compiled code, the
        # compiler's own import: ~100 MiB of RSS), nor the compilation of a compiled model;
        # the gradients a training step makes count (the step frees them first)
        model.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        elif reset_peak_rss():
            base = current_rss_kb() * 1024
        else:
            res['mem_method'] += '_incl_warmup'
        res['baseline_mem_mb'] = base / 2**20
        peak_default_malloc = None
        if not cuda:
            # memory while freed tensors go back to the kernel (the live tensors' peak), then
            # the timed steps under the chosen allocator
            if case.cpu_malloc == 'reuse':
                step()
                peak_default_malloc = peak_rss_kb() * 1024
                res['cpu_malloc'] = apply_cpu_malloc('reuse')
                step()  # untimed: grows the kept heap once
            else:
                res['cpu_malloc'] = 'system'
        times, cpu_times = [], []
        start = time.perf_counter()
        while len(times) < case.repeats:
            t0, c0 = time.perf_counter(), time.process_time()
            step()
            sync(case.device)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
            if time.perf_counter() - start + times[-1] > case.budget_s:
                break
        if cuda:
            peak = torch.cuda.max_memory_allocated()
        else:
            peak = peak_default_malloc or peak_rss_kb() * 1024
        res.update(repeats=len(times), peak_total_mb=peak / 2**20,
                   peak_mem_mb=max(peak - base, 0) / 2**20, status='ok')
        if times:
            res.update(time_stats(times, cpu_times), latency_method='isolated')
        res['threads'] = torch.get_num_threads()
        if len(times) < case.repeats:
            res['note'] = f'time budget {case.budget_s:g}s: {len(times)} of {case.repeats} repeats'
        if case.profile:
            os.environ.setdefault('KINETO_LOG_LEVEL', '5')  # no profiler chatter on stderr
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=acts) as prof:
                step()
                sync(case.device)
            res['hotspots'], res['profiled_ms'] = _top_ops(prof, case.profile, case.device)
    except Exception as exc:  # noqa: BLE001  (every failure is a result)
        res['status'] = 'oom' if is_oom(exc) else 'error'
        msg = f'{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc) else ""}'
        if res['status'] == 'error':
            msg += ' | ' + traceback.format_exc(limit=-3).replace('\n', ' ')[-600:]
        res['note'] = msg
    finally:
        del model, x
    if mem_limit is not None:
        res['mem_limit_mb'] = mem_limit / 2**20
    return res


def case_child(case: Case, conn) -> None:
    """:func:`run_case` in a child process: sends its result (or the failure) on ``conn``."""
    try:
        res = run_case(case)
    except BaseException as exc:  # noqa: BLE001
        res = dict(status='oom' if is_oom(exc) else 'error', note=repr(exc)[:500])
    try:
        conn.send(res)
    finally:
        conn.close()


def matmul_child(device: str, dtype: str, n: int, threads: int, cpu_malloc: str,
                 copy_mib: int, conn) -> None:
    """:func:`matmul_rate` and :func:`copy_bandwidth` in a child process (under the
    allocator setting of the cases): one dict."""
    try:
        if not device.startswith('cuda'):
            apply_cpu_malloc(cpu_malloc)
        res = matmul_rate(device, dtype, n, threads)
        res.update(copy_bandwidth(device, copy_mib))
        conn.send(res)
    except BaseException as exc:  # noqa: BLE001
        conn.send(dict(status='error', note=repr(exc)[:300]))
    conn.close()


def matmul_rate(device: str, dtype: str, n: int, threads: int = 0,
                repeats: int = 10) -> Dict[str, Any]:
    """Dense ``n x n @ n x n`` rate in GFLOP/s (2 n^3 FLOPs per product), median of repeats."""
    import torch
    if threads:
        torch.set_num_threads(threads)
    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)
    for _ in range(2):
        a @ b
    sync(device)
    times, cpu_times = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    flops = 2 * n**3
    return dict(status='ok', n=n, dtype=dtype, threads=torch.get_num_threads(),
                gflops_per_s=flops / statistics.median(times) / 1e9,
                best_gflops_per_s=flops / min(times) / 1e9,
                gflops_per_cpu_s=flops / statistics.median(cpu_times) / 1e9)


def copy_bandwidth(device: str, mib: int, repeats: int = 5) -> Dict[str, Any]:
    """Memory bandwidth in GB/s: a copy of ``mib`` MiB into another buffer reads and writes
    it once (2 x ``mib`` MiB of traffic), median of repeats; ``mib`` well above the
    last-level cache (the default of tools/analysis_tools/benchmark.py: 512)."""
    import torch
    src = torch.ones(mib * 2**18, device=device)     # float32: 2^18 per MiB
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), device, repeats)
    return dict(copy_mib=mib, bandwidth_gb_per_s=2 * mib * 2**20 / (ms / 1e3) / 1e9)
