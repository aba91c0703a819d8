"""Statistics of benchmark results: step-time summaries, the flat records the outputs list,
scaling exponents (least-squares slope in log-log) and ratios against the peers."""
import json
import math
import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ['RECORD_FIELDS', 'time_stats', 'tokens_at_stride4', 'block_traffic_mb',
           'roofline', 'make_record', 'fit_exponent',
           'group_records', 'summarize', 'ratio', 'paired_ratio']

#: the fields of a record, in the order of the CSV columns
RECORD_FIELDS = [
    'model', 'arch', 'label', 'options', 'height', 'width', 'batch', 'mode', 'device', 'dtype',
    'tokens', 'params_m', 'gflops', 'gmacs', 'newton_gflops', 'flops_method',
    'latency_ms_median', 'latency_ms_min', 'latency_ms_max', 'cpu_ms_median', 'cpu_ms_min',
    'cpu_ms_max', 'repeats', 'peak_mem_mb', 'peak_total_mb', 'baseline_mem_mb', 'mem_method',
    'achieved_gflops_per_s', 'matmul_fraction', 'achieved_gflops_per_cpu_s',
    'matmul_fraction_cpu', 'threads', 'cpu_malloc', 'latency_method',
    'isolated_latency_ms_median', 'isolated_latency_ms_min', 'isolated_latency_ms_max',
    'paired_with', 'paired_ref_latency_ms_median', 'block_traffic_mb', 'roofline_compute_ms',
    'roofline_memory_ms', 'roofline_ms', 'roofline_bound', 'roofline_fraction', 'status', 'note'
]


def time_stats(times: Sequence[float], cpu_times: Sequence[float]) -> Dict[str, float]:
    """The ``latency_ms_*`` / ``cpu_ms_*`` fields of step times in seconds."""
    out = {}
    for prefix, ts in (('latency_ms', times), ('cpu_ms', cpu_times)):
        out.update({f'{prefix}_median': statistics.median(ts) * 1e3,
                    f'{prefix}_min': min(ts) * 1e3, f'{prefix}_max': max(ts) * 1e3})
    return out


def tokens_at_stride4(h: int, w: int) -> int:
    """Tokens of the stride-4 stage of an ``h x w`` image (where the scaling is measured)."""
    return math.ceil(h / 4) * math.ceil(w / 4)


def block_traffic_mb(block_bytes: Optional[int], mode: str) -> Optional[float]:
    """The least memory traffic of a step, MiB: every block's input read and output written
    once (``block_bytes``, counted in the forward); a training step twice that (its backward
    reads each output's gradient and writes each input's)."""
    if block_bytes is None:
        return None
    return (2 if mode == 'train' else 1) * block_bytes / 2**20


def roofline(gflops: Optional[float], traffic_mb: Optional[float],
             latency_ms: Optional[float], matmul: dict) -> Dict[str, Any]:
    """The roofline bound of a step: its FLOPs at the probe's dense matmul rate
    (``roofline_compute_ms``) and its least traffic (:func:`block_traffic_mb`) at the probe's
    copy bandwidth (``roofline_memory_ms``); the larger is ``roofline_ms`` (bound by
    ``compute`` or ``memory``), and ``roofline_fraction`` = that / the measured latency (1.0:
    at the hardware's limit)."""
    out: Dict[str, Any] = {}
    if gflops and matmul.get('gflops_per_s'):
        out['roofline_compute_ms'] = gflops / matmul['gflops_per_s'] * 1e3
    if traffic_mb and matmul.get('bandwidth_gb_per_s'):
        out['roofline_memory_ms'] = traffic_mb * 2**20 / (matmul['bandwidth_gb_per_s'] * 1e9) \
            * 1e3
    if out:
        bound = max(out, key=out.get)
        out.update(roofline_ms=out[bound], roofline_bound=bound.split('_')[1])
        if latency_ms:
            out['roofline_fraction'] = out['roofline_ms'] / latency_ms
    return out


def make_record(spec, case, res: Dict[str, Any], matmul: Optional[dict]) -> Dict[str, Any]:
    """The flat record (:data:`RECORD_FIELDS`) of a :class:`~.specs.ModelSpec`, its
    :class:`~.cases.Case` and the case's result; rates against the ``matmul`` probe."""
    rec = {k: None for k in RECORD_FIELDS}
    rec.update(model=spec.model, arch=spec.arch if isinstance(spec.arch, str) else
               json.dumps(spec.arch), label=spec.label, options=dict(spec.kwargs),
               height=case.height, width=case.width, batch=case.batch, mode=case.mode,
               device=case.device, dtype=case.dtype,
               tokens=tokens_at_stride4(case.height, case.width) * case.batch)
    for k in ('params_m', 'latency_ms_median', 'latency_ms_min', 'latency_ms_max', 'repeats',
              'cpu_ms_median', 'cpu_ms_min', 'cpu_ms_max', 'threads', 'cpu_malloc',
              'peak_mem_mb', 'peak_total_mb', 'baseline_mem_mb', 'mem_method', 'status',
              'note', 'flops_method', 'hotspots', 'profiled_ms', 'mem_limit_mb', 'wall_s',
              'latency_method', 'isolated_latency_ms_median', 'isolated_latency_ms_min',
              'isolated_latency_ms_max', 'paired_with', 'paired_ref_latency_ms_median'):
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
    rec['block_traffic_mb'] = block_traffic_mb(res.get('block_bytes'), case.mode)
    if rec['status'] == 'ok':
        rec.update(roofline(rec['gflops'], rec['block_traffic_mb'], rec['latency_ms_median'],
                            matmul))
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


def group_records(records: List[dict]) -> Dict[Tuple[str, str], List[dict]]:
    """Records by (label, mode), each group in the order of its token counts."""
    out: Dict[Tuple[str, str], List[dict]] = {}
    for r in records:
        out.setdefault((r['label'], r['mode']), []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r['tokens'])
    return out


def summarize(records: List[dict], peers: Sequence[str] = ('Swin-T', 'PVTv2-b2')) -> dict:
    """Scaling exponents per (model, mode) and ratios against the peers at every size."""
    groups = group_records(records)
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
                    latency=paired_ratio(r, peer) or ratio(r, p, 'latency_ms_median'),
                    cpu_time=ratio(r, p, 'cpu_ms_median'),
                    memory=ratio(r, p, 'peak_mem_mb'),
                    status=f"{r['status']}/{p['status']}")
        summary[f'{label}|{mode}'] = entry
    return summary


def paired_ratio(r: dict, peer: str) -> Optional[float]:
    """r's latency over the peer's in the rounds the two were interleaved alone (None when
    r was not paired with ``peer``)."""
    if r.get('paired_with') == peer and r.get('paired_ref_latency_ms_median') and \
            r['status'] == 'ok':
        return r['latency_ms_median'] / r['paired_ref_latency_ms_median']
    return None


def ratio(r: dict, p: dict, key: str) -> Optional[float]:
    """r / p; a failed peer counts as infinitely worse (ratio 0), a failed r as inf."""
    if r['status'] == 'ok' and p['status'] == 'ok' and r.get(key) and p.get(key):
        return r[key] / p[key]
    if r['status'] == 'ok' and p['status'] in ('oom', 'timeout', 'skipped'):
        return 0.0
    if r['status'] in ('oom', 'timeout', 'skipped') and p['status'] == 'ok':
        return float('inf')
    return None
