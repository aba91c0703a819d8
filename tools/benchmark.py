#!/usr/bin/env python
"""Latency, peak memory, parameters and FLOPs of mmlinattn backbones and their mmdet peers
across input sizes, each case in its own process with a memory cap and a time limit.

Examples::

    .venv/bin/python tools/benchmark.py --quick --json out.json
    .venv/bin/python tools/benchmark.py --models SOFT:small:max_landmarks=49 Swin-T \\
        --sizes 512 1024 2048 --json cpu.json --csv cpu.csv --plot cpu.png
    python tools/benchmark.py --device cuda --dtype float16 --json gpu.json   # any CUDA box

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
* ``peak_mem_mb``: the memory a step needs beyond the built model and its input.  CPU: the
  peak RSS of the case's process (``VmHWM``, reset just before the first step through
  ``/proc/self/clear_refs``) minus its RSS after the model and the input were created.
  CUDA: ``torch.cuda.max_memory_allocated()`` minus the allocated bytes after the model and
  the input were created; ``peak_total_mb`` is the absolute peak (VmHWM / allocator peak).
* ``status``: ``ok``, ``oom`` (allocation failed under the memory cap, or the process was
  killed by the kernel), ``timeout`` (killed after ``--timeout`` s), ``skipped`` (a smaller
  size of the same model and mode already hit oom / timeout) or ``error``.

* ``latency_method``: ``isolated`` (the case's own process, the timed steps after its
  warm-up) or ``interleaved`` (``--interleave R``, the default on CPU: R more steps of each
  model of that size and mode, each model warm in a process of its own, the models stepping
  one at a time, once per round, in a shuffled order; the isolated times are kept as
  ``isolated_latency_ms_*``).

The cases run size by size (every model at the smallest size, then the next size), so the
models compared at one size are measured minutes apart on a machine whose speed drifts; the
interleaved rounds then put every model's timed steps into the same minutes.  The outputs
list the records model by model.  Each case runs in a fresh child process forked from a
server process that has only imported the libraries (``multiprocessing`` ``forkserver``).
On CPU the child builds the model, runs
one step on a 64 x 64 input (lazy imports, thread pool, kernel set-up), allocates the input,
then caps its address space at its current size plus ``--mem-cap-mb`` (``RLIMIT_AS``): the
step itself may add at most that much.  On CUDA ``--mem-cap-mb`` sets
``torch.cuda.set_per_process_memory_fraction``.
"""
import argparse
import ast
import csv
import json
import math
import multiprocessing as mp
import os
import platform
import random
import statistics
import sys
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

# ----------------------------------------------------------------------------- model specs
#: peers: canonical name -> (mmdet class, constructor keywords, arch label)
PEERS: Dict[str, Tuple[str, dict, str]] = {
    'Swin-T': ('SwinTransformer', {}, 'tiny'),
    'PVTv2-b1': ('PyramidVisionTransformerV2', dict(embed_dims=64, num_layers=[2, 2, 2, 2]),
                 'b1'),
    'PVTv2-b2': ('PyramidVisionTransformerV2', dict(embed_dims=64, num_layers=[3, 4, 6, 3]),
                 'b2'),
    'ResNet-50': ('ResNet', dict(depth=50), '50'),
}
_PEER_ALIASES = {k.lower().replace('-', '').replace('_', ''): k for k in PEERS}
_PEER_ALIASES.update({'swin': 'Swin-T', 'swintiny': 'Swin-T', 'r50': 'ResNet-50',
                      'resnet50': 'ResNet-50'})

#: default model set: every family's ``small`` (SOFT++ with the landmark cap and with the
#: paper's rule), the paper's plain InfViT, and the peers.
DEFAULT_MODELS = ['SOFT:small:max_landmarks=49', 'SOFT:small', 'NaLaFormer:small',
                  'InfViT:small', 'LDN:small', 'InfViTPlain:l4', 'Swin-T', 'PVTv2-b1',
                  'PVTv2-b2', 'ResNet-50']
CPU_SIZES = [512, 1024, 2048]
QUICK_SIZES = [256, 512]
GPU_SIZES = [512, 1024, 2048, 4096, 8192]
#: extra sizes per model label on CUDA (the InfViT paper's headline: 9216^2, 4 layers)
GPU_EXTRA_SIZES = {'InfViTPlain:l4': [9216]}

RECORD_FIELDS = [
    'model', 'arch', 'label', 'options', 'height', 'width', 'batch', 'mode', 'device', 'dtype',
    'tokens', 'params_m', 'gflops', 'gmacs', 'newton_gflops', 'flops_method',
    'latency_ms_median', 'latency_ms_min', 'latency_ms_max', 'cpu_ms_median', 'cpu_ms_min',
    'cpu_ms_max', 'repeats', 'peak_mem_mb', 'peak_total_mb', 'baseline_mem_mb', 'mem_method',
    'achieved_gflops_per_s', 'matmul_fraction', 'achieved_gflops_per_cpu_s',
    'matmul_fraction_cpu', 'threads', 'cpu_malloc', 'latency_method',
    'isolated_latency_ms_median', 'isolated_latency_ms_min', 'isolated_latency_ms_max',
    'status', 'note'
]
#: rounds of the interleaved timing of a full CPU run (``--interleave``)
INTERLEAVE_ROUNDS = 4


@dataclass
class ModelSpec:
    """A parsed ``--models`` entry."""
    label: str
    model: str                       # registry name or peer name
    arch: Any = None                 # arch name / dict (ours) or peer arch label
    kwargs: Dict[str, Any] = field(default_factory=dict)
    peer: bool = False

    @property
    def arch_label(self) -> str:
        base = self.arch if isinstance(self.arch, str) else json.dumps(self.arch)
        if self.kwargs:
            base += '[' + ','.join(f'{k}={v!r}' for k, v in self.kwargs.items()) + ']'
        return base


def _split_top(text: str, sep: str = ':') -> List[str]:
    """Split on ``sep`` outside brackets and quotes (an arch dict may contain colons)."""
    parts, depth, quote, cur = [], 0, None, ''
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in '\'"':
            quote = ch
        elif ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(cur)
            cur = ''
            continue
        cur += ch
    parts.append(cur)
    return parts


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_model_spec(text: str) -> ModelSpec:
    """``NAME[:ARCH][:key=value ...]`` -> :class:`ModelSpec` (see the module docstring)."""
    parts = [p.strip() for p in _split_top(text.strip())]
    if not parts[0]:
        raise ValueError(f'model spec {text!r}: empty model name; expected NAME[:ARCH]'
                         f'[:key=value ...] or one of {list(PEERS)}')
    name, rest = parts[0], parts[1:]
    arch = None
    if rest and (rest[0].startswith('{') or '=' not in rest[0]):
        arch = _literal(rest[0]) if rest[0].startswith('{') else rest[0]
        rest = rest[1:]
    kwargs = {}
    for item in rest:
        key, eq, val = item.partition('=')
        if not eq or not key.strip().isidentifier():
            raise ValueError(f'model spec {text!r}: {item!r} is not key=value')
        kwargs[key.strip()] = _literal(val.strip())
    peer = _PEER_ALIASES.get(name.lower().replace('-', '').replace('_', ''))
    if peer is not None:
        if arch is not None:
            raise ValueError(f'model spec {text!r}: the peer {peer} takes no arch field, only '
                             f'key=value overrides')
        return ModelSpec(text, peer, PEERS[peer][2], kwargs, peer=True)
    if arch is None:
        raise ValueError(f'model spec {text!r}: our backbones need an arch, e.g. '
                         f'{name}:small; peers are {list(PEERS)}')
    return ModelSpec(text, name, arch, kwargs)


def build_model(spec: ModelSpec):
    """Build the backbone of a spec (imports mmdet only for peers)."""
    if spec.peer:
        import mmdet.models.backbones as mmdet_backbones
        cls_name, kwargs, _ = PEERS[spec.model]
        return getattr(mmdet_backbones, cls_name)(**{**kwargs, **spec.kwargs})
    import mmlinattn.models  # noqa: F401  (registers the backbones)
    from mmlinattn.registry import MODELS
    return MODELS.build(dict(type=spec.model, arch=spec.arch, **spec.kwargs))


# ----------------------------------------------------------------------------- FLOPs
def _conv_backward_flops(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding,
                         _dilation, transposed, _output_padding, _groups, output_mask,
                         out_shape=None, **kwargs) -> int:
    """Convolution backward FLOPs, grouped convolutions counted per group.

    torch's own formula treats the input as the weight of a dense convolution for
    ``grad_weight``, which for a depthwise conv counts ``C x (H W)^2`` products; each of
    ``grad_input`` and ``grad_weight`` costs exactly the forward's multiply-adds.
    """
    from torch.utils.flop_counter import conv_flop_count
    fwd = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed=transposed)
    return fwd * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def flop_counter(**kwargs):
    """``FlopCounterMode`` with the grouped-convolution backward fixed."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    mapping = {torch.ops.aten.convolution_backward: _conv_backward_flops}
    return FlopCounterMode(display=False, custom_mapping=mapping, **kwargs)


@contextmanager
def scoped_flops(module, attr: str, totals: Dict[str, int], key: str):
    """Count the FLOPs spent inside ``module.attr`` (a function) into ``totals[key]``.

    A nested counter sees the function's ops; the enclosing counter still counts them
    too, because each dispatch mode forwards every op to the next one on the stack.
    """
    orig = getattr(module, attr, None)
    if orig is None:
        yield
        return

    def wrapped(*args, **kwargs):
        with flop_counter() as inner:
            out = orig(*args, **kwargs)
        totals[key] = totals.get(key, 0) + inner.get_total_flops()
        return out

    setattr(module, attr, wrapped)
    try:
        yield
    finally:
        setattr(module, attr, orig)


@contextmanager
def count_flops(totals: Dict[str, int]):
    """Count every FLOP of the enclosed code into ``totals['total']`` and SOFT++'s
    Newton-Schulz iterations into ``totals['newton']``."""
    try:
        import mmlinattn.ops.soft as soft_ops
    except ImportError:  # a peer-only environment
        soft_ops = None
    scope = (scoped_flops(soft_ops, 'newton_schulz_pinv', totals, 'newton')
             if soft_ops is not None else nullcontext())
    totals.setdefault('newton', 0)
    with scope, flop_counter() as fc:
        yield
    totals['total'] = fc.get_total_flops()


# ----------------------------------------------------------------------------- memory
def _proc_status_kb(key: str) -> Optional[int]:
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if not possible."""
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        return True
    except OSError:
        return False


def _peak_rss_kb() -> int:
    hwm = _proc_status_kb('VmHWM')
    if hwm is not None:
        return hwm
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _current_rss_kb() -> int:
    rss = _proc_status_kb('VmRSS')
    return rss if rss is not None else _peak_rss_kb()


def _cap_address_space(cap_mb: float) -> Optional[int]:
    """RLIMIT_AS = current address-space size + ``cap_mb``; the limit in bytes or None."""
    import resource
    vm = _proc_status_kb('VmSize')
    if vm is None:
        return None
    limit = vm * 1024 + int(cap_mb * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return limit


def is_oom(exc: BaseException) -> bool:
    """Allocation failure (CPU under RLIMIT_AS, CUDA, C++ bad_alloc)."""
    if isinstance(exc, MemoryError):
        return True
    msg = str(exc).lower()
    return any(s in msg for s in ('out of memory', "can't allocate memory", 'bad_alloc',
                                  'cannot allocate memory', 'not enough memory'))


# ----------------------------------------------------------------------------- one case
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


def _sync(device: str) -> None:
    import torch
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def _autocast(case: Case):
    import torch
    if case.dtype == 'float32' or case.cast_model:
        return nullcontext()
    return torch.autocast(device_type=case.device.split(':')[0], dtype=getattr(torch, case.dtype))


def _make_step(model, x, case: Case):
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
        step = _make_step(model, x, case)
        with count_flops(totals):
            step()
    model.zero_grad(set_to_none=True)
    return totals


def _top_ops(prof, k: int, device: str) -> List[dict]:
    cuda = device.startswith('cuda')
    rows = []
    for e in prof.key_averages():
        t = (getattr(e, 'self_device_time_total', 0) if cuda else e.self_cpu_time_total)
        rows.append(dict(op=e.key, self_ms=t / 1e3, calls=e.count))
    rows.sort(key=lambda r: -r['self_ms'])
    total = sum(r['self_ms'] for r in rows) or 1.0
    for r in rows:
        r['share'] = r['self_ms'] / total
    return rows[:k]


def _prepared_model(spec: ModelSpec, case: Case):
    """The built model in the case's mode, dtype (``cast_model``) and device."""
    import torch
    model = build_model(spec)
    model.train(case.mode == 'train')
    if case.cast_model and case.dtype != 'float32':
        model = model.to(getattr(torch, case.dtype))
    return model.to(case.device)


def _input(case: Case, hw: Optional[Tuple[int, int]] = None):
    """The case's random input batch (``hw``: another size, batch 1)."""
    import torch
    dtype = getattr(torch, case.dtype) if case.cast_model else torch.float32
    shape = (case.batch, 3, case.height, case.width) if hw is None else (1, 3, *hw)
    return torch.randn(shape, device=case.device, dtype=dtype)


def run_case(case: Case) -> Dict[str, Any]:
    """Measure one (model, size, mode) in the current process; returns a result dict.

    Meant to run in a fresh child (see :func:`run_isolated`): it caps the address space
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
    model = x = None
    try:
        model = _prepared_model(spec, case)
        res['params_m'] = sum(p.numel() for p in model.parameters()) / 1e6
        if case.flops == 'fake' or (case.compile and case.flops == 'real'):
            totals = _fake_flops(model, case)
            res.update(flops_total=totals['total'], flops_newton=totals['newton'],
                       flops_method='fake')
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
            _make_step(model, _input(case, small), case)()
            model.zero_grad(set_to_none=True)
        if case.compile:
            model = torch.compile(model)
        x = _input(case)
        if not cuda and case.mem_cap_mb:
            # the step may add at most mem_cap_mb of address space to the built model + input
            mem_limit = _cap_address_space(case.mem_cap_mb)
        step = _make_step(model, x, case)
        _sync(case.device)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            res['mem_method'] = 'cuda_max_memory_allocated'
        else:
            base = _current_rss_kb() * 1024
            res['mem_method'] = 'vmhwm_reset' if _reset_peak_rss() else 'ru_maxrss'
        res['baseline_mem_mb'] = base / 2**20

        n_warm = max(case.warmup, int(case.flops == 'real'))
        for i in range(n_warm):
            if i == 0 and case.flops == 'real' and not case.compile:
                totals: Dict[str, int] = {}
                with count_flops(totals):
                    step()
                res.update(flops_total=totals['total'], flops_newton=totals['newton'],
                           flops_method='real')
            else:
                step()
            _sync(case.device)
        if case.compile:  # compilation is done: measure the compiled step only
            _sync(case.device)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            else:
                base = _current_rss_kb() * 1024
                _reset_peak_rss()
            res['baseline_mem_mb'] = base / 2**20
        peak_default_malloc = None
        if not cuda:
            # memory under glibc's defaults (freed tensors go back to the kernel, so the peak
            # RSS is the live tensors' peak); then the timed steps under the chosen allocator
            if case.cpu_malloc == 'reuse':
                if case.compile or n_warm == 0:
                    step()
                peak_default_malloc = _peak_rss_kb() * 1024
                res['cpu_malloc'] = _apply_cpu_malloc('reuse')
                step()  # untimed: grows the kept heap once
            else:
                res['cpu_malloc'] = 'system'
        times, cpu_times = [], []
        start = time.perf_counter()
        while len(times) < case.repeats:
            t0, c0 = time.perf_counter(), time.process_time()
            step()
            _sync(case.device)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
            if time.perf_counter() - start + times[-1] > case.budget_s:
                break
        if cuda:
            peak = torch.cuda.max_memory_allocated()
        else:
            peak = peak_default_malloc or _peak_rss_kb() * 1024
        res.update(repeats=len(times), peak_total_mb=peak / 2**20,
                   peak_mem_mb=max(peak - base, 0) / 2**20, status='ok')
        if times:
            res.update(_time_stats(times, cpu_times), latency_method='isolated')
        res['threads'] = torch.get_num_threads()
        if len(times) < case.repeats:
            res['note'] = f'time budget {case.budget_s:g}s: {len(times)} of {case.repeats} repeats'
        if case.profile:
            os.environ.setdefault('KINETO_LOG_LEVEL', '5')  # no profiler chatter on stderr
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=acts) as prof:
                step()
                _sync(case.device)
            res['hotspots'] = _top_ops(prof, case.profile, case.device)
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


def _child_main(case: Case, conn) -> None:
    try:
        res = run_case(case)
    except BaseException as exc:  # noqa: BLE001
        res = dict(status='oom' if is_oom(exc) else 'error', note=repr(exc)[:500])
    try:
        conn.send(res)
    finally:
        conn.close()


def _step_worker(case: Case, conn) -> None:
    """A model kept warm in its own process, stepping on request (interleaved timing).

    Sends ``{'status': 'ready'}`` once the model is built and has taken its untimed steps,
    then answers every ``'step'`` with that step's wall and CPU seconds until ``'stop'``.
    Its own process gives each model the heap, allocator state and thread pool of its
    isolated run, none shared with the other models.
    """
    try:
        import torch
        if case.threads:
            torch.set_num_threads(case.threads)
        torch.manual_seed(case.seed)
        model = _prepared_model(ModelSpec(**case.spec), case)
        if case.compile:
            model = torch.compile(model)
        step = _make_step(model, _input(case), case)
        if not case.device.startswith('cuda') and case.cpu_malloc == 'reuse':
            _apply_cpu_malloc('reuse')
        for _ in range(2):          # set-up / compilation, then the heap's growth
            step()
            _sync(case.device)
        conn.send(dict(status='ready'))
        while conn.recv() == 'step':
            t0, c0 = time.perf_counter(), time.process_time()
            step()
            _sync(case.device)
            conn.send((time.perf_counter() - t0, time.process_time() - c0))
    except BaseException as exc:  # noqa: BLE001
        try:
            conn.send(dict(status='oom' if is_oom(exc) else 'error', note=repr(exc)[:500]))
        except (OSError, ValueError):
            pass
    finally:
        conn.close()


def run_interleaved(cases: Sequence[Case], rounds: int, seed: int, step_timeout: Sequence[float],
                    mem_need_mb: Optional[Sequence[float]] = None,
                    preload: Sequence[str] = ('torch', )) -> Dict[str, Any]:
    """Time ``rounds`` steps of every case's model, interleaved: one warm worker process per
    model (:func:`_step_worker`), and in each round every model steps once, one at a time,
    in a fresh shuffled order.  The models' steps are thus spread over the same minutes, so a
    machine whose speed drifts slows them alike, which runs one after the other do not
    guarantee.  ``step_timeout[i]`` bounds each of model i's steps (its build and warm-up
    get three times that plus a minute).  A worker is only started while the machine has
    ``mem_need_mb[i]`` available (CPU), since all of them stay alive until the end.  Returns
    ``times`` / ``cpu_times`` (one list of seconds per case) and the ``orders``, or a failed
    status with a note."""
    ctx = _context(preload)
    workers = []
    try:
        for i, (case, limit) in enumerate(zip(cases, step_timeout)):
            avail = _mem_available_mb()
            if mem_need_mb and avail is not None and avail < mem_need_mb[i]:
                return dict(status='skipped', note=f"{case.spec['label']}: {avail:.0f} MiB "
                            f'available, {mem_need_mb[i]:.0f} MiB wanted for its worker')
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_step_worker, args=(case, child), daemon=True)
            proc.start()
            child.close()
            workers.append((proc, parent))
            reply = parent.recv() if parent.poll(3 * limit + 60) else None
            if not isinstance(reply, dict) or reply.get('status') != 'ready':
                reply = reply or dict(status='timeout', note='no answer while warming up')
                return dict(reply, note=f"{case.spec['label']}: {reply.get('note', '')}")
        rng = random.Random(seed)
        times: List[List[float]] = [[] for _ in cases]
        cpu_times: List[List[float]] = [[] for _ in cases]
        orders = []
        for _ in range(rounds):
            order = list(range(len(cases)))
            rng.shuffle(order)
            orders.append(order)
            for i in order:
                conn = workers[i][1]
                conn.send('step')
                reply = conn.recv() if conn.poll(step_timeout[i]) else None
                if not isinstance(reply, tuple):
                    reply = reply or dict(status='timeout', note='step timed out')
                    return dict(reply, note=f"{cases[i].spec['label']}: {reply.get('note')}")
                times[i].append(reply[0])
                cpu_times[i].append(reply[1])
        return dict(status='ok', times=times, cpu_times=cpu_times, orders=orders)
    except (EOFError, OSError) as exc:   # a worker died (e.g. killed by the OOM killer)
        return dict(status='error', note=f'a worker process died: {exc!r}')
    finally:
        for proc, conn in workers:
            try:
                conn.send('stop')
            except (OSError, ValueError):
                pass
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
            conn.close()


def _time_stats(times: Sequence[float], cpu_times: Sequence[float]) -> Dict[str, float]:
    """The ``latency_ms_*`` / ``cpu_ms_*`` fields of step times in seconds."""
    out = {}
    for prefix, ts in (('latency_ms', times), ('cpu_ms', cpu_times)):
        out.update({f'{prefix}_median': statistics.median(ts) * 1e3,
                    f'{prefix}_min': min(ts) * 1e3, f'{prefix}_max': max(ts) * 1e3})
    return out


def interleave_group(group: list, rounds: int, budget: float, preload: Sequence[str],
                     log) -> Optional[dict]:
    """Interleaved timing of the cases of one (size, mode) that ran: replaces the latency
    fields of their results in place (the isolated ones kept as ``isolated_latency_ms_*``).
    Returns what was done, for the JSON's ``meta``, or None when fewer than two models fit
    the time budget."""
    fit = [g for g in group if g[3]['status'] == 'ok' and g[3].get('latency_ms_median')
           and g[3]['latency_ms_median'] / 1e3 * rounds <= budget]
    if len(fit) < 2:
        return None
    cases = [g[2] for g in fit]
    c = cases[0]
    t0 = time.perf_counter()
    # a worker keeps its heap at the step's peak; allow twice the isolated peak (and the
    # model) for fragmentation
    res = run_interleaved(cases, rounds, c.height * 1000 + c.width,
                          [3 * g[3]['latency_ms_median'] / 1e3 + 30 for g in fit],
                          [2 * (g[3].get('peak_total_mb') or 0) for g in fit], preload)
    labels = [g[1].label for g in fit]
    info = dict(size=f'{c.height}x{c.width}', mode=c.mode, models=labels,
                status=res['status'], wall_s=time.perf_counter() - t0,
                orders=[[labels[i] for i in o] for o in res.get('orders', [])])
    if res['status'] != 'ok':
        info['note'] = res.get('note', '')
        log(f"interleaved timing at {info['size']} {c.mode}: {res['status']} "
            f"{info['note'][:120]} (isolated times kept)")
        return info
    for (_, spec, _, r), ts, cts in zip(fit, res['times'], res['cpu_times']):
        for k in ('median', 'min', 'max'):
            r[f'isolated_latency_ms_{k}'] = r[f'latency_ms_{k}']
        r.update(_time_stats(ts, cts), repeats=len(ts), latency_method='interleaved')
        log(f"{spec.label:34s} {info['size']} {c.mode:5s} interleaved x{len(ts)}: lat "
            f"{r['latency_ms_median']:.0f} ms (isolated {r['isolated_latency_ms_median']:.0f})")
    return info


def _apply_cpu_malloc(mode: str) -> str:
    """``'reuse'``: glibc keeps freed memory (:func:`mmlinattn.utils.reuse_freed_cpu_memory`);
    returns the mode in effect (``'system'`` where that is not glibc)."""
    if mode != 'reuse':
        return 'system'
    from mmlinattn.utils import reuse_freed_cpu_memory
    return 'reuse' if reuse_freed_cpu_memory() else 'system'


def _matmul_child(device: str, dtype: str, n: int, threads: int, cpu_malloc: str,
                  conn) -> None:
    try:
        if not device.startswith('cuda'):
            _apply_cpu_malloc(cpu_malloc)
        conn.send(matmul_rate(device, dtype, n, threads))
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
    _sync(device)
    times, cpu_times = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        a @ b
        _sync(device)
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    flops = 2 * n**3
    return dict(status='ok', n=n, dtype=dtype, threads=torch.get_num_threads(),
                gflops_per_s=flops / statistics.median(times) / 1e9,
                best_gflops_per_s=flops / min(times) / 1e9,
                gflops_per_cpu_s=flops / statistics.median(cpu_times) / 1e9)


# ----------------------------------------------------------------------------- isolation
_CTX = None


def _context(preload: Sequence[str]):
    """The multiprocessing context: a forkserver that has imported ``preload`` (cheap,
    fork-safe children) where available, else spawn."""
    global _CTX
    if _CTX is None:
        if 'forkserver' in mp.get_all_start_methods():
            _CTX = mp.get_context('forkserver')
            _CTX.set_forkserver_preload(list(preload))
        else:
            _CTX = mp.get_context('spawn')
    return _CTX


def run_isolated(target, args: tuple, timeout: float,
                 preload: Sequence[str] = ('torch', )) -> Dict[str, Any]:
    """Run ``target(*args, conn)`` in a child process; the dict it sends, or a status.

    No answer within ``timeout`` s -> the child is killed, ``status='timeout'``; a child
    that dies without answering -> ``'oom'`` when it was killed by SIGKILL (the kernel's
    OOM killer) else ``'error'``.
    """
    ctx = _context(preload)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, send), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    send.close()
    res = None
    try:
        if recv.poll(timeout):
            res = recv.recv()
    except (EOFError, OSError):
        res = None
    elapsed = time.perf_counter() - t0
    if res is None:
        if proc.is_alive():
            proc.kill()
            proc.join()
            res = dict(status='timeout', note=f'killed after {timeout:g}s')
        else:
            proc.join()
            code = proc.exitcode
            status = 'oom' if code == -9 else 'error'
            res = dict(status=status, note=f'child exited with code {code} without a result')
    else:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join()
    recv.close()
    res['wall_s'] = elapsed
    return res


# ----------------------------------------------------------------------------- records
def tokens_at_stride4(h: int, w: int) -> int:
    return math.ceil(h / 4) * math.ceil(w / 4)


def make_record(spec: ModelSpec, case: Case, res: Dict[str, Any],
                matmul: Optional[dict]) -> Dict[str, Any]:
    rec = {k: None for k in RECORD_FIELDS}
    rec.update(model=spec.model, arch=spec.arch if isinstance(spec.arch, str) else
               json.dumps(spec.arch), label=spec.label, options=dict(spec.kwargs),
               height=case.height, width=case.width, batch=case.batch, mode=case.mode,
               device=case.device, dtype=case.dtype,
               tokens=tokens_at_stride4(case.height, case.width) * case.batch)
    for k in ('params_m', 'latency_ms_median', 'latency_ms_min', 'latency_ms_max', 'repeats',
              'cpu_ms_median', 'cpu_ms_min', 'cpu_ms_max', 'threads', 'cpu_malloc',
              'peak_mem_mb', 'peak_total_mb', 'baseline_mem_mb', 'mem_method', 'status',
              'note', 'flops_method', 'hotspots', 'mem_limit_mb', 'wall_s',
              'latency_method', 'isolated_latency_ms_median', 'isolated_latency_ms_min',
              'isolated_latency_ms_max'):
        if k in res:
            rec[k] = res[k]
    if res.get('flops_total') is not None:
        rec['gflops'] = res['flops_total'] / 1e9
        rec['gmacs'] = rec['gflops'] / 2
        rec['newton_gflops'] = res.get('flops_newton', 0) / 1e9
    matmul = matmul or {}
    if rec['status'] == 'ok' and rec['gflops'] and rec['latency_ms_median']:
        rec['achieved_gflops_per_s'] = rec['gflops'] / (rec['latency_ms_median'] / 1e3)
        if matmul.get('gflops_per_s'):
            rec['matmul_fraction'] = rec['achieved_gflops_per_s'] / matmul['gflops_per_s']
    if rec['status'] == 'ok' and rec['gflops'] and rec['cpu_ms_median']:
        rec['achieved_gflops_per_cpu_s'] = rec['gflops'] / (rec['cpu_ms_median'] / 1e3)
        if matmul.get('gflops_per_cpu_s'):
            rec['matmul_fraction_cpu'] = (rec['achieved_gflops_per_cpu_s'] /
                                          matmul['gflops_per_cpu_s'])
    rec['note'] = rec['note'] or ''
    return rec


def fit_exponent(xs: Sequence[float], ys: Sequence[float]) -> Optional[float]:
    """Least-squares slope of log y against log x (None with fewer than two points)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x and y and y > 0]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx)**2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def _groups(records: List[dict]) -> Dict[Tuple[str, str], List[dict]]:
    out: Dict[Tuple[str, str], List[dict]] = {}
    for r in records:
        out.setdefault((r['label'], r['mode']), []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r['tokens'])
    return out


def summarize(records: List[dict], peers: Sequence[str] = ('Swin-T', 'PVTv2-b2')) -> dict:
    """Scaling exponents per (model, mode) and ratios against the peers at every size."""
    groups = _groups(records)
    summary = {}
    for (label, mode), rs in groups.items():
        ok = [r for r in rs if r['status'] == 'ok']
        entry = dict(
            label=label, mode=mode,
            latency_exponent=fit_exponent([r['tokens'] for r in ok],
                                          [r['latency_ms_median'] for r in ok]),
            memory_exponent=fit_exponent([r['tokens'] for r in ok],
                                         [r['peak_mem_mb'] for r in ok]),
            cpu_time_exponent=fit_exponent([r['tokens'] for r in ok],
                                           [r.get('cpu_ms_median') for r in ok]),
            sizes_ok=[f"{r['height']}x{r['width']}" for r in ok],
            failures=[f"{r['status']} at {r['height']}x{r['width']}" for r in rs
                      if r['status'] not in ('ok', 'skipped')],
            ratios={})
        for peer in peers:
            prs = {(r['height'], r['width']): r for r in groups.get((peer, mode), [])}
            for r in rs:
                p = prs.get((r['height'], r['width']))
                if p is None or peer == label:
                    continue
                key = f"{peer}@{r['height']}x{r['width']}"
                entry['ratios'][key] = dict(
                    latency=_ratio(r, p, 'latency_ms_median'),
                    cpu_time=_ratio(r, p, 'cpu_ms_median'),
                    memory=_ratio(r, p, 'peak_mem_mb'),
                    status=f"{r['status']}/{p['status']}")
        summary[f'{label}|{mode}'] = entry
    return summary


def _ratio(r: dict, p: dict, key: str) -> Optional[float]:
    """r / p; a failed peer counts as infinitely worse (ratio 0), a failed r as inf."""
    if r['status'] == 'ok' and p['status'] == 'ok' and r.get(key) and p.get(key):
        return r[key] / p[key]
    if r['status'] == 'ok' and p['status'] in ('oom', 'timeout', 'skipped'):
        return 0.0
    if r['status'] in ('oom', 'timeout', 'skipped') and p['status'] == 'ok':
        return float('inf')
    return None


# ----------------------------------------------------------------------------- outputs
def write_csv(path: str, records: List[dict]) -> None:
    with open(path, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=RECORD_FIELDS, extrasaction='ignore')
        w.writeheader()
        for r in records:
            row = dict(r)
            row['options'] = json.dumps(row['options'])
            w.writerow(row)


def _size_label(r: dict) -> str:
    return f"{r['height']}²" if r['height'] == r['width'] else f"{r['height']}x{r['width']}"


def plot_title(meta: dict, time_key: str = 'latency_ms_median') -> str:
    return (f"{meta['device']} {meta['dtype']} batch {meta['batch']}, {meta['processor']}, "
            f"torch {meta['torch']}, threads {meta.get('threads') or 'default'}"
            + (' (CPU time per step)' if time_key.startswith('cpu') else ''))


def _size_ticks(ax, records: List[dict]) -> None:
    """Image sizes on the x axis (at their token counts, where the scaling is measured)."""
    ticks = {r['tokens']: _size_label(r) for r in records if r.get('tokens')}
    ax.set_xticks(sorted(ticks), [f'{ticks[t]}\n({t / 1000:.0f}k tok.)' for t in sorted(ticks)])
    ax.minorticks_off()
    ax.set_xlabel('input image size (H×W; stride-4 tokens N = ⌈H/4⌉·⌈W/4⌉ below it)')


def write_plot(path: str, records: List[dict], title: str = '',
               time_key: str = 'latency_ms_median') -> None:
    """Log-log latency and peak memory against image size (placed at its stride-4 token
    count), one line per model and mode, the fitted exponent in the legend; failures are
    listed in the legend.  Peers (Swin-T, ResNet-50, PVTv2) are grey-toned dotted lines with
    squares, named "peer: ...".  ``time_key='cpu_ms_median'`` plots CPU time per step."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(15, 7))
    groups = _groups(records)
    ours_cmap, peer_cmap = plt.get_cmap('tab10'), plt.get_cmap('Greys')
    peers = sorted({label for label, _ in groups if label in PEERS})
    modes = {m for _, m in groups}
    n_ours = 0
    for (label, mode), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] in PEERS, kv[0])):
        ok = [r for r in rs if r['status'] == 'ok']
        fails = [f"{r['status']} {_size_label(r)}" for r in rs
                 if r['status'] not in ('ok', 'skipped')]
        peer = label in PEERS
        name = ('peer: ' if peer else '') + label + ('' if len(modes) == 1 else f' ({mode})')
        if peer:
            color = peer_cmap(0.45 + 0.5 * peers.index(label) / max(1, len(peers) - 1))
            style, marker = (':' if mode == 'infer' else '-.'), 's'
        else:
            color, n_ours = ours_cmap(n_ours % 10), n_ours + 1
            style, marker = ('-' if mode == 'infer' else '--'), 'o'
        for ax, key, sym in ((axes[0], time_key, 't'), (axes[1], 'peak_mem_mb', 'M')):
            pts = [(r['tokens'], r.get(key)) for r in ok if r.get(key) and r[key] > 0]
            exp = fit_exponent([p[0] for p in pts], [p[1] for p in pts])
            leg = name + (f' ({sym} ∝ N^{exp:.2f})' if exp is not None else '')
            if fails:
                leg += ' [' + ', '.join(fails) + ']'
            if pts or fails:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker=marker,
                        color=color, label=leg, linewidth=2 if peer else 1.5)
    tlabel = ('CPU time per step (ms, median)' if time_key.startswith('cpu')
              else 'latency (ms, median)')
    for ax, ylabel in ((axes[0], tlabel), (axes[1], 'peak memory (MiB)')):
        ax.set_xscale('log')
        ax.set_yscale('log')
        _size_ticks(ax, records)
        ax.set_ylabel(ylabel)
        ax.grid(True, which='both', alpha=0.3)
        ax.legend(fontsize=7, loc='upper left',
                  title='ours: solid, circles   peers: dotted grey, squares', title_fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replot(json_path: str, png_path: str, time_key: str = 'latency_ms_median') -> None:
    """Re-render the plot of a finished run from its ``--json`` file, without measuring."""
    with open(json_path) as f:
        out = json.load(f)
    write_plot(png_path, out['records'], title=plot_title(out['meta'], time_key),
               time_key=time_key)


def _fmt(v, spec='.1f') -> str:
    if v is None:
        return '–'
    if isinstance(v, float):
        if math.isinf(v):
            return '∞'
        return format(v, spec)
    return str(v)


def markdown_table(records: List[dict]) -> str:
    head = ('| model | size | mode | params (M) | GFLOPs | NS GFLOPs | latency ms (med / min / '
            'max) | timing | CPU ms (med) | peak mem (MiB) | GFLOP/s | % matmul | status |')
    lines = [head, '|' + '---|' * 13]
    for r in records:
        lat = (f"{_fmt(r['latency_ms_median'], '.0f')} / {_fmt(r['latency_ms_min'], '.0f')} / "
               f"{_fmt(r['latency_ms_max'], '.0f')}" if r['status'] == 'ok' else '–')
        frac = r['matmul_fraction']
        status = r['status'] + (f" ({r['note'][:60]})" if r['status'] not in ('ok', ) and
                                r['note'] else '')
        lines.append(
            f"| {r['label']} | {_size_label(r)} | {r['mode']} | {_fmt(r['params_m'])} | "
            f"{_fmt(r['gflops'])} | {_fmt(r['newton_gflops'])} | {lat} | "
            f"{_fmt(r.get('latency_method'))} | {_fmt(r.get('cpu_ms_median'), '.0f')} | "
            f"{_fmt(r['peak_mem_mb'], '.0f')} | {_fmt(r['achieved_gflops_per_s'], '.1f')} | "
            f"{_fmt(frac * 100 if frac is not None else None, '.0f')} | {status} |")
    return '\n'.join(lines)


def markdown_summary(summary: dict) -> str:
    lines = ['| model | mode | latency exponent | CPU-time exponent | memory exponent | '
             'failures |', '|---|---|---|---|---|---|']
    for e in summary.values():
        lines.append(f"| {e['label']} | {e['mode']} | {_fmt(e['latency_exponent'], '.2f')} | "
                     f"{_fmt(e.get('cpu_time_exponent'), '.2f')} | "
                     f"{_fmt(e['memory_exponent'], '.2f')} | {', '.join(e['failures']) or '–'} |")
    return '\n'.join(lines)


def markdown_ratios(summary: dict, peers: Sequence[str] = ('Swin-T', 'PVTv2-b2')) -> str:
    """Latency and memory ratios against each peer at the largest size both were run at
    (< 1: ours is faster / smaller; 0: the peer failed there; inf: ours failed)."""
    lines = ['| model | mode | size | ' + ' | '.join(f'latency / {p}' for p in peers) + ' | '
             + ' | '.join(f'memory / {p}' for p in peers) + ' |',
             '|---|---|---|' + '---|' * (2 * len(peers))]
    for e in summary.values():
        if e['label'] in peers:
            continue
        sizes = {k.split('@')[1] for k in e['ratios']}
        if not sizes:
            continue
        size = max(sizes, key=lambda t: math.prod(int(v) for v in t.split('x')))
        cells = [e['ratios'].get(f'{p}@{size}', {}) for p in peers]
        lines.append(f"| {e['label']} | {e['mode']} | {size} | "
                     + ' | '.join(_fmt(c.get('latency'), '.2f') for c in cells) + ' | '
                     + ' | '.join(_fmt(c.get('memory'), '.2f') for c in cells) + ' |')
    return '\n'.join(lines)


# ----------------------------------------------------------------------------- driver
def _mem_available_mb() -> Optional[float]:
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


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


def _parse_size(text: str) -> Tuple[int, int]:
    t = str(text).lower().replace('×', 'x')
    h, _, w = t.partition('x')
    try:
        hw = (int(h), int(w or h))
    except ValueError:
        raise ValueError(f'--sizes entry {text!r}: expected S or HxW with integers')
    if min(hw) < 32:
        raise ValueError(f'--sizes entry {text!r}: sizes must be >= 32')
    return hw


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.replot:
        if not args.plot:
            raise SystemExit('--replot JSON needs --plot PNG')
        replot(args.replot, args.plot,
               'cpu_ms_median' if args.plot_time == 'cpu' else 'latency_ms_median')
        return {}
    cuda = args.device.startswith('cuda')
    dtype = args.dtype or ('float16' if cuda else 'float32')
    specs = [parse_model_spec(m) for m in (args.models or DEFAULT_MODELS)]
    if args.sizes:
        sizes = [_parse_size(s) for s in args.sizes]
    else:
        sizes = [(s, s) for s in (GPU_SIZES if cuda else QUICK_SIZES if args.quick
                                  else CPU_SIZES)]
    modes = args.modes or (['infer', 'train'] if args.train else ['infer'])
    warmup = 1 if args.warmup is None else args.warmup
    interleave = args.interleave
    if interleave is None:
        interleave = 0 if args.quick or cuda else INTERLEAVE_ROUNDS
    repeats = args.repeats
    if repeats is None:
        repeats = 2 if args.quick or interleave else 5
    budget = args.budget if args.budget is not None else (8.0 if args.quick else 60.0)
    timeout = args.timeout if args.timeout is not None else (90.0 if args.quick else 600.0)
    mem_cap = args.mem_cap_mb
    if mem_cap is None and not cuda:
        avail = _mem_available_mb()
        mem_cap = 0.7 * avail if avail else None
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))

    preload = ['torch', 'mmlinattn.models']
    if any(s.peer for s in specs):
        preload.append('mmdet.models.backbones')
    preload.append(__name__ if __name__ != '__main__' else '__main__')
    t_start, started = time.perf_counter(), time.strftime('%Y-%m-%d %H:%M:%S')
    load_start = os.getloadavg() if hasattr(os, 'getloadavg') else None

    mm_n = args.matmul_size or (8192 if cuda else 2048)
    mm_before = run_isolated(_matmul_child,
        (args.device, dtype, mm_n, args.threads, args.cpu_malloc), 300, preload)
    log(f"matmul {mm_n}x{mm_n} {dtype} on {args.device}: "
        f"{_fmt(mm_before.get('gflops_per_s'))} GFLOP/s ({mm_before['status']})")

    # size by size, all models at one size before the next: the models compared at a size
    # are measured minutes apart, not a whole model's sweep apart (a shared machine drifts)
    plan: Dict[Tuple[int, int], list] = {}
    for order, spec in enumerate(specs):
        model_sizes = list(sizes)
        if cuda and not args.sizes:
            model_sizes += [(s, s) for s in GPU_EXTRA_SIZES.get(spec.label, [])]
        for mode_order, mode in enumerate(modes):
            for h, w in model_sizes:
                plan.setdefault((h, w), []).append(((order, mode_order), spec, mode))
    done: List[Tuple[tuple, ModelSpec, Case, dict]] = []
    pending_fake: List[Tuple[dict, Case]] = []
    failed: Dict[Tuple[str, str], str] = {}
    interleaved: List[dict] = []
    for h, w in sorted(plan, key=lambda hw: (hw[0] * hw[1], hw)):
        group = []
        for key, spec, mode in sorted(plan[h, w], key=lambda item: item[0]):
            case = Case(spec=asdict(spec), height=h, width=w, batch=args.batch, mode=mode,
                        device=args.device, dtype=dtype, cast_model=args.cast_model,
                        compile=args.compile,
                        threads=args.threads, cpu_malloc=args.cpu_malloc,
                        warmup=warmup, repeats=repeats,
                        budget_s=budget, mem_cap_mb=mem_cap,
                        flops=args.flops, profile=args.profile)
            if (spec.label, mode) in failed and not args.no_skip:
                res = dict(status='skipped', note=f'after {failed[spec.label, mode]}')
            else:
                res = run_isolated(_child_main, (case, ), timeout, preload)
            group.append((key + (h * w, h, w), spec, case, res))
            if res['status'] in ('oom', 'timeout'):
                failed.setdefault((spec.label, mode), f"{res['status']} at {h}x{w}")
            log(f"{spec.label:34s} {h}x{w} {mode:5s} {res['status']:8s} "
                f"lat {_fmt(res.get('latency_ms_median'), '.0f')} ms  "
                f"cpu {_fmt(res.get('cpu_ms_median'), '.0f')} ms  "
                f"mem {_fmt(res.get('peak_mem_mb'), '.0f')} MiB  "
                f"{_fmt((res.get('flops_total') or 0) / 1e9 or None)} GFLOPs  "
                f"{res.get('note', '')[:90]}")
        if interleave > 0:
            for mode in modes:
                info = interleave_group([g for g in group if g[2].mode == mode], interleave,
                                        budget, preload, log)
                if info:
                    interleaved.append(info)
        done.extend(group)
    # the outputs list each model's sizes together, in the order the models were given
    records: List[dict] = []
    for _, spec, case, res in sorted(done, key=lambda item: item[0]):
        rec = make_record(spec, case, res, mm_before)
        records.append(rec)
        if rec['gflops'] is None and args.flops != 'none':
            pending_fake.append((rec, case))

    # FLOPs of failed / skipped cases on fake tensors (no compute, little memory)
    for rec, case in pending_fake:
        fake = Case(**{**asdict(case), 'flops': 'fake', 'warmup': 0, 'repeats': 0,
                       'mem_cap_mb': None})
        res = run_isolated(_child_main, (fake, ), min(timeout, 300), preload)
        if res.get('flops_total') is not None:
            rec['gflops'] = res['flops_total'] / 1e9
            rec['gmacs'] = rec['gflops'] / 2
            rec['newton_gflops'] = res.get('flops_newton', 0) / 1e9
            rec['flops_method'] = 'fake'
            rec['params_m'] = rec['params_m'] or res.get('params_m')

    mm_after = run_isolated(_matmul_child,
        (args.device, dtype, mm_n, args.threads, args.cpu_malloc), 300, preload)
    summary = summarize(records)
    import torch
    meta = dict(
        command=' '.join([os.path.basename(sys.argv[0])] + (sys.argv[1:] if argv is None
                                                            else list(argv))),
        started=started, wall_s=time.perf_counter() - t_start,
        device=args.device, dtype=dtype, batch=args.batch, threads=args.threads or None,
        cpu_count=os.cpu_count(), platform=platform.platform(),
        processor=_cpu_name(), torch=torch.__version__, python=platform.python_version(),
        loadavg_start=load_start,
        loadavg_end=os.getloadavg() if hasattr(os, 'getloadavg') else None,
        mem_cap_mb=mem_cap, timeout_s=timeout, warmup=warmup, repeats=repeats,
        budget_s=budget, quick=args.quick, cpu_malloc=None if cuda else args.cpu_malloc,
        interleave=dict(rounds=interleave, groups=interleaved),
        matmul=dict(before=mm_before, after=mm_after),
        gpu=_gpu_name(args.device) if cuda else None)
    out = dict(meta=meta, records=records, summary=summary)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=1, default=str)
    if args.csv:
        write_csv(args.csv, records)
    if args.plot:
        time_key = 'cpu_ms_median' if args.plot_time == 'cpu' else 'latency_ms_median'
        write_plot(args.plot, records, title=plot_title(meta, time_key), time_key=time_key)
    if args.markdown:
        with open(args.markdown, 'w') as f:
            f.write(markdown_table(records) + '\n\n' + markdown_summary(summary) + '\n\n'
                    + markdown_ratios(summary) + '\n')
    log('\n' + markdown_summary(summary) + '\n\n' + markdown_ratios(summary))
    log(f"total wall time {meta['wall_s']:.0f}s")
    return out


def _cpu_name() -> str:
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or 'unknown CPU'


def _gpu_name(device: str) -> Optional[str]:
    try:
        import torch
        return torch.cuda.get_device_name(torch.device(device))
    except Exception:  # noqa: BLE001
        return None


if __name__ == '__main__':
    main()
