"""The runs of records/whole_image/*.json as one markdown table (issue 74, target 1), for the
user page: one row per model and image size, one column per mode, each cell the peak resident
memory and the time of the run (or why it did not finish).  Where a model, mode and size was
measured more than once, the latest record (by its commit order in ``--records``) wins.

    python dev/whole_image_table.py --records records/whole_image/a.json records/whole_image/b.json
"""
import argparse
import json

MODES = ['backbone', 'upernet', 'upernet_whole', 'semfpn', 'semfpn_whole', 'retinanet',
         'retinanet_whole']
NAMES = {'ldn': 'LDN-small', 'soft': 'SOFT++-small', 'soft:max_landmarks=49':
         'SOFT++-small, `max_landmarks=49`', 'nalaformer': 'NaLaFormer-small',
         'infvit': 'InfViT-small', 'swin_t': 'Swin-T', 'r50': 'ResNet-50'}


def cell(run: dict) -> str:
    if run['status'] == 'ok':
        return f"{run['peak_mb'] / 1024:.1f} GiB, {run['seconds']:.0f} s"
    if run['status'] == 'skipped':
        return 'not run: ' + run['reason'].replace('logits alone', 'logits').replace(
            ' MiB > cap', ' MiB over the cap')
    if run['status'] == 'oom':
        return f"out of memory at {run['peak_mb'] / 1024:.0f} GiB"
    return f"{run['status']} after {run['seconds']:.0f} s"


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--records', nargs='+', required=True, help='oldest first')
    p.add_argument('--modes', nargs='+', default=MODES)
    args = p.parse_args()
    table = {}
    for path in args.records:
        for run in json.load(open(path))['runs']:
            key = (run['family'], 'x'.join(map(str, run['size'])))
            table.setdefault(key, {})[run['mode']] = cell(run)
    modes = [m for m in args.modes if any(m in row for row in table.values())]
    print('| model | image | ' + ' | '.join(modes) + ' |')
    print('|---|---|' + '---|' * len(modes))
    for (family, size), row in sorted(table.items(), key=lambda kv: (
            list(NAMES).index(kv[0][0]) if kv[0][0] in NAMES else 99, int(kv[0][1].split('x')[0]))):
        cells = [row.get(m, '') for m in modes]
        print(f'| {NAMES.get(family, family)} | {size} | ' + ' | '.join(cells) + ' |')


if __name__ == '__main__':
    main()
