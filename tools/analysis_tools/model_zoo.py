"""Write ``docs/model_zoo.md``: one row per config with the paper's numbers and our measured
params / FLOPs at the standard input (COCO 800x1280, ADE20K 512x512, Cityscapes 1024x2048).

    python tools/analysis_tools/model_zoo.py               # measure what is missing, write it
    python tools/analysis_tools/model_zoo.py --remeasure           # measure everything again
    python tools/analysis_tools/model_zoo.py --remeasure '*soft*'  # measure matching configs
    python tools/analysis_tools/model_zoo.py --timeout 900 --configs 'configs/upernet_*'

Each measurement is ``tools/analysis_tools/get_flops.py CONFIG --json ...`` in a fresh
subprocess with a time limit (a crash, out-of-memory or time-out becomes a "not measured"
cell, not a failed run). Configs whose ``model`` dicts and input sizes are identical (e.g. a
1x and a 3x schedule) share one measurement. Results are cached in ``records/model_zoo.json``
keyed by the model dict, so a rerun only measures new or changed models (``--retry-failed``
also retries earlier failures). The cache does not know the code version: after changing a
backbone, remeasure (``--remeasure`` or ``--remeasure 'GLOB'``). The paper numbers and the
page layout are :mod:`mmlinattn.benchmark.model_zoo`.
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

from mmlinattn.benchmark.model_flops import dataset_type, standard_shape
from mmlinattn.benchmark.model_zoo import model_key, param_gaps, render

TOOLS = osp.dirname(osp.abspath(__file__))
ROOT = osp.dirname(osp.dirname(TOOLS))
DOC = osp.join(ROOT, 'docs', 'model_zoo.md')
CACHE = osp.join(ROOT, 'records', 'model_zoo.json')


def measure_config(path: str, timeout: float) -> dict:
    """Run get_flops.py on one config in a subprocess; a failure becomes a record."""
    with tempfile.TemporaryDirectory() as tmp:
        out = osp.join(tmp, 'r.json')
        cmd = [sys.executable, osp.join(TOOLS, 'get_flops.py'),
               osp.relpath(path, ROOT), '--json', out,
               '--timeout', str(timeout)]
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
            retry_failed: bool) -> List[dict]:
    from mmengine.config import Config
    rows, done = [], set()
    for path in paths:
        cfg = Config.fromfile(path)
        shape = standard_shape(cfg)
        key = model_key(cfg, shape)
        again = remeasure is not None and fnmatch.fnmatch(osp.basename(path), remeasure)
        stale = again or key not in cache or (retry_failed and 'error' in cache[key])
        if stale and key not in done:
            print(f'measuring {osp.basename(path)} at {shape[0]}x{shape[1]} ...', flush=True)
            cache[key] = measure_config(path, timeout)
            done.add(key)
            with open(CACHE, 'w') as f:
                json.dump(cache, f, indent=1, sort_keys=True)
        bb = cfg.model.backbone
        rows.append(dict(name=osp.splitext(osp.basename(path))[0], dataset=dataset_type(cfg),
                         backbone=f"{bb.type.split('.')[-1]}-{bb.arch}", key=key))
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
    parser.add_argument('--out', default=DOC)
    args = parser.parse_args(argv)
    from mmlinattn.utils.external_configs import cache_external_config_index
    cache_external_config_index()  # mmdet:: / mmseg:: bases without re-reading their index
    cache = {}
    if osp.isfile(CACHE):
        with open(CACHE) as f:
            cache = json.load(f)
    paths = sorted(glob.glob(args.configs))
    rows = collect(paths, cache, args.timeout, args.remeasure, args.retry_failed)
    os.makedirs(osp.dirname(args.out), exist_ok=True)
    with open(args.out, 'w') as f:
        f.write(render(rows, cache))
    missing = [r['name'] for r in rows if 'error' in cache.get(r['key'], {'error': 1})]
    print(f'wrote {args.out}: {len(rows)} configs, {len(missing)} not measured'
          + (': ' + ', '.join(missing) if missing else ''))
    for line in param_gaps(rows, cache):
        print('params differ from the paper by > 5 %:', line)
    return 0


if __name__ == '__main__':
    sys.exit(main())
