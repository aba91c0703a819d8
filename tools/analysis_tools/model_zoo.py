"""Write the model zoo: ``docs/model_zoo/README.md``, one ``README.md`` and ``metafile.yml``
per family under ``docs/model_zoo/<family>/`` and the root ``model-index.yml``, with the
authors' published numbers (paper or README, each with its source), our params / FLOPs per
config at the standard input (COCO 800x1280, ADE20K 512x512, Cityscapes 1024x2048) and each
backbone's CPU latency against Swin-T.

    python tools/analysis_tools/model_zoo.py               # measure what is missing, write it
    python tools/analysis_tools/model_zoo.py --check       # exit 1 if a written file is stale
    python tools/analysis_tools/model_zoo.py --remeasure           # measure everything again
    python tools/analysis_tools/model_zoo.py --remeasure '*soft*'  # measure matching configs
    python tools/analysis_tools/model_zoo.py --timeout 900 --configs 'configs/upernet_*'

Each measurement is ``tools/analysis_tools/get_flops.py CONFIG --json ...`` in a fresh
subprocess with a time limit (a crash, out-of-memory or time-out becomes a "not measured"
cell, not a failed run). Configs whose ``model`` dicts and input sizes are identical (e.g. a
1x and a 3x schedule) share one measurement. Results are cached in ``records/model_zoo.json``
keyed by the model dict, so a rerun only measures new or changed models (``--retry-failed``
also retries earlier failures). The cache does not know the code version: after changing a
backbone, remeasure (``--remeasure`` or ``--remeasure 'GLOB'``). The latency comes from the
``benchmark.py`` record ``--latency`` (made by ``dev/benchmark_zoo.sh``). The published
numbers and the page layout are :mod:`benchlib.model_zoo`.
"""
import argparse
import fnmatch
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import tempfile
from typing import List, Optional

from benchlib.model_flops import standard_shape
from benchlib.model_zoo import (LATENCY_RECORD, ZOO_RECORD, config_row,
                                           load_latency, param_gaps, render_all)

TOOLS = osp.dirname(osp.abspath(__file__))
ROOT = osp.dirname(osp.dirname(TOOLS))
CACHE = osp.join(ROOT, ZOO_RECORD)


def measure_config(path: str, timeout: float, real: bool = False) -> dict:
    """Run get_flops.py on one config in a subprocess; a failure becomes a record.  A model
    that fake tensors cannot run (an op that reads tensor values, e.g. the Cholesky solve's
    check of its factorisation) is counted again on a real forward."""
    result = _get_flops(path, timeout, real)
    if not real and '--real' in result.get('error', ''):
        print('  fake tensors cannot run it: counting on a real forward', flush=True)
        result = _get_flops(path, timeout, True)
    return result


def _get_flops(path: str, timeout: float, real: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = osp.join(tmp, 'r.json')
        cmd = [sys.executable, osp.join(TOOLS, 'get_flops.py'),
               osp.relpath(path, ROOT), '--json', out,
               '--timeout', str(timeout)] + (['--real'] if real else [])
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  timeout=timeout + 300)
        except subprocess.TimeoutExpired:
            return dict(error=f'not measured: over the {timeout:.0f} s limit (+300 s to build)')
        if osp.isfile(out):
            with open(out) as f:
                return json.load(f)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['no output']
        return dict(error=f'not measured: get_flops exited {proc.returncode}: {tail[0]}')


def collect(paths: List[str], cache: dict, timeout: float, remeasure: Optional[str],
            retry_failed: bool, measure: bool = True) -> List[dict]:
    from mmengine.config import Config
    rows, done = [], set()
    for path in paths:
        cfg = Config.fromfile(path)
        shape = standard_shape(cfg)
        row = config_row(path, cfg, shape)
        key = row['key']
        again = remeasure is not None and fnmatch.fnmatch(osp.basename(path), remeasure)
        stale = measure and (again or key not in cache
                             or (retry_failed and 'error' in cache[key]))
        if stale and key not in done:
            print(f'measuring {osp.basename(path)} at {shape[0]}x{shape[1]} ...', flush=True)
            cache[key] = measure_config(path, timeout)
            done.add(key)
            with open(CACHE, 'w') as f:
                json.dump(cache, f, indent=1, sort_keys=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--configs', default=osp.join(ROOT, 'configs', '*.py'),
                        help='glob of configs to measure (the page lists only these)')
    parser.add_argument('--timeout', type=float, default=600,
                        help='seconds per measurement before it is reported as not measured')
    parser.add_argument('--remeasure', nargs='?', const='*', metavar='GLOB',
                        help='measure again (all configs, or those whose file name matches)')
    parser.add_argument('--retry-failed', action='store_true',
                        help='measure again what failed or timed out last time')
    parser.add_argument('--latency', default=osp.join(ROOT, LATENCY_RECORD),
                        help='benchmark.py record of the backbone latencies')
    parser.add_argument('--out', default=ROOT, help='root to write the pages under')
    parser.add_argument('--check', action='store_true',
                        help='measure nothing, write nothing: exit 1 if a file under --out '
                             'differs from what the records give')
    args = parser.parse_args(argv)
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    cache = {}
    if osp.isfile(CACHE):
        with open(CACHE) as f:
            cache = json.load(f)
    paths = sorted(glob.glob(args.configs))
    rows = collect(paths, cache, args.timeout, args.remeasure, args.retry_failed,
                   measure=not args.check)
    lat = load_latency(args.latency) if osp.isfile(args.latency) else {}
    files = render_all(rows, cache, lat)
    if args.check:
        stale = []
        for rel, text in files.items():
            path = osp.join(args.out, rel)
            if not osp.isfile(path) or open(path).read() != text:
                stale.append(rel)
        print('stale: ' + ', '.join(stale) if stale else 'up to date')
        return 1 if stale else 0
    for rel, text in files.items():
        path = osp.join(args.out, rel)
        os.makedirs(osp.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(text)
    missing = [r['name'] for r in rows if 'error' in cache.get(r['key'], {'error': 1})]
    print(f'wrote {len(files)} files under {args.out}: {len(rows)} configs, '
          f'{len(missing)} not measured' + (': ' + ', '.join(missing) if missing else ''))
    if not lat:
        print(f'no latency record at {args.latency}: latency columns say "not measured"')
    for line in param_gaps(rows, cache):
        print('params differ from the published count by > 5 %:', line)
    return 0


if __name__ == '__main__':
    sys.exit(main())
