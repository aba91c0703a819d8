"""Report the environment mmlinattn runs in, and how to fix each problem found.

    python tools/misc/check_env.py            # full report
    python tools/misc/check_env.py --quiet    # only problems; exit status 1 if any

Checks versions against requirements/constraints.txt, that mmcv's compiled ops load and run
(nms and RoIAlign on CPU), that mmdet / mmseg / timm import, that mmlinattn's registry is
reachable from both libraries, and whether a GPU is present.
"""
import argparse
import importlib
import os.path as osp
import platform
import sys
from typing import Callable, List, Tuple

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SETUP_FIX = 'run `bash tools/setup.sh` (it installs the verified versions into .venv)'


def _pinned() -> dict:
    pins = {}
    path = osp.join(ROOT, 'requirements', 'constraints.txt')
    if osp.isfile(path):
        for line in open(path):
            line = line.split('#')[0].strip()
            if '==' in line:
                name, ver = line.split('==')
                pins[name.strip().lower()] = ver.strip()
    return pins


def _version(dist: str):
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


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
    if torch.cuda.is_available():
        return f'{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}'
    return 'none (CPU only; that is fine for the demo and the tests)'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quiet', action='store_true', help='print only problems')
    args = parser.parse_args()
    from mmlinattn.utils.external_configs import cache_external_config_index
    cache_external_config_index()  # mmdet:: / mmseg:: bases without re-reading their index

    lines: List[Tuple[str, str]] = []
    problems: List[Tuple[str, str]] = []
    pins = _pinned()
    lines.append(('python', f'{platform.python_version()} ({sys.executable})'))
    for dist, mod in (('torch', 'torch'), ('torchvision', 'torchvision'),
                      ('mmengine', 'mmengine'), ('mmcv', 'mmcv'), ('mmdet', 'mmdet'),
                      ('mmsegmentation', 'mmseg'), ('timm', 'timm'),
                      ('pycocotools', 'pycocotools'), ('numpy', 'numpy'),
                      ('mmlinattn', 'mmlinattn')):
        ver = _version(dist)
        want = pins.get(dist)
        if ver is None:
            problems.append((dist, f'not installed; {SETUP_FIX}'))
            continue
        if want and ver.split('+')[0] != want:
            problems.append((dist, f'version {ver}, verified is {want}; {SETUP_FIX}'))
        try:
            importlib.import_module(mod)
            lines.append((dist, ver))
        except Exception as err:  # noqa: BLE001 - any import failure is reported
            problems.append((dist, f'{ver} installed but `import {mod}` fails: '
                                   f'{type(err).__name__}: {err}; {SETUP_FIX}'))

    checks: List[Tuple[str, Callable[[], str], str]] = [
        ('mmcv ops', _check_mmcv_ops,
         'mmcv must be built from source with MMCV_WITH_OPS=1 against this torch; delete '
         '~/.cache/mmlinattn/wheelhouse/torch-* and .venv, then run `bash tools/setup.sh`'),
        ('registry', _check_registry,
         '`pip install -e .` inside .venv (tools/setup.sh does it)'),
        ('configs', _check_configs,
         'setuptools must be < 82 (it still ships pkg_resources): run `bash tools/setup.sh`'),
        ('gpu', _check_gpu, 'install a CUDA build of torch on a GPU machine'),
    ]
    for name, fn, fix in checks:
        try:
            lines.append((name, fn()))
        except Exception as err:  # noqa: BLE001
            problems.append((name, f'{type(err).__name__}: {err}. Fix: {fix}'))

    if not args.quiet:
        width = max(len(k) for k, _ in lines + problems)
        for k, v in lines:
            print(f'{k:<{width}}  {v}')
    for k, v in problems:
        print(f'PROBLEM {k}: {v}', file=sys.stderr)
    if not args.quiet:
        print('environment OK' if not problems else f'{len(problems)} problem(s) found')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
