"""Outputs of a benchmark run: CSV, Markdown tables and a log-log plot of latency and peak
memory against the image size."""
import csv
import json
import math
from typing import List, Sequence

from .specs import PEERS
from .stats import RECORD_FIELDS, fit_exponent, group_records

__all__ = ['write_csv', 'plot_title', 'write_plot', 'replot', 'fmt', 'markdown_table',
           'markdown_summary', 'markdown_ratios', 'markdown_hotspots', 'write_markdown']


def write_csv(path: str, records: List[dict]) -> None:
    """One row per record, the :data:`~.stats.RECORD_FIELDS` as columns."""
    with open(path, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=RECORD_FIELDS, extrasaction='ignore')
        w.writeheader()
        for r in records:
            row = dict(r)
            row['options'] = json.dumps(row['options'])
            w.writerow(row)


def _size_label(r: dict) -> str:
    return f"{r['height']}²" if r['height'] == r['width'] else f"{r['height']}x{r['width']}"


MODE_WORDS = {'infer': 'inference', 'train': 'training (forward + backward)'}


def plot_title(meta: dict, time_key: str = 'latency_ms_median',
               records: List[dict] = ()) -> str:
    """Device, dtype, batch, machine and the modes of ``records`` (inference / training)."""
    modes = ' and '.join(MODE_WORDS.get(m, m) for m in sorted({r['mode'] for r in records}))
    return ((f'{modes}: ' if modes else '')
            + f"{meta['device']} {meta['dtype']} batch {meta['batch']}, {meta['processor']}, "
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
    groups = group_records(records)
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
    write_plot(png_path, out['records'], title=plot_title(out['meta'], time_key, out['records']),
               time_key=time_key)


def fmt(v, spec='.1f') -> str:
    """A table cell: '–' for None, '∞' for inf, floats with ``spec``."""
    if v is None:
        return '–'
    if isinstance(v, float):
        if math.isinf(v):
            return '∞'
        return format(v, spec)
    return str(v)


def _percent(value) -> str:
    return fmt(value * 100 if value is not None else None, '.0f')


def _roofline_cell(r: dict) -> str:
    """The roofline bound of a record: its time and which side bounds it."""
    if r.get('roofline_ms') is None:
        return '–'
    return f"{fmt(r['roofline_ms'], '.2f')} ({r['roofline_bound']})"


def markdown_table(records: List[dict]) -> str:
    head = ('| model | size | mode | params (M) | GFLOPs | NS GFLOPs | latency ms (med / min / '
            'max) | timing | CPU ms (med) | peak mem (MiB) | GFLOP/s | % matmul | '
            'roofline ms (bound) | % roofline | status |')
    lines = [head, '|' + '---|' * 15]
    for r in records:
        lat = (f"{fmt(r['latency_ms_median'], '.0f')} / {fmt(r['latency_ms_min'], '.0f')} / "
               f"{fmt(r['latency_ms_max'], '.0f')}" if r['status'] == 'ok' else '–')
        frac = r['matmul_fraction']
        status = r['status'] + (f" ({r['note'][:60]})" if r['status'] not in ('ok', ) and
                                r['note'] else '')
        lines.append(
            f"| {r['label']} | {_size_label(r)} | {r['mode']} | {fmt(r['params_m'])} | "
            f"{fmt(r['gflops'])} | {fmt(r['newton_gflops'])} | {lat} | "
            f"{fmt(r.get('latency_method'))} | {fmt(r.get('cpu_ms_median'), '.0f')} | "
            f"{fmt(r['peak_mem_mb'], '.0f')} | {fmt(r['achieved_gflops_per_s'], '.1f')} | "
            f"{fmt(frac * 100 if frac is not None else None, '.0f')} | {_roofline_cell(r)} | "
            f"{_percent(r.get('roofline_fraction'))} | {status} |")
    return '\n'.join(lines)


def markdown_summary(summary: dict) -> str:
    lines = ['| model | mode | latency exponent | CPU-time exponent | memory exponent | '
             'failures |', '|---|---|---|---|---|---|']
    for e in summary.values():
        lines.append(f"| {e['label']} | {e['mode']} | {fmt(e['latency_exponent'], '.2f')} | "
                     f"{fmt(e.get('cpu_time_exponent'), '.2f')} | "
                     f"{fmt(e['memory_exponent'], '.2f')} | {', '.join(e['failures']) or '–'} |")
    return '\n'.join(lines)


def markdown_ratios(summary: dict, peers: Sequence[str] = ('Swin-T', 'PVTv2-b2')) -> str:
    """Latency and memory ratios against each peer, one row per size a peer was run at,
    smallest first (< 1: ours is faster / smaller; 0: the peer failed there; inf: ours
    failed)."""
    lines = ['| model | mode | size | ' + ' | '.join(f'latency / {p}' for p in peers) + ' | '
             + ' | '.join(f'memory / {p}' for p in peers) + ' |',
             '|---|---|---|' + '---|' * (2 * len(peers))]
    for e in summary.values():
        if e['label'] in peers:
            continue
        sizes = sorted({k.split('@')[1] for k in e['ratios']},
                       key=lambda t: math.prod(int(v) for v in t.split('x')))
        for size in sizes:
            cells = [e['ratios'].get(f'{p}@{size}', {}) for p in peers]
            lines.append(f"| {e['label']} | {e['mode']} | {size} | "
                         + ' | '.join(fmt(c.get('latency'), '.2f') for c in cells) + ' | '
                         + ' | '.join(fmt(c.get('memory'), '.2f') for c in cells) + ' |')
    return '\n'.join(lines)


def markdown_hotspots(records: List[dict], width: int = 90) -> str:
    """For each profiled case (``--profile K``): its top ops (on CUDA, kernels) with calls,
    self time and share, under a line with the step's latency and the self time of all ops
    (on CUDA the GPU's busy time); '' when no case was profiled."""
    parts = []
    for r in records:
        if not r.get('hotspots'):
            continue
        parts.append(f"**{r['label']}, {_size_label(r)}, {r['mode']}**: latency "
                     f"{fmt(r['latency_ms_median'], '.1f')} ms, profiled self time of all "
                     f"ops {fmt(r.get('profiled_ms'), '.1f')} ms\n\n"
                     '| op | calls | self ms | share % |\n|---|---|---|---|')
        for h in r['hotspots']:
            op = h['op'].replace('|', '\\|')
            op = op if len(op) <= width else op[:width - 1] + '…'
            parts[-1] += (f"\n| `{op}` | {h['calls']} | {fmt(h['self_ms'], '.2f')} | "
                          f"{fmt(h['share'] * 100, '.1f')} |")
    return '\n\n'.join(parts)


def write_markdown(path: str, records: List[dict], summary: dict) -> None:
    """The records, the scaling exponents and the peer ratios as Markdown tables, and the
    hot spots of profiled cases."""
    hot = markdown_hotspots(records)
    with open(path, 'w') as f:
        f.write(markdown_table(records) + '\n\n' + markdown_summary(summary) + '\n\n'
                + markdown_ratios(summary) + '\n' + (f'\n{hot}\n' if hot else ''))
