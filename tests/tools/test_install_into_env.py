"""mmlinattn installed into an environment that already holds an OpenMMLab stack, as a user with
a working mmdet / mmseg installs it: a wheel built from the tree, and ``pip install -e .``.
Nothing of the stack (torch, mmengine, mmcv, mmdet, mmseg, timm and what they pulled in) may
change, on whichever lane this suite runs (requirements/lanes.txt).  The extras of the lane's
stack (``[engine]``, ``[det]``, ``[seg]``, ``[all]`` on the official one, ``[onedl]`` on the
forks) ask for nothing the lane does not hold: their ranges admit every lane's versions.

The environment is fresh: a venv whose site-packages sees this interpreter's stack through a
``.pth`` line (tests/clean_env.py), so pip finds those distributions installed.  pip runs with
``--no-index``: a requirement the stack does not already satisfy cannot be fetched, so the
install fails instead of replacing part of the stack."""
import importlib.util
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

from clean_env import clean_env_vars, make_clean_env
from repo_paths import ROOT

pytestmark = pytest.mark.slow

#: the import names of the stack; their distribution names differ by lane
STACK_MODULES = ('mmengine', 'mmcv', 'mmdet', 'mmseg')

LIST_DISTS = textwrap.dedent('''
    import json, hashlib
    from importlib import metadata
    out = {}
    for dist in metadata.distributions():
        record = dist.read_text('RECORD') or ''
        out[dist.metadata['Name'].lower()] = [dist.version,
                                              hashlib.sha256(record.encode()).hexdigest()]
    print(json.dumps(out))
''')

PROBE = textwrap.dedent('''
    import torch, mmlinattn
    import mmlinattn.models  # noqa: F401
    from mmdet.registry import MODELS as DET
    from mmseg.registry import MODELS as SEG
    assert mmlinattn.__file__.startswith(%r), mmlinattn.__file__
    for registry in (DET, SEG):
        model = registry.build(dict(type='mmlinattn.LDN', arch='tiny')).eval()
        with torch.no_grad():
            outs = model(torch.randn(1, 3, 64, 64))
        assert len(outs) == 4 and all(torch.isfinite(o).all() for o in outs)
    print('OK')
''')


def _environment_distributions():
    """Every distribution of this interpreter's environment but mmlinattn: the stack of this
    lane (official or onedl) and all it pulled in, CUDA wheels included."""
    return sorted({dist.metadata['Name'] for dist in metadata.distributions()}
                  - {'mmlinattn'})


def _installed(python, cwd):
    # not in the checkout: its mmlinattn.egg-info would be on sys.path ('' first)
    out = subprocess.run([python, '-c', LIST_DISTS], capture_output=True, text=True,
                         env=clean_env_vars(), cwd=cwd, check=True).stdout
    return json.loads(out)


def _pip(python, cwd, *args):
    """The suite's pip, installing into the environment of ``python``."""
    cmd = [sys.executable, '-m', 'pip', '--python', python, '--disable-pip-version-check',
           'install', '--no-index', *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=clean_env_vars(),
                          cwd=cwd, timeout=300)


@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    """A wheel of the tree, built from a copy of it (setuptools writes build/ into the source)."""
    src, out = tmp_path_factory.mktemp('src'), tmp_path_factory.mktemp('wheel')
    for name in ('pyproject.toml', 'README.md', 'LICENSE'):
        shutil.copy(osp.join(ROOT, name), src / name)
    shutil.copytree(osp.join(ROOT, 'mmlinattn'), src / 'mmlinattn',
                    ignore=shutil.ignore_patterns('__pycache__'))
    proc = subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-index',
                           '--no-build-isolation', '-w', str(out), str(src)],
                          capture_output=True, text=True, env=clean_env_vars(), timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    wheels = [f for f in os.listdir(out) if f.endswith('.whl')]
    assert len(wheels) == 1, wheels
    return osp.join(out, wheels[0])


@pytest.mark.parametrize('how', ['wheel', 'editable'])
def test_install_leaves_the_stack_as_it_was(how, wheel, tmp_path):
    dists = _environment_distributions()
    assert all(importlib.util.find_spec(m) for m in STACK_MODULES)  # a stack to leave alone
    python = make_clean_env(str(tmp_path / 'env'), dists)
    before = _installed(python, tmp_path)
    assert 'mmlinattn' not in before
    target = wheel if how == 'wheel' else ROOT
    args = [target] if how == 'wheel' else ['--no-build-isolation', '-e', target]
    proc = _pip(python, tmp_path, *args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = _installed(python, tmp_path)
    added = sorted(set(after) - set(before))
    assert added == ['mmlinattn'], added
    changed = {name: (before[name], after.get(name)) for name in before
               if after.get(name) != before[name]}
    assert not changed, changed
    # and the installed package works from mmdet's and mmseg's registries
    where = (osp.join(str(tmp_path), 'env') if how == 'wheel'
             else osp.join(ROOT, 'mmlinattn'))
    probe = subprocess.run([python, '-c', PROBE % where], capture_output=True, text=True,
                           cwd=str(tmp_path), timeout=300,
                           env=dict(clean_env_vars(), OMP_NUM_THREADS='1'))
    assert probe.returncode == 0, probe.stdout[-2000:] + probe.stderr[-4000:]
    assert probe.stdout.rstrip().endswith('OK'), probe.stdout


def _lane_extras():
    """The extras whose distributions this lane holds: the official stack's or the forks'."""
    try:
        metadata.distribution('mmengine')
    except metadata.PackageNotFoundError:
        return ['onedl']
    return ['engine', 'det', 'seg', 'all']


def test_extras_ask_for_nothing_the_stack_lacks(wheel, tmp_path):
    python = make_clean_env(str(tmp_path / 'env'), _environment_distributions())
    for extra in _lane_extras():
        proc = _pip(python, tmp_path, '--dry-run', f'{wheel}[{extra}]')
        assert proc.returncode == 0, (extra, proc.stdout[-3000:] + proc.stderr[-3000:])
        wanted = [line for line in proc.stdout.splitlines() if line.startswith('Would install')]
        assert wanted == ['Would install mmlinattn-0.1.0'], (extra, proc.stdout[-3000:])
