"""The version ranges pyproject.toml declares are the ones CI runs: every lower bound is the
exact version some lane pins (requirements/lanes.txt, each lane's constraints file), no lane
pins below it, and every pin of a declared distribution lies inside the declared range."""
import os.path as osp

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from repo_paths import ROOT, load_tool

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = pytest.importorskip('tomli')


def _declared():
    """``{(group, distribution): Requirement}`` of the core dependencies and every extra
    (the test tools' extra aside: it is not a runtime requirement)."""
    with open(osp.join(ROOT, 'pyproject.toml'), 'rb') as f:
        project = tomllib.load(f)['project']
    groups = dict(project['optional-dependencies'], core=project['dependencies'])
    groups.pop('tests')
    return {(group, Requirement(r).name.lower()): Requirement(r)
            for group, reqs in groups.items() for r in reqs}


def _lane_pins():
    """``{distribution: {lane: version}}`` over the lanes' constraints files."""
    check_env = load_tool('tools/misc/check_env.py')
    pins = {}
    for lane, info in check_env.read_lanes().items():
        for dist, version in check_env.pinned(info['constraints']).items():
            pins.setdefault(dist, {})[lane] = Version(version)
    return pins


def test_every_floor_is_the_oldest_lane_and_every_pin_in_range():
    pins = _lane_pins()
    floors = 0
    for (group, dist), req in _declared().items():
        lanes = pins.get(dist)
        if not lanes and not req.specifier:
            continue  # e.g. ftfy: no version stated, so none to test
        assert lanes, f'{group}: {req} is declared, but no lane installs {dist}'
        outside = {lane: str(v) for lane, v in lanes.items() if v not in req.specifier}
        assert not outside, f'{group}: {req} excludes what lanes run: {outside}'
        lows = [Version(s.version) for s in req.specifier if s.operator == '>=']
        if lows:
            floors += 1
            assert lows[0] == min(lanes.values()), \
                f'{group}: {req} declares a floor no lane runs (lanes: {lanes})'
    assert floors >= 10, floors  # torch, numpy, timm and the OpenMMLab ranges
