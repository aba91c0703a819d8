"""mmseg's and mmdet's own entry points take the shipped configs, as a user's script runs them:
a process that has imported nothing of mmlinattn (the configs' ``custom_imports`` bring the
backbones in) calls ``init_model`` / ``inference_model`` / ``MMSegInferencer`` and
``init_detector`` / ``inference_detector`` / ``DetInferencer``, then each package's own
``tools/test.py`` evaluates a photo config with a checkpoint that process saved.  The
``mmdet::`` / ``mmseg::`` bases must resolve with the lane's own mmengine, with no call of ours
first.  On the onedl forks onedl-mmengine's ``mmseg::`` lookup stops ``[seg]`` unless the
configs' ``_base_/forked_stacks.py`` runs before their first ``mmseg::`` base (docs/get_started.md,
"Supported stacks")."""
import os.path as osp
import sys

import pytest
from tool_runs import run

API = '''
import sys
import numpy as np
import torch
assert not [m for m in sys.modules if m.split('.')[0] == 'mmlinattn'], 'imported ours first'
kind, config, photo_config, ckpt = sys.argv[1:5]
img = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
if kind == 'seg':
    from mmseg.apis import MMSegInferencer, inference_model, init_model
    model = init_model(config, device='cpu')
    shape = inference_model(model, img).pred_sem_seg.data.shape
    pred = MMSegInferencer(model=config, weights=None, device='cpu')(
        img, return_datasamples=True)  # the data sample itself (mmdet's: a dict)
    shapes = [shape, (pred[0] if isinstance(pred, list) else pred).pred_sem_seg.data.shape]
    assert all(tuple(s[-2:]) == (48, 64) for s in shapes), shapes
    photo = init_model(photo_config, device='cpu')
else:
    from mmdet.apis import DetInferencer, inference_detector, init_detector
    model = init_detector(config, device='cpu')
    found = inference_detector(model, img).pred_instances
    pred = DetInferencer(model=config, weights=None, device='cpu')(
        img, return_datasamples=True)['predictions']
    found2 = (pred[0] if isinstance(pred, list) else pred).pred_instances
    assert found.bboxes.shape[-1] == found2.bboxes.shape[-1] == 4
    photo = init_detector(photo_config, device='cpu')
assert type(model.backbone).__module__.startswith('mmlinattn.'), type(model.backbone)
torch.save({'state_dict': photo.state_dict()}, ckpt)
print('entry points OK')
'''

# (package, its tools/test.py, a shipped config, a photo config, the metric its test prints)
CASES = {
    'seg': ('mmseg', 'configs/semfpn_soft_tiny_ade20k_40k.py',
            'configs/photos/semfpn_soft_pico_nuts.py', 'mIoU'),
    'det': ('mmdet', 'configs/retinanet_soft_tiny_1x.py',
            'configs/photos/retinanet_soft_pico_bccd.py', 'bbox_mAP'),
}


def _package_tool(package: str) -> str:
    """``<package>/.mim/tools/test.py``: where mmdet and mmseg ship their own tools."""
    import importlib.util
    spec = importlib.util.find_spec(package)
    return osp.join(osp.dirname(spec.origin), '.mim', 'tools', 'test.py')


@pytest.mark.slow
@pytest.mark.parametrize('kind', sorted(CASES))
def test_upstream_apis_and_test_tool_take_our_configs(kind, tmp_path):
    package, config, photo_config, metric = CASES[kind]
    ckpt = tmp_path / 'photo.pth'
    proc = run([sys.executable, '-c', API, kind, config, photo_config, ckpt])
    assert 'entry points OK' in proc.stdout, proc.stdout[-2000:]
    proc = run([sys.executable, _package_tool(package), photo_config, ckpt,
                '--work-dir', tmp_path / 'work'])
    assert metric in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
