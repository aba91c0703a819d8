"""The backbones without the OpenMMLab detection/segmentation stack: ``pip install mmlinattn``
pulls torch and timm only (mmengine, from either stack, is the user's: docs/get_started.md);
the official stack comes with the ``engine`` / ``det`` / ``seg`` / ``all`` extras, the onedl
forks with ``onedl``."""
import importlib.util
import os
import os.path as osp
import subprocess
import textwrap

import pytest

from clean_env import clean_env_vars, make_clean_env
from repo_paths import ROOT

STACK = ('mmcv', 'mmdet', 'mmseg')

PROBE = textwrap.dedent('''
    import importlib.util, sys
    import torch
    hidden = [m for m in %r if importlib.util.find_spec(m) is not None]
    assert not hidden, f'not a clean environment: {hidden} importable'
    import mmlinattn, mmlinattn.models, mmlinattn.timm
    from mmlinattn.registry import MODELS
    torch.manual_seed(0)
    for cfg in [dict(type='SOFT', arch='tiny'), dict(type='NaLaFormer', arch='tiny'),
                dict(type='InfViT', arch='tiny'), dict(type='LDN', arch='tiny'),
                dict(type='InfViTPlain', arch=dict(embed_dims=64, num_layers=1, num_heads=2,
                                                   mlp_ratio=2.0))]:
        model = MODELS.build(cfg).eval()
        with torch.no_grad():
            outs = model(torch.randn(1, 3, 64, 64))
        assert all(torch.isfinite(o).all() for o in outs), cfg
        print(cfg['type'], [tuple(o.shape) for o in outs])
    import timm
    clf = timm.create_model('nalaformer_tiny', num_classes=5).eval()
    with torch.no_grad():
        assert clf(torch.randn(1, 3, 64, 64)).shape == (1, 5)
    loaded = sorted(m for m in sys.modules if m.split('.')[0] in %r)
    assert not loaded, loaded
    print('OK')
''' % (STACK, STACK))


def _core_dependencies():
    import tomllib
    with open(osp.join(ROOT, 'pyproject.toml'), 'rb') as f:
        return tomllib.load(f)['project']


def test_pyproject_core_dependencies_leave_out_the_openmmlab_stack():
    from packaging.requirements import Requirement
    project = _core_dependencies()
    core = {Requirement(r).name for r in project['dependencies']}
    # mmengine is no core dependency: the onedl forks provide it as onedl-mmengine, and pip
    # would install the official one over it; numpy is (the package imports it), with the
    # oldest lane's version as its floor
    assert core == {'torch', 'numpy', 'timm'}, core
    extras = {k: {Requirement(r).name for r in v}
              for k, v in project['optional-dependencies'].items()}
    assert extras['engine'] == {'mmengine'}
    assert {'mmengine', 'mmcv', 'mmdet'} <= extras['det']
    assert {'mmcv', 'mmsegmentation'} <= extras['seg']
    assert extras['det'] | extras['seg'] <= extras['all']
    assert {'onedl-mmengine', 'onedl-mmcv', 'onedl-mmdetection',
            'onedl-mmsegmentation'} <= extras['onedl']
    assert not any(name.startswith('onedl') for name in extras['all'])


@pytest.mark.slow
def test_backbones_work_with_torch_timm_mmengine_only(tmp_path):
    src = tmp_path / 'src'
    src.mkdir()
    os.symlink(osp.join(ROOT, 'mmlinattn'), src / 'mmlinattn')
    python = make_clean_env(str(tmp_path / 'env'), ['torch', 'timm', 'mmengine'],
                            extra_paths=[str(src)])
    env = dict(clean_env_vars(), OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')
    proc = subprocess.run([python, '-c', PROBE], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert proc.stdout.rstrip().endswith('OK'), proc.stdout
    # The outer environment has the stack, so the probe's "not importable" check means the
    # clean one really leaves it out.
    assert all(importlib.util.find_spec(m) for m in STACK)
