"""Running the command-line tools as a user types them, and reading what they wrote."""
import glob
import json
import os
import os.path as osp
import subprocess
import sys

from repo_paths import ROOT


def worker_threads(most=None):
    """This test process's share of the cores: all of them, or under pytest-xdist
    (tools/run_tests.sh) cores / workers, so that the workers do not fight over them."""
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    share = max(1, len(os.sched_getaffinity(0)) // max(1, workers))
    return share if most is None else min(most, share)


def run(args, env=None, **kw):
    """``args`` in a subprocess at the repository root, with this process's share of the
    cores (at most 2 threads) and the variables of ``env`` set; AssertionError with its
    output tail when it fails."""
    env = dict(os.environ, PYTHONUNBUFFERED='1', OMP_NUM_THREADS=str(worker_threads(2)),
               **(env or {}))
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, **kw)
    if proc.returncode:
        raise AssertionError(f'{" ".join(args[:4])} ... failed ({proc.returncode}):\n'
                             f'{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}')
    return proc


def last_metrics(work_dir):
    """The metrics of the last run in an mmengine work dir (its ``<timestamp>.json``)."""
    files = sorted(glob.glob(osp.join(str(work_dir), '*', '[0-9]*_[0-9]*.json')))
    assert files, f'no metrics json under {work_dir}'
    merged = {}
    with open(files[-1]) as f:
        for line in f:
            if line.strip():
                merged.update(json.loads(line))
    return merged


def convert(*argv):
    """tools/model_converters/convert_checkpoint.py as a user runs it."""
    return subprocess.run([sys.executable, 'tools/model_converters/convert_checkpoint.py',
                           *argv], cwd=ROOT, capture_output=True, text=True)


def convert_in_process(*argv):
    """The same tool's ``main`` called in this process (no interpreter start-up and
    imports): for tests about what it writes, not about its command line."""
    import contextlib
    import importlib.util
    import io
    import types
    spec = importlib.util.spec_from_file_location(
        'convert_checkpoint', osp.join(ROOT, 'tools', 'model_converters', 'convert_checkpoint.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = tool.main(list(argv))
        except SystemExit as exit_:
            code = exit_.code
    return types.SimpleNamespace(returncode=code or 0, stdout=out.getvalue(),
                                 stderr=err.getvalue())
