"""tools/analysis_tools/get_flops.py (:mod:`benchlib.model_flops`): the
fake-tensor count equals a real forward's count, the parts add up, the standard input sizes
follow the dataset, and failures are messages, not crashes."""
import json
import os.path as osp
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dense_helpers import small_input_env

from benchlib import model_flops
from mmlinattn.engine.runner import build_config_model
from repo_paths import ROOT
from tool_runs import tool as tool_process



@pytest.fixture(scope='module', autouse=True)
def _fast_config_loading():
    with small_input_env():
        yield


def _cfg(name):
    return osp.join(ROOT, 'configs', name)


# one config per head layout, covering every family
CASES = ['retinanet_soft_tiny_1x.py', 'maskrcnn_nalaformer_tiny_1x.py',
         'upernet_infvitplain_l4_ade20k_160k.py', 'semfpn_ldn_tiny_cityscapes_80k.py',
         'semfpn_infvit_tiny_ade20k_40k.py']


@pytest.mark.parametrize('name', CASES)
def test_fake_count_equals_real_forward(name):
    model, cfg = build_config_model(_cfg(name))
    shape = (64, 96)
    if hasattr(model, 'roi_head'):
        model.test_cfg.rpn.max_per_img = 20  # the RoI heads run for real in both modes
    fake = model_flops.measure_model(model, shape)
    real = model_flops.measure_model(model, shape, real=True)
    for key in ('flops', 'flops_backbone', 'flops_neck', 'flops_head', 'params'):
        assert fake[key] == real[key], key
    assert fake['flops'] == fake['flops_backbone'] + fake['flops_neck'] + fake['flops_head']
    assert fake['params'] == sum(p.numel() for p in model.parameters())
    assert 0 < fake['flops_backbone'] < fake['flops']

    # independent check: mmdet's / mmseg's own tensor-mode forward counted as a whole
    if not hasattr(model, 'roi_head'):  # (two-stage _forward's proposals depend on weights)
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            model._forward(torch.zeros(1, 3, *shape))
        assert counter.get_total_flops() == real['flops']


def test_roi_heads_counted_per_proposal():
    """Mask R-CNN's RoI heads on ``test_cfg.rpn.max_per_img`` proposals (1000 in the configs,
    20 here for speed), against a hand count of mmdet's heads: Shared2FC bbox head (7x7x256
    -> 1024 -> 1024 -> 81 classes + 80x4 deltas) and FCN mask head (4 conv3x3 at 14x14,
    deconv 2x2, 1x1 to 80 classes) per RoI."""
    model, cfg = build_config_model(_cfg('maskrcnn_nalaformer_tiny_1x.py'))
    assert cfg.model.test_cfg.rpn.max_per_img == 1000
    model.test_cfg.rpn.max_per_img = 20
    bbox = 256 * 7 * 7 * 1024 + 1024 * 1024 + 1024 * 81 + 1024 * 80 * 4
    mask = 4 * 14 * 14 * 256 * 256 * 9 + 14 * 14 * 256 * 256 * 4 + 28 * 28 * 256 * 80
    assert model_flops.roi_flops(model, [256] * 5, 4, (800, 1280)) == 2 * 20 * (bbox + mask)


def test_standard_shapes_follow_the_dataset():
    from mmengine.config import Config
    assert model_flops.standard_shape(Config.fromfile(_cfg('retinanet_soft_small_1x.py'))) \
        == (800, 1280)
    assert model_flops.standard_shape(
        Config.fromfile(_cfg('upernet_soft_small_ade20k_160k.py'))) == (512, 512)
    assert model_flops.standard_shape(
        Config.fromfile(_cfg('semfpn_ldn_tiny_cityscapes_80k.py'))) == (1024, 2048)


def _get_flops(*args):
    return tool_process([sys.executable, 'tools/analysis_tools/get_flops.py', *args])


def test_cli_prints_and_writes_json(tmp_path):
    out = tmp_path / 'r.json'
    proc = _get_flops(_cfg('semfpn_infvit_tiny_ade20k_40k.py'), '--shape', '64', '96',
                      '--json', str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert 'params:' in text and 'backbone' in text and 'divided by 2' in text
    rec = json.loads(out.read_text())
    assert (rec['height'], rec['width']) == (64, 96)
    assert rec['flops'] > rec['flops_backbone'] > 0


def test_time_limit_is_a_message_not_a_crash(tmp_path):
    out = tmp_path / 'r.json'
    proc = _get_flops(_cfg('semfpn_infvit_tiny_ade20k_40k.py'), '--real', '--shape', '1024',
                      '--timeout', '0.5', '--json', str(out))
    assert proc.returncode == 2
    assert 'time limit' in proc.stderr
    assert 'time limit' in json.loads(out.read_text())['error']


def test_out_of_memory_is_reported():
    class Hungry(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError('DefaultCPUAllocator: not enough memory: you tried to allocate')

    class Seg(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = Hungry()
            self.decode_head = Hungry()

    with pytest.raises(model_flops.MeasureError, match='out of memory at 64x64'):
        model_flops.measure_model(Seg(), (64, 64), real=True)


def test_newton_schulz_share_matches_hand_count():
    """SOFT++-Tiny at 128x128 keeps m = (128/32)^2 = 16 landmarks in every stage; each of its
    (2+4+10+16 heads) x (2, 2, 5, 2 blocks) = 94 attentions runs 20 Newton-Schulz steps of two
    m x m x m matmuls (Eq. 10)."""
    model, _ = build_config_model(_cfg('semfpn_soft_tiny_ade20k_40k.py'),
                                              {'model.backbone.pinv': 'newton'})
    r = model_flops.measure_model(model, (128, 128))
    heads_x_blocks = 2 * 2 + 4 * 2 + 10 * 5 + 16 * 2
    assert r['flops_newton'] == 2 * heads_x_blocks * 20 * 2 * 16 ** 3
    assert r['flops_newton'] < r['flops_backbone']
    other, _ = build_config_model(_cfg('semfpn_ldn_tiny_ade20k_40k.py'))
    assert model_flops.measure_model(other, (128, 128))['flops_newton'] == 0


def test_the_fake_count_covers_the_shipped_soft_pseudo_inverse():
    """test_fake_count_equals_real_forward counts retinanet_soft_tiny_1x.py as shipped: its A^+
    is the Cholesky solve, whose ridge retry has no values to read on fake tensors."""
    _, cfg = build_config_model(_cfg('retinanet_soft_tiny_1x.py'))
    assert cfg.model.backbone.pinv == 'cholesky'
