"""Re-create the reduced photo sets in ``data/photos/`` from their source repositories.

    git clone https://github.com/EdjeElectronics/TensorFlow-Object-Detection-API-Tutorial-Train-Multiple-Objects-Windows-10 /tmp/cards
    git clone https://github.com/Shenggan/BCCD_Dataset /tmp/bccd
    git clone https://github.com/Tony607/mmdetection_instance_segmentation_demo /tmp/nuts
    python tools/dataset_converters/make_photo_data.py cards=/tmp/cards bccd=/tmp/bccd \
        nuts=/tmp/nuts [--out data/photos] [--long-side N]

Each ``NAME=PATH`` names a set (cards, bccd, nuts) and a checkout of its source; the set is
rewritten under ``<out>/NAME/`` with a ``source.json`` record (source, commit, licence,
counts).  The copies in the repository were written by this command (see data/photos/README.md).
"""  # noqa: E501
import argparse
import os.path as osp
import subprocess
import time

from mmengine.logging import MMLogger, print_log

from mmlinattn.datasets.photos import PHOTO_ROOT, PHOTO_SETS, convert_photo_set


def _commit(src: str):
    """The checked-out commit of ``src`` when it is a git checkout, else None."""
    try:
        return subprocess.run(['git', '-C', src, 'rev-parse', 'HEAD'], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('sources', nargs='+', metavar='NAME=PATH',
                        help=f'a set ({", ".join(PHOTO_SETS)}) and its source checkout')
    parser.add_argument('--out', default=PHOTO_ROOT, help='output directory')
    parser.add_argument('--long-side', type=int, default=None,
                        help='long side of the written images (default: per set, '
                             + ', '.join(f'{k} {v["long_side"]}' for k, v in PHOTO_SETS.items())
                             + ')')
    args = parser.parse_args(argv)
    jobs = []
    for word in args.sources:
        name, sep, path = word.partition('=')
        if not sep or name not in PHOTO_SETS:
            parser.error(f'{word!r}: expected NAME=PATH with NAME one of {sorted(PHOTO_SETS)}')
        if not osp.isdir(path):
            parser.error(f'{path} is not a directory: clone {PHOTO_SETS[name]["url"]} there')
        jobs.append((name, path))
    logger = MMLogger.get_instance('mmlinattn_photo_data', log_level='INFO')
    records = {}
    for name, path in jobs:
        start = time.perf_counter()
        records[name] = convert_photo_set(name, path, args.out, args.long_side, _commit(path))
        counts = ', '.join(f'{s}: {v["images"]} images / {v["boxes"]} boxes'
                           + (f' ({v["dropped_boxes"]} empty after clipping, dropped)'
                              if v['dropped_boxes'] else '')
                           for s, v in records[name]['splits'].items())
        print_log(f'{name}: {counts} -> {osp.join(args.out, name)} '
                  f'({time.perf_counter() - start:.1f}s)', logger)
    return records


if __name__ == '__main__':
    main()
