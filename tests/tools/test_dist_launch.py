"""Distributed launch set-up: tools/dist_launch.sh runs the activated environment's python
(``VIRTUAL_ENV``, as for the onedl lane's .venv-onedl), else the repository's .venv/bin/python
when there is one (``PYTHON`` overrides both; without either, PATH's),
and the tools give the process group a collective timeout (``env_cfg.dist_cfg.timeout``)."""
import os
import os.path as osp
import shutil
import stat
import subprocess
from datetime import timedelta

import pytest
import torch
from mmengine.config import Config
from repo_paths import ROOT



def _stub(path, label):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "{label} $*"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def repo(tmp_path):
    """A copy of the launcher in a fake checkout, with stub interpreters that print which
    one ran."""
    (tmp_path / 'tools').mkdir()
    shutil.copy(osp.join(ROOT, 'tools', 'dist_launch.sh'), tmp_path / 'tools')
    _stub(tmp_path / 'bin' / 'python', 'path-python')
    _stub(tmp_path / 'custom' / 'python', 'custom-python')
    return tmp_path


def _launch(repo, python=None, virtual_env=None):
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHON', 'VIRTUAL_ENV')}
    env['PATH'] = f'{repo / "bin"}{os.pathsep}{env["PATH"]}'
    if python:
        env['PYTHON'] = python
    if virtual_env:
        env['VIRTUAL_ENV'] = virtual_env
    proc = subprocess.run(['bash', str(repo / 'tools' / 'dist_launch.sh'), 'train.py', '2'],
                          env=env, capture_output=True, text=True, check=True)
    return proc.stdout


def test_uses_repository_venv(repo):
    _stub(repo / '.venv' / 'bin' / 'python', 'venv-python')
    out = _launch(repo)
    assert out.startswith('venv-python -m torch.distributed.run'), out
    assert '--nproc_per_node=2' in out and '--launcher pytorch' in out
    assert _launch(repo, str(repo / 'custom' / 'python')).startswith('custom-python')


def test_activated_environment_comes_first(repo):
    _stub(repo / '.venv' / 'bin' / 'python', 'venv-python')
    _stub(repo / '.venv-onedl' / 'bin' / 'python', 'onedl-python')
    out = _launch(repo, virtual_env=str(repo / '.venv-onedl'))
    assert out.startswith('onedl-python -m torch.distributed.run'), out
    assert _launch(repo, str(repo / 'custom' / 'python'),
                   virtual_env=str(repo / '.venv-onedl')).startswith('custom-python')


def test_falls_back_to_path_without_venv(repo):
    assert _launch(repo).startswith('path-python -m torch.distributed.run')


@pytest.mark.parametrize('dist_cfg, expected', [
    (dict(backend='nccl'), 600),                 # mmdet's default runtime sets no timeout
    (dict(backend='nccl', timeout=45), 45),      # the config's own value is kept
])
def test_launcher_sets_collective_timeout(dist_cfg, expected, monkeypatch):
    import torch.distributed as dist

    from mmlinattn.engine import runner
    calls = []
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(dist, 'is_initialized', lambda: False)
    monkeypatch.setattr(dist, 'init_process_group', lambda **kw: calls.append(kw))
    cfg = Config(dict(model=dict(type='X'), env_cfg=dict(dist_cfg=dist_cfg)))
    runner.setup_launcher(cfg, 'pytorch')
    assert cfg.env_cfg.dist_cfg.timeout == expected        # what mmengine's init_dist reads
    assert calls == [dict(backend='gloo', timeout=timedelta(seconds=expected))]
