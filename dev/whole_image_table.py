"""The tables of docs/user_guides/whole_image.md from records/whole_image/*.json: one row per
model (and image size), one column per mode, each cell the peak resident memory and the time
of the run (or why it did not finish).  Where a column takes several records, the latest
listed wins for a model and size, and each cell names the commit its run was measured at,
linked to its record, so that a table mixing commits says so cell by cell.  The docs test
compares each table of the page with ``markdown(NAME)``, and the figures the page derives from
them (differences) with ``markdown('retinanet_saving')`` and ``markdown('slide_gain')``.

    python dev/whole_image_table.py [NAME ...]            # the named tables (default: all)
    python dev/whole_image_table.py --records a.json b.json  # every run of some records
"""
import argparse
import json
import os.path as osp

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
LINK_FROM = 'docs/user_guides'  # the page the cells' links are relative to
MODES = ['backbone', 'upernet', 'upernet_whole', 'semfpn', 'semfpn_whole', 'retinanet',
         'retinanet_whole']
NAMES = {'ldn': 'LDN-small', 'soft': 'SOFT++-small', 'soft:max_landmarks=49':
         'SOFT++-small, `max_landmarks=49`', 'nalaformer': 'NaLaFormer-small',
         'infvit': 'InfViT-small', 'swin_t': 'Swin-T', 'r50': 'ResNet-50'}
FAMILIES = ['ldn', 'soft:max_landmarks=49', 'nalaformer', 'infvit', 'swin_t', 'r50']
W = 'whole_image/'
SEG = '`WholeImageEncoderDecoder`'

#: name: (first columns, rows, sizes, [(header, mode, records oldest first)], cells name commits)
TABLES = {
    'upernet': (['UperNet', 'image'], ['ldn', 'swin_t'], [2048, 4096], [
        ('backbone alone', 'backbone', [W + 'upernet_ldn_swin_t_zen4.json']),
        ('mmseg whole mode', 'upernet', [W + 'upernet_ldn_swin_t_zen4.json']),
        (SEG, 'upernet_whole', [W + 'upernet_ldn_swin_t_zen4.json'])], False),
    'semfpn': (['Semantic FPN', 'image'], ['ldn'], [2048, 4096], [
        ('mmseg whole mode', 'semfpn', [W + 'semfpn_ldn_zen4.json']),
        (SEG, 'semfpn_whole', [W + 'semfpn_ldn_zen4.json'])], False),
    '8192': (['model'], FAMILIES, [8192], [
        ('backbone, before', 'backbone', [W + 'swin_t_8192_zen4.json',
                                          W + 'upernet_ldn_swin_t_zen4.json',
                                          W + 'families_8192_zen4.json']),
        ('backbone, now', 'backbone', [W + 'swin_t_8192_zen4.json',
                                       W + 'families_8192_two_pass_zen4.json',
                                       W + 'backbones_owned_zen4.json']),
        ('Semantic FPN, ' + SEG, 'semfpn_whole', [W + 'families_8192_stripes_zen4.json',
                                                   W + 'families_8192_two_pass_zen4.json',
                                                   W + 'heads_8192_current_zen4.json']),
        ('UperNet, ' + SEG, 'upernet_whole', [W + 'upernet_8192_zen4.json',
                                              W + 'heads_8192_current_zen4.json']),
        ('RetinaNet, mmdet', 'retinanet', [W + 'retinanet_8192_zen4.json',
                                           W + 'retinanet_8192_mmdet_zen4.json']),
        ('RetinaNet, `StripedRetinaHead`', 'retinanet_whole',
         [W + 'retinanet_8192_zen4.json', W + 'heads_8192_current_zen4.json'])], True),
    '16384': (['backbone'], ['ldn', 'nalaformer', 'infvit', 'soft:max_landmarks=49'], [16384], [
        ('16384x16384', 'backbone', [W + 'backbones_owned_zen4.json',
                                     W + 'backbones_16384_owned_zen4.json'])], True),
    'photo': (['model'], FAMILIES, [(4000, 6000)], [
        (header, mode, [W + 'photo_6000x4000_all_zen4.json']) for header, mode in [
            ('backbone alone', 'backbone'), ('Semantic FPN, ' + SEG, 'semfpn_whole'),
            ('UperNet, ' + SEG, 'upernet_whole'), ('RetinaNet, mmdet', 'retinanet'),
            ('RetinaNet, `StripedRetinaHead`', 'retinanet_whole')]], False),
}


def load(record: str) -> dict:
    with open(osp.join(ROOT, 'records', record)) as f:
        return json.load(f)


def commit(record: str) -> str:
    """The commit a record's runs were measured at, as the record states it (first word)."""
    stated = load(record)['meta'].get('commit')
    return stated.split()[0] if stated else 'commit not recorded'


def cell(run: dict) -> str:
    if run['status'] == 'ok':
        return f"{run['peak_mb'] / 1024:.1f} GiB, {run['seconds']:.0f} s"
    if run['status'] == 'skipped':
        size = run['reason'].split('logits alone ')[1].split(' MiB')[0]
        return f'not run: {int(size) / 1024:.0f} GiB of logits alone'
    if run['status'] == 'oom':
        return f"out of memory at {run['peak_mb'] / 1024:.0f} GiB"
    return f"{run['status']} after {run['seconds']:.0f} s"


def _size(size) -> tuple:
    return tuple(size) if isinstance(size, (list, tuple)) else (size, size)


def markdown(name: str) -> str:
    if name not in TABLES:
        return derived(name)
    first, rows, sizes, columns, mark = TABLES[name]
    lines = ['| ' + ' | '.join(first + [c[0] for c in columns]) + ' |',
             '|' + '---|' * (len(first) + len(columns))]
    for family in rows:
        for size in sizes:
            cells = [NAMES[family]] + (['x'.join(map(str, _size(size)))] if len(first) > 1 else [])
            for _, mode, records in columns:
                found = None
                for record in records:
                    for run in load(record)['runs']:
                        if (run['family'], run['mode'], tuple(run['size'])) == \
                                (family, mode, _size(size)):
                            found = (run, record)
                if found is None:
                    cells.append('–')
                    continue
                run, record = found
                link = osp.relpath(osp.join(ROOT, 'records', record), osp.join(ROOT, LINK_FROM))
                cells.append(cell(run) + (f', [{commit(record)}]({link})' if mark else ''))
            lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def _runs(record: str, mode: str, size: int) -> dict:
    return {r['family']: r for r in load(record)['runs']
            if r['mode'] == mode and tuple(r['size']) == (size, size) and r['status'] == 'ok'}


def derived(name: str) -> str:
    """Figures the page derives from the records, one per line: ``retinanet_saving``, what
    ``StripedRetinaHead`` saves on mmdet's RetinaHead at 8192x8192 (GiB; the cells of the
    8192 table); ``slide_gain``, slide mode's mIoU over whole mode's on the nut photos."""
    if name == 'retinanet_saving':
        cols = {mode: records for _, mode, records in TABLES['8192'][3]}
        latest = {}
        for mode in ('retinanet', 'retinanet_whole'):
            for record in cols[mode]:
                for family, run in _runs(record, mode, 8192).items():
                    latest.setdefault(mode, {})[family] = run
        mmdet, ours = latest['retinanet'], latest['retinanet_whole']
        return '\n'.join(
            f'{f}: {(mmdet[f]["peak_mb"] - ours[f]["peak_mb"]) / 1024:.1f}'
            for f in FAMILIES if f in mmdet and f in ours)
    if name == 'slide_gain':
        fams = load(W + 'whole_vs_slide_nuts_zen4.json')['families']
        return '\n'.join(f"{f}: {v['slide']['mIoU'] - v['whole']['mIoU']:.2f}"
                         for f, v in fams.items())
    raise KeyError(name)


def every_run(paths) -> str:
    table = {}
    for path in paths:
        for run in json.load(open(path))['runs']:
            key = (run['family'], 'x'.join(map(str, run['size'])))
            table.setdefault(key, {})[run['mode']] = cell(run)
    modes = [m for m in MODES if any(m in row for row in table.values())]
    lines = ['| model | image | ' + ' | '.join(modes) + ' |', '|---|---|' + '---|' * len(modes)]
    for (family, size), row in sorted(table.items(), key=lambda kv: (
            list(NAMES).index(kv[0][0]) if kv[0][0] in NAMES else 99, int(kv[0][1].split('x')[0]))):
        lines.append(f'| {NAMES.get(family, family)} | {size} | '
                     + ' | '.join(row.get(m, '') for m in modes) + ' |')
    return '\n'.join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('names', nargs='*', help=f'tables of the page: {", ".join(TABLES)}')
    p.add_argument('--records', nargs='+', help='every run of these records instead, oldest first')
    args = p.parse_args()
    if args.records:
        print(every_run(args.records))
        return
    for name in args.names or TABLES:
        print(f'{name}:\n{markdown(name)}\n')


if __name__ == '__main__':
    main()
