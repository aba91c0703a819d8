"""tools/misc/check_env.py: which verified stack ("lane", requirements/lanes.txt) an environment
holds, problems only for what stops mmlinattn, other versions as notes."""
import os.path as osp
import subprocess
import sys
from importlib import metadata

import pytest
import torch

from repo_paths import ROOT, load_tool


@pytest.fixture(scope='module')
def check_env():
    return load_tool('tools/misc/check_env.py')


def _installed_only(monkeypatch, check_env, dists):
    monkeypatch.setattr(check_env, '_version', lambda d: '1.0' if d in dists else None)


def test_lanes_table_names_every_stack(check_env):
    lanes = check_env.read_lanes()
    assert list(lanes) == ['openmmlab', 'onedl', 'torch21']
    assert lanes['openmmlab']['dists']['mmseg'] == 'mmsegmentation'
    assert lanes['onedl']['dists']['mmcv'] == 'onedl-mmcv'
    assert lanes['torch21']['dists'] == lanes['openmmlab']['dists']
    for lane in lanes.values():
        assert osp.isfile(osp.join(ROOT, lane['constraints']))


@pytest.mark.parametrize('lane', ['openmmlab', 'onedl', 'torch21'])
def test_finds_the_lane_installed(lane, check_env, monkeypatch):
    """The official stack on torch 2.1 and on the new torch are told apart by the torch
    their constraints pin."""
    lanes = check_env.read_lanes()
    torch = check_env.pinned(lanes[lane]['constraints'])['torch']
    dists = set(lanes[lane]['dists'].values())
    monkeypatch.setattr(check_env, '_version', lambda d: torch if d == 'torch' else
                        '1.0' if d in dists else None)
    assert check_env.find_lane(lanes) == (lane, [])


def test_a_mix_of_lanes_and_no_stack_are_problems(check_env, monkeypatch):
    lanes = check_env.read_lanes()
    _installed_only(monkeypatch, check_env, {'mmcv', 'onedl-mmengine', 'onedl-mmdetection'})
    _, problems = check_env.find_lane(lanes)
    assert len(problems) == 1 and 'two lanes' in problems[0]
    assert 'openmmlab: mmcv' in problems[0] and 'onedl-mmengine' in problems[0]
    _installed_only(monkeypatch, check_env, set())
    assert check_env.find_lane(lanes) == (None, [
        'no OpenMMLab stack is installed (neither mmengine nor onedl-mmengine)'])


@pytest.mark.slow
def test_this_environment_is_a_verified_lane():
    proc = subprocess.run([sys.executable, 'tools/misc/check_env.py'], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lane = ('onedl' if _has('onedl-mmengine') else
            'torch21' if metadata.version('torch').startswith('2.1.') else 'openmmlab')
    assert any(line.split()[:2] == ['lane', lane] for line in proc.stdout.splitlines()), \
        proc.stdout
    assert proc.stdout.rstrip().endswith('environment OK')


def _has(dist):
    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(torch.cuda.is_available(), reason='about machines without a GPU')
def test_a_gpu_without_mmcv_cuda_ops_is_named_with_the_fix(check_env, monkeypatch):
    """Where torch sees a GPU, the check calls mmcv's NMS there: this mmcv, compiled for the
    CPU (and this machine, whose CUDA tensors fail), gets the line that says how to compile
    the CUDA ops."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    monkeypatch.setattr(torch.cuda, 'get_device_name', lambda i=0: 'Some GPU')
    line = check_env._check_gpu()
    assert line.startswith('1 x Some GPU; mmcv has no CUDA ops'), line
    assert 'MMLINATTN_MMCV_CUDA=1 bash tools/setup.sh' in line
