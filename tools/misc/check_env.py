"""Report the environment mmlinattn runs in, and how to fix each problem found.

    python tools/misc/check_env.py            # full report
    python tools/misc/check_env.py --quiet    # only problems; exit status 1 if any
    python tools/misc/check_env.py --strict   # versions other than the verified ones are problems too

Finds which verified OpenMMLab stack ("lane", requirements/lanes.txt) the environment holds:
official OpenMMLab or the onedl-* forks.  Problems are what stops mmlinattn from running: a
package missing or failing to import, both lanes' packages mixed in one environment, mmcv's
compiled ops not loading (nms and RoIAlign on CPU), mmlinattn's registry unreachable from
mmdet or mmseg, the ``mmdet::`` / ``mmseg::`` config bases not resolving.  A version other than
the lane's verified one is a note (``--strict``, which tools/setup.sh uses, makes it a problem).
"""
import argparse
import importlib
import os.path as osp
import platform
import sys
from typing import Callable, Dict, List, Optional, Tuple

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
#: the import name of each lane column of requirements/lanes.txt, in order
STACK_MODULES = ('mmengine', 'mmcv', 'mmdet', 'mmseg')


def read_lanes() -> Dict[str, dict]:
    """requirements/lanes.txt as ``{lane: {'venv', 'constraints', 'dists': {module: dist}}}``."""
    lanes = {}
    for line in open(osp.join(ROOT, 'requirements', 'lanes.txt')):
        fields = line.split('#')[0].split()
        if fields:
            name, venv, constraints, *dists = fields
            lanes[name] = dict(venv=venv, constraints=constraints,
                               dists=dict(zip(STACK_MODULES, dists)))
    return lanes


def _setup_fix(lane: str, default: str) -> str:
    flag = '' if lane == default else f' --lane {lane}'
    return f'run `bash tools/setup.sh{flag}` (it installs the verified versions)'


def pinned(constraints: str) -> dict:
    """The ``name==version`` pins of a constraints file (a path from the root), lower-case names."""
    pins = {}
    path = osp.join(ROOT, constraints)
    if osp.isfile(path):
        for line in open(path):
            line = line.split('#')[0].strip()
            if '==' in line:
                name, ver = line.split('==')
                pins[name.strip().lower()] = ver.strip()
    return pins


def _version(dist: str) -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def find_lane(lanes: Dict[str, dict]) -> Tuple[Optional[str], List[str]]:
    """The lane whose distributions are installed, and the problems found on the way (none
    installed, or distributions of two lanes, which overwrite each other's files).  Lanes of
    the same distributions (official OpenMMLab on two torch releases) are told apart by the
    torch their constraints pin."""
    found = {name: [d for d in lane['dists'].values() if _version(d)]
             for name, lane in lanes.items()}
    present = [name for name, dists in found.items() if dists]
    if not present:
        return None, ['no OpenMMLab stack is installed (neither ' + ' nor '.join(
            sorted({lane['dists']['mmengine'] for lane in lanes.values()})) + ')']
    families = {}  # one lane per set of distributions
    for name in present:
        families.setdefault(tuple(lanes[name]['dists'].values()), []).append(name)
    if len(families) > 1:
        listed = '; '.join(f'{names[0]}: {", ".join(found[names[0]])}'
                           for names in families.values())
        return present[0], [
            f'packages of two lanes are installed ({listed}): they share the import names '
            f'{", ".join(STACK_MODULES)}, so one overwrote the other\'s files; uninstall one '
            'lane\'s packages (or start from a fresh environment)']
    torch = (_version('torch') or '').split('+')[0]
    same_torch = [n for n in present if pinned(lanes[n]['constraints']).get('torch') == torch]
    return (same_torch or present)[0], []


def _check_mmcv_ops():
    import torch
    from mmcv.ops import RoIAlign, nms
    from mmcv.utils import ext_loader
    assert ext_loader.check_ops_exist(), 'mmcv._ext is missing (mmcv built without ops)'
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]])
    _, keep = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5)
    assert keep.tolist() == [0, 2], f'nms returned {keep.tolist()}'
    feat = torch.arange(16.).view(1, 1, 4, 4).requires_grad_()
    out = RoIAlign((2, 2), 1.0, 0)(feat, torch.tensor([[0., 0., 0., 3., 3.]]))
    out.sum().backward()
    assert out.shape == (1, 1, 2, 2) and feat.grad is not None
    return 'nms and RoIAlign (forward + backward) run on CPU'


def _check_registry():
    import mmdet.models  # noqa: F401
    import mmseg.models  # noqa: F401
    from mmdet.registry import MODELS as DET_MODELS
    from mmseg.registry import MODELS as SEG_MODELS

    import mmlinattn.models  # noqa: F401
    from mmlinattn.registry import MODELS
    names = sorted(MODELS.module_dict)
    for reg in (DET_MODELS, SEG_MODELS):
        for name in names:
            got = reg.get(f'mmlinattn.{name}')
            assert got is MODELS.get(name), f'{reg.scope} cannot resolve mmlinattn.{name}'
    return f'{len(names)} mmlinattn modules resolve from mmdet and mmseg ({", ".join(names)})'


def _check_configs():
    # mmengine finds `mmdet::` / `mmseg::` base configs through pkg_resources, which
    # setuptools >= 82 no longer ships.
    from mmengine.config import Config
    for name in ('retinanet_soft_tiny_1x.py', 'semfpn_ldn_tiny_ade20k_40k.py'):
        Config.fromfile(osp.join(ROOT, 'configs', name))
    return 'mmdet:: and mmseg:: base configs resolve'


def _check_gpu():
    import torch
    if not torch.cuda.is_available():
        return 'none (CPU only; that is fine for the demo and the tests)'
    gpus = f'{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}'
    try:  # RetinaNet's NMS and focal loss call mmcv's CUDA ops on CUDA tensors
        from mmcv.ops import nms
        nms(torch.zeros(1, 4, device='cuda'), torch.ones(1, device='cuda'), 0.5)
    except Exception as err:  # noqa: BLE001 - what fails is reported, not raised
        return (f'{gpus}; mmcv has no CUDA ops ({type(err).__name__}), so detectors fail '
                'on the GPU: MMLINATTN_MMCV_CUDA=1 bash tools/setup.sh compiles them '
                '(needs nvcc)')
    return f"{gpus}; mmcv's CUDA ops run"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quiet', action='store_true', help='print only problems')
    parser.add_argument('--strict', action='store_true',
                        help='a version other than the lane\'s verified one is a problem')
    args = parser.parse_args()
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once

    lines: List[Tuple[str, str]] = []
    notes: List[Tuple[str, str]] = []
    problems: List[Tuple[str, str]] = []
    lanes = read_lanes()
    default = next(iter(lanes))
    lane, lane_problems = find_lane(lanes)
    problems += [('lane', p + f'; {_setup_fix(default, default)} for the default lane')
                 for p in lane_problems]
    lane = lane or default
    fix = _setup_fix(lane, default)
    pins = pinned(lanes[lane]['constraints'])
    lines.append(('python', f'{platform.python_version()} ({sys.executable})'))
    lines.append(('lane', f'{lane} (verified versions: {lanes[lane]["constraints"]})'))
    packages = [('torch', 'torch'), ('torchvision', 'torchvision')]
    packages += [(lanes[lane]['dists'][m], m) for m in STACK_MODULES]
    packages += [('timm', 'timm'), ('pycocotools', 'pycocotools'), ('numpy', 'numpy'),
                 ('mmlinattn', 'mmlinattn')]
    for dist, mod in packages:
        ver = _version(dist)
        want = pins.get(dist)
        if ver is None:
            problems.append((dist, f'not installed; {fix}'))
            continue
        if want and ver.split('+')[0] != want:
            (problems if args.strict else notes).append(
                (dist, f'version {ver}, verified is {want}; {fix}'))
        try:
            importlib.import_module(mod)
            lines.append((dist, ver))
        except Exception as err:  # noqa: BLE001 - any import failure is reported
            problems.append((dist, f'{ver} installed but `import {mod}` fails: '
                                   f'{type(err).__name__}: {err}; {fix}'))

    checks: List[Tuple[str, Callable[[], str], str]] = [
        ('mmcv ops', _check_mmcv_ops,
         'mmcv must be built from source with MMCV_WITH_OPS=1 against this torch; delete '
         f'~/.cache/mmlinattn/wheelhouse/torch-* and {lanes[lane]["venv"]}, then {fix}'),
        ('registry', _check_registry,
         '`pip install --no-deps -e .` in this environment (tools/setup.sh does it)'),
        ('configs', _check_configs,
         'on the official lane setuptools must be < 82 (mmengine 0.10.7 imports '
         f'pkg_resources): {fix}'),
        ('gpu', _check_gpu, 'install a CUDA build of torch on a GPU machine'),
    ]
    for name, check, how in checks:
        try:
            lines.append((name, check()))
        except Exception as err:  # noqa: BLE001
            problems.append((name, f'{type(err).__name__}: {err}. Fix: {how}'))

    if not args.quiet:
        width = max(len(k) for k, _ in lines + problems + notes)
        for k, v in lines:
            print(f'{k:<{width}}  {v}')
        for k, v in notes:
            print(f'note {k}: {v}')
    for k, v in problems:
        print(f'PROBLEM {k}: {v}', file=sys.stderr)
    if not args.quiet:
        print('environment OK' if not problems else f'{len(problems)} problem(s) found')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
