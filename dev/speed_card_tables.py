"""Print the per-machine-type tables of docs/benchmarks.md from the records they name:
latency in ms with the ratio to Swin-T (and to ResNet-50 where it ran) timed in the same
rounds, and peak memory.  Usage: python dev/speed_card_tables.py"""
import json
import os.path as osp

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
NAMES = {'SOFT:small:max_landmarks=49': 'SOFT++ `max_landmarks=49`',
         "SOFT:small:pinv='cholesky'": "SOFT++ paper's rule (`pinv='cholesky'`)",
         'SOFT:small': "SOFT++ paper's rule (Newton-Schulz)",
         'NaLaFormer:small': 'NaLaFormer', 'InfViT:small': 'InfViT', 'LDN:small': 'LDN',
         'InfViTPlain:l4': 'InfViTPlain `l4`'}
ORDER = list(NAMES) + ['Swin-T', 'ResNet-50', 'PVTv2-b2']


def table(record, sizes, mem_size=None, peers=('Swin-T', 'ResNet-50'), key=None):
    with open(osp.join(ROOT, 'records', record)) as f:
        rec = json.load(f)
    recs = rec[key]['records'] if key else rec['records']
    by = {(r['label'], f"{r['height']}x{r['width']}"): r for r in recs
          if r['mode'] == 'infer'}
    labels = [m for m in ORDER if any((m, s) in by for s in sizes)]
    head = ['model'] + [f"{s.split('x')[0]}²" for s in sizes]
    if mem_size:
        head.append(f"peak MiB {mem_size.split('x')[0]}²")
    rows = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]

    def to_swin(m, s):  # over the Swin-T steps of the same rounds (the pair's with pairs)
        r = by.get((m, s))
        if not r or r['status'] != 'ok':
            return None
        ref = r.get('paired_ref_latency_ms_median') or by[('Swin-T', s)]['latency_ms_median']
        return r['latency_ms_median'] / ref

    for m in labels:
        cells = [NAMES.get(m, m)]
        for s in sizes:
            r = by.get((m, s))
            if not r or r['status'] != 'ok':
                cells.append(r['status'] if r else '–')
                continue
            ms = r['latency_ms_median']
            txt = f'{ms:.0f}' if ms >= 10 else f'{ms:.1f}'
            ratios = [to_swin(m, s) / to_swin(p, s) for p in peers
                      if p != m and (p, s) in by and to_swin(p, s)]
            if ratios:
                txt += ' (' + ', '.join(f'{q:.2f}' for q in ratios) + ')'
            cells.append(txt)
        if mem_size:
            r = by.get((m, mem_size))
            cells.append(f"{r['peak_mem_mb']:.0f}" if r and r.get('peak_mem_mb') else '–')
        rows.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(rows)


def load(record, key=None):
    with open(osp.join(ROOT, 'records', record)) as f:
        rec = json.load(f)
    recs = rec[key]['records'] if key else rec['records']
    return {(r['label'], f"{r['height']}x{r['width']}"): r for r in recs
            if r['mode'] == 'infer'}


def to_swin(by, m, s):
    """Latency over Swin-T's in the same rounds (its pair's where the run used pairs)."""
    r = by.get((m, s))
    if not r or r['status'] != 'ok':
        return r['status'] if r else None
    ref = r.get('paired_ref_latency_ms_median') or by[('Swin-T', s)]['latency_ms_median']
    return r['latency_ms_median'] / ref


def ratio_table(columns):
    """One row per model, one column per (title, record, sizes): ratios to Swin-T."""
    data = [(title, load(record), sizes) for title, record, sizes in columns]
    head = ['model'] + [f"{t}, {' / '.join(s.split('x')[0] + '²' for s in sizes)}"
                        for t, _, sizes in data]
    rows = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for m in ORDER:
        if m == 'Swin-T' or not any((m, s) in by for _, by, sizes in data for s in sizes):
            continue
        cells = [NAMES.get(m, m)]
        for _, by, sizes in data:
            vals = [to_swin(by, m, s) for s in sizes]
            cells.append('–' if all(v is None for v in vals) else ' / '.join(
                '–' if v is None else v if isinstance(v, str) else f'{v:.2f}' for v in vals))
        rows.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(rows)


if __name__ == '__main__':
    print('ratios\n' + ratio_table([
        ('Zen 4', 'benchmark_zoo_1024_zen4.json', ['512x512', '1024x1024']),
        ('family 26', 'benchmark_cpu_zen5.json', ['512x512', '1024x1024', '2048x2048']),
        ('AVX2', 'benchmark_cpu.json', ['512x512', '1024x1024', '2048x2048']),
        ('AMX', 'benchmark_cpu_infer_amx.json', ['1024x1024', '2048x2048'])]))
    print('zen4\n' + table('benchmark_zoo_1024_zen4.json', ['512x512', '1024x1024'],
                           '1024x1024'))
    print('zen5\n' + table('benchmark_cpu_zen5.json', ['512x512', '1024x1024', '2048x2048'],
                           '2048x2048'))
    print('zen5 roofline (ResNet-50)\n' + table('benchmark_cpu_roofline_zen5.json',
                                                ['1024x1024']))
    print('avx2\n' + table('benchmark_cpu.json', ['512x512', '1024x1024', '2048x2048']))
    print('amx\n' + table('benchmark_cpu_infer_amx.json', ['1024x1024', '2048x2048'],
                          '2048x2048'))
    print('h200\n' + table('benchmark_gpu_h200.json', ['2048x2048', '8192x8192'],
                           '8192x8192', key='benchmark'))
