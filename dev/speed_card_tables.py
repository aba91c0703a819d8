"""Print the per-machine-type tables of docs/benchmarks.md from the records they name:
latency in ms with the ratio to Swin-T (and to ResNet-50 where it ran) timed the same way (in
the same rounds, or both alone), and peak memory.  Usage: python dev/speed_card_tables.py
(every table), or markdown(NAME) from the docs test, which compares the page's tables with
these."""
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
    by = load(record, key)
    labels = [m for m in ORDER if any((m, s) in by for s in sizes)]
    head = ['model'] + [f"{s.split('x')[0]}²" for s in sizes]
    if mem_size:
        head.append(f"peak MiB {mem_size.split('x')[0]}²")
    rows = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]

    for m in labels:
        cells = [NAMES.get(m, m)]
        for s in sizes:
            r = by.get((m, s))
            if not r or r['status'] != 'ok':
                cells.append(r['status'] if r else '–')
                continue
            ms = r['latency_ms_median']
            txt = f'{ms:.0f}' if ms >= 10 else f'{ms:.1f}'
            ratios = [to_swin(by, m, s) / to_swin(by, p, s) for p in peers
                      if p != m and (p, s) in by and to_swin(by, p, s)]
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
    """Latency over Swin-T's measured the same way: in the same rounds (its pair's where the
    run used pairs), or both isolated where the model was timed alone (too slow to
    interleave).  Never an isolated time over an interleaved one."""
    r = by.get((m, s))
    if not r or r['status'] != 'ok':
        return r['status'] if r else None
    if r.get('latency_method') == 'isolated':
        return r['latency_ms_median'] / by[('Swin-T', s)]['isolated_latency_ms_median']
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


def ratio_lines(record, peer='ResNet-50'):
    """Every model's ratio to Swin-T and to ``peer`` in a record, one line per model and size
    (the model zoo pages quote them; Swin-T's to ``peer`` is the inverse of ``peer``'s)."""
    by = load(record)
    lines = []
    for (m, s), r in sorted(by.items()):
        if r['status'] != 'ok':
            continue
        mine, theirs = to_swin(by, m, s), to_swin(by, peer, s)
        if m == 'Swin-T':
            mine = 1.0
        ratios = [mine] + ([mine / theirs] if isinstance(theirs, float) else [])
        lines.append(f'{m} {s}: ' + ' '.join(f'{q:.2f}' for q in ratios))
    return '\n'.join(lines)


TABLES = {
    'ratios': lambda: ratio_table([
        ('Zen 4', 'benchmark_zoo_1024_zen4.json', ['512x512', '1024x1024']),
        ('family 26', 'benchmark_cpu_zen5.json', ['512x512', '1024x1024', '2048x2048']),
        ('AVX2', 'benchmark_cpu.json', ['512x512', '1024x1024', '2048x2048']),
        ('AMX', 'benchmark_cpu_infer_amx.json', ['1024x1024', '2048x2048'])]),
    'zen4': lambda: table('benchmark_zoo_1024_zen4.json', ['512x512', '1024x1024'], '1024x1024'),
    'zen5': lambda: table('benchmark_cpu_zen5.json', ['512x512', '1024x1024', '2048x2048'],
                          '2048x2048'),
    'zen5_roofline': lambda: table('benchmark_cpu_roofline_zen5.json', ['1024x1024']),
    'avx2': lambda: table('benchmark_cpu.json', ['512x512', '1024x1024', '2048x2048']),
    'amx': lambda: table('benchmark_cpu_infer_amx.json', ['1024x1024', '2048x2048'],
                         '2048x2048'),
    'zoo_ratios': lambda: ratio_lines('benchmark_zoo_1024_zen4.json'),
    'h200': lambda: table('benchmark_gpu_h200.json', ['2048x2048', '8192x8192'], '8192x8192',
                          key='benchmark'),
}


def markdown(name):
    """One table by name (the docs test compares the speed card's tables with these)."""
    return TABLES[name]()


if __name__ == '__main__':
    for name in TABLES:
        print(name + '\n' + markdown(name))
