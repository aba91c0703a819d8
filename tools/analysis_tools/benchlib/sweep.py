"""A benchmark sweep: every model spec at every size and mode, each case in its own process
(:func:`~.isolation.run_isolated`), then records, FLOPs of failed cases on fake tensors, and
the summary.

The cases run size by size (every model at the smallest size, then the next size), so the
models compared at one size are measured minutes apart on a machine whose speed drifts; the
interleaved rounds (:mod:`.interleave`) then put every model's timed steps into the same
minutes.  The records list each model's sizes together, in the order the models were given.
Each case runs in a fresh child process: on CPU forked from a server process that has only
imported the libraries (``multiprocessing`` ``forkserver``), on CUDA spawned
(:func:`~.isolation.mp_context` says why).
"""
import os
import platform
from dataclasses import asdict
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from mmlinattn.utils.machine import cpu_name

from .cases import Case, case_child, matmul_child
from .interleave import interleave_group
from .isolation import CPU_PRELOAD, run_isolated
from .report import fmt
from .specs import ModelSpec
from .stats import block_traffic_mb, make_record, summarize

__all__ = ['run_sweep', 'environment']


def _log_case(log: Callable, spec: ModelSpec, h: int, w: int, mode: str, res: dict) -> None:
    log(f"{spec.label:34s} {h}x{w} {mode:5s} {res['status']:8s} "
        f"lat {fmt(res.get('latency_ms_median'), '.0f')} ms  "
        f"cpu {fmt(res.get('cpu_ms_median'), '.0f')} ms  "
        f"mem {fmt(res.get('peak_mem_mb'), '.0f')} MiB  "
        f"{fmt((res.get('flops_total') or 0) / 1e9 or None)} GFLOPs  "
        f"{res.get('note', '')[:90]}")


def _plan(specs: Sequence[ModelSpec], sizes, modes, extra_sizes: Dict[str, list]) -> dict:
    """(H, W) -> [((model order, mode order), spec, mode)]."""
    plan: Dict[Tuple[int, int], list] = {}
    for order, spec in enumerate(specs):
        model_sizes = list(sizes) + [(s, s) for s in extra_sizes.get(spec.label, [])]
        for mode_order, mode in enumerate(modes):
            for h, w in model_sizes:
                plan.setdefault((h, w), []).append(((order, mode_order), spec, mode))
    return plan


def _fake_flops_of_failures(records: List[dict], cases: List[Case], timeout: float,
                            preload: Sequence[str]) -> None:
    """FLOPs of failed / skipped cases on fake tensors (no compute, little memory)."""
    for rec, case in zip(records, cases):
        fake = Case(**{**asdict(case), 'flops': 'fake', 'warmup': 0, 'repeats': 0,
                       'mem_cap_mb': None})
        res = run_isolated(case_child, (fake, ), min(timeout, 300), preload, case.device)
        if res.get('flops_total') is not None:
            rec['gflops'] = res['flops_total'] / 1e9
            rec['gmacs'] = rec['gflops'] / 2
            rec['newton_gflops'] = res.get('flops_newton', 0) / 1e9
            rec['flops_method'] = 'fake'
            rec['params_m'] = rec['params_m'] or res.get('params_m')
            rec['block_traffic_mb'] = block_traffic_mb(res.get('block_bytes'), case.mode)


def run_sweep(specs: Sequence[ModelSpec], sizes: Sequence[Tuple[int, int]],
              modes: Sequence[str], case_kwargs: dict, *, timeout: float, interleave: int = 0,
              matmul_size: int = 2048, copy_mib: int = 512, no_skip: bool = False,
              extra_sizes: Optional[Dict[str, list]] = None,
              interleave_pairs: Union[None, bool, str] = None,
              log: Callable = lambda *a: None) -> dict:
    """Measure every spec at every size and mode.

    ``case_kwargs``: the :class:`~.cases.Case` fields shared by all cases (batch, device,
    dtype, threads, warmup, repeats, budget_s, mem_cap_mb, flops, ...).  A model that hit
    ``oom`` / ``timeout`` at a size is ``skipped`` at larger ones unless ``no_skip``.
    ``interleave`` > 0: that many interleaved rounds per size and mode; ``interleave_pairs``:
    each model against the reference peer alone, True / ``'warm'`` or ``'alternate'`` (None:
    only when all workers together would not fit in memory; see
    :func:`~.interleave.interleave_group`).  ``extra_sizes``:
    more square sizes per model label.  The dense matmul rate of the machine is measured
    before and after (``matmul_size`` x ``matmul_size``), with the copy bandwidth
    (``copy_mib``), the two sides of each record's roofline bound.

    Returns ``records``, ``summary``, ``interleave`` (what the interleaved timing did) and
    ``matmul`` (``before`` / ``after``).
    """
    device, dtype = case_kwargs.get('device', 'cpu'), case_kwargs.get('dtype', 'float32')
    budget = case_kwargs.get('budget_s', 60.0)
    preload = list(CPU_PRELOAD)
    if any(s.peer for s in specs):
        preload.append('mmdet.models.backbones')
    mm_args = (device, dtype, matmul_size, case_kwargs.get('threads', 0),
               case_kwargs.get('cpu_malloc', 'reuse'), copy_mib)
    mm_before = run_isolated(matmul_child, mm_args, 300, preload, device)
    log(f"matmul {matmul_size}x{matmul_size} {dtype} on {device}: "
        f"{fmt(mm_before.get('gflops_per_s'))} GFLOP/s, copy of {copy_mib} MiB: "
        f"{fmt(mm_before.get('bandwidth_gb_per_s'))} GB/s ({mm_before['status']})")

    plan = _plan(specs, sizes, modes, extra_sizes or {})
    done: List[tuple] = []
    failed: Dict[Tuple[str, str], str] = {}
    interleaved: List[dict] = []
    for h, w in sorted(plan, key=lambda hw: (hw[0] * hw[1], hw)):
        group = []
        for key, spec, mode in sorted(plan[h, w], key=lambda item: item[0]):
            case = Case(spec=asdict(spec), height=h, width=w, mode=mode, **case_kwargs)
            if (spec.label, mode) in failed and not no_skip:
                res = dict(status='skipped', note=f'after {failed[spec.label, mode]}')
            else:
                res = run_isolated(case_child, (case, ), timeout, preload, device)
            group.append((key + (h * w, h, w), spec, case, res))
            if res['status'] in ('oom', 'timeout'):
                failed.setdefault((spec.label, mode), f"{res['status']} at {h}x{w}")
            _log_case(log, spec, h, w, mode, res)
        if interleave > 0:
            for mode in modes:
                info = interleave_group([g for g in group if g[2].mode == mode], interleave,
                                        budget, preload, log, interleave_pairs)
                if info:
                    interleaved.append(info)
        done.extend(group)
    records, uncounted = [], []
    for _, spec, case, res in sorted(done, key=lambda item: item[0]):
        records.append(make_record(spec, case, res, mm_before))
        if records[-1]['gflops'] is None and case.flops != 'none':
            uncounted.append((records[-1], case))
    _fake_flops_of_failures([r for r, _ in uncounted], [c for _, c in uncounted], timeout,
                            preload)
    mm_after = run_isolated(matmul_child, mm_args, 300, preload, device)
    return dict(records=records, summary=summarize(records),
                interleave=dict(rounds=interleave, groups=interleaved),
                matmul=dict(before=mm_before, after=mm_after))


def _gpu_name(device: str) -> Optional[str]:
    try:
        import torch
        return torch.cuda.get_device_name(torch.device(device))
    except Exception:  # noqa: BLE001
        return None


def environment(device: str) -> dict:
    """The machine a run measured: CPU, GPU (for a CUDA ``device``), versions, load."""
    import torch
    return dict(cpu_count=os.cpu_count(), platform=platform.platform(), processor=cpu_name(),
                torch=torch.__version__, python=platform.python_version(),
                gpu=_gpu_name(device) if device.startswith('cuda') else None,
                loadavg=os.getloadavg() if hasattr(os, 'getloadavg') else None)
