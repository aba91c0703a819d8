"""Whether every config leaf builds the same in two checkouts.

    python dev/compare_configs.py --before /work/base --after . [--json OUT] [GLOB ...]

Each tree's leaves (default ``configs/demo/*.py configs/photos/*.py``) are parsed by
``Config.fromfile`` in a subprocess run from that tree (its own package on the path) and
compared as dicts.  ``--ignore KEY``: top-level keys left out of the comparison (the old
idiom's carrier dicts: ``demo``, ``bccd``, ...).
"""
import argparse
import glob
import json
import os
import subprocess
import sys

DUMP = '''
import json, sys
from mmengine.config import Config
from mmlinattn.utils.external_configs import prepare_external_configs
prepare_external_configs()
out = {}
for path in sys.argv[1:]:
    out[path] = json.loads(json.dumps(Config.fromfile(path).to_dict(), default=repr))
print(json.dumps(out))
'''


def dump(tree, leaves):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    res = subprocess.run([sys.executable, '-c', DUMP, *leaves], cwd=tree, env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def diff(a, b, path=''):
    """Paths where ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in diff(a.get(k, '<missing>'), b.get(k, '<missing>'), f'{path}.{k}')]
    return [] if a == b else [path]


def _at(cfg, path):
    for k in path.strip('.').split('.'):
        cfg = cfg.get(k, '<missing>') if isinstance(cfg, dict) else cfg
    return cfg


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--before', required=True)
    parser.add_argument('--after', required=True)
    parser.add_argument('--ignore', nargs='*', default=[])
    parser.add_argument('--json')
    parser.add_argument('globs', nargs='*', default=['configs/demo/*.py', 'configs/photos/*.py'])
    args = parser.parse_args()
    leaves = sorted({os.path.relpath(p, args.before) for g in args.globs
                     for p in glob.glob(os.path.join(args.before, g))})
    before, after = dump(args.before, leaves), dump(args.after, leaves)
    report = {}
    for leaf in leaves:
        a = {k: v for k, v in before[leaf].items() if k not in args.ignore}
        b = {k: v for k, v in after[leaf].items() if k not in args.ignore}
        report[leaf] = diff(a, b)
        shown = [f'{p}: {_at(before[leaf], p)!r} -> {_at(after[leaf], p)!r}'
                 for p in report[leaf][:8]]
        print(f"{'equal' if not report[leaf] else 'DIFFERS'}  {leaf}  {shown}")
    equal = sum(not d for d in report.values())
    print(f'{equal} of {len(leaves)} leaves build equal (ignoring {args.ignore})')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(ignored=args.ignore, leaves=report, equal=equal, total=len(leaves)),
                      f, indent=1)
    return 0 if equal == len(leaves) else 1


if __name__ == '__main__':
    sys.exit(main())
