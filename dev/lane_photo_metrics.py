"""The learning-on-photos metrics of every lane side by side (requirements/lanes.txt).

    PYTHONPATH=tools/misc python dev/lane_photo_metrics.py [--lanes openmmlab onedl] \
        [--out records/lanes/photo_metrics.json]

(``PYTHONPATH=tools/misc``: the lanes are read as ``tools/misc/check_env.py`` reads them.)

Runs tests/tools/test_learns_on_photos.py in each lane's environment (set up first with
``bash tools/setup.sh --lane NAME``), with the tests' metrics written per config, and writes
one record: per lane, the tests' outcome, wall time and the untrained / trained metrics of every
config.  Run it on an otherwise idle machine (it trains nine models per lane).
"""
import argparse
import json
import os
import os.path as osp
import platform
import subprocess
import sys
import tempfile
import time

from check_env import read_lanes
from mmlinattn.utils.machine import cpu_name

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
TESTS = 'tests/tools/test_learns_on_photos.py'


def versions(python, dists):
    code = ('import json, sys; from importlib.metadata import version; '
            'print(json.dumps({d: version(d) for d in sys.argv[1:]}))')
    out = subprocess.run([python, '-c', code, 'torch', *dists], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def run_lane(name, lane, workers):
    python = osp.join(ROOT, lane['venv'], 'bin', 'python')
    if not osp.exists(python):
        sys.exit(f'{lane["venv"]} does not exist: run `bash tools/setup.sh --lane {name}` first')
    with tempfile.TemporaryDirectory() as tmp:
        metrics = osp.join(tmp, 'metrics.jsonl')
        env = dict(os.environ, MMLINATTN_PHOTO_METRICS=metrics,
                   MMLINATTN_TEST_DURATIONS=osp.join(tmp, 'durations.json'))
        start = time.time()
        proc = subprocess.run([python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-n',
                               str(workers), TESTS], cwd=ROOT, env=env, capture_output=True,
                              text=True)
        wall = time.time() - start
        rows = [json.loads(line) for line in open(metrics)] if osp.exists(metrics) else []
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ''
    print(f'[{name}] {summary} ({wall:.0f} s)')
    return dict(versions=versions(python, list(lane['dists'].values())), pytest=summary,
                exit_code=proc.returncode, wall_s=round(wall, 1),
                metrics={r['config']: dict(untrained=r['untrained'], trained=r['trained'])
                         for r in sorted(rows, key=lambda r: r['config'])})


def main():
    known = read_lanes()
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--lanes', nargs='+', default=list(known), choices=list(known))
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--out', default=osp.join(ROOT, 'records', 'lanes',
                                                  'photo_metrics.json'))
    args = parser.parse_args()
    record = dict(date=time.strftime('%Y-%m-%d %H:%M'), machine=cpu_name(),
                  python=platform.python_version(), tests=TESTS, workers=args.workers,
                  lanes={name: run_lane(name, known[name], args.workers)
                         for name in args.lanes})
    os.makedirs(osp.dirname(args.out), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump(record, f, indent=1)
    print(f'wrote {args.out}')
    return 0 if all(r['exit_code'] == 0 for r in record['lanes'].values()) else 1


if __name__ == '__main__':
    sys.exit(main())
