"""A neck / head whose ``in_channels`` does not match the mmlinattn backbone is reported
from the config, before any data is loaded, with the right list."""
import os.path as osp
import sys

import pytest
from mmengine.config import Config

import mmlinattn.models  # noqa: F401  (registers the backbones)
from mmlinattn.registry import MODELS
from mmlinattn.utils.channel_check import backbone_out_channels, check_channels
from repo_paths import ROOT
from tool_runs import tool as tool_process

CONFIGS = ['retinanet_soft_tiny_1x.py', 'maskrcnn_nalaformer_tiny_1x.py',
           'retinanet_infvitplain_l4_1x.py', 'upernet_infvit_tiny_ade20k_160k.py',
           'upernet_infvitplain_l4_ade20k_160k.py', 'semfpn_ldn_tiny_ade20k_40k.py',
           'demo/retinanet_nalaformer_pico_demo.py']


def load(name):
    return Config.fromfile(osp.join(ROOT, 'configs', name))


@pytest.mark.parametrize('name', CONFIGS)
def test_shipped_configs_pass(name):
    assert check_channels(load(name).model) == []


@pytest.mark.parametrize('arch,out_indices', [('tiny', (1, 2, 3)), ('small', (0, 1, 2, 3)),
                                              ('tiny', (-1, ))])
def test_channels_without_building_equal_the_built_backbone(arch, out_indices):
    cfg = dict(type='mmlinattn.LDN', arch=arch, out_indices=out_indices)
    built = MODELS.build(dict(cfg, type='LDN'))
    assert backbone_out_channels(cfg) == [c for c, _, _ in built.output_shapes(64, 64)]


def test_wrong_neck_names_the_right_list():
    model = load('retinanet_soft_tiny_1x.py').model
    model.neck.in_channels = [64, 128, 256]
    problems = check_channels(model)
    assert len(problems) == 1 and 'model.neck.in_channels=[128, 320, 512]' in problems[0]


def test_wrong_decode_and_auxiliary_heads():
    model = load('upernet_soft_small_ade20k_160k.py').model
    right = list(model.decode_head.in_channels)
    model.decode_head.in_channels = [1, 2, 3, 4]
    model.auxiliary_head.in_channels = 1
    problems = check_channels(model)
    assert len(problems) == 2
    assert f'model.decode_head.in_channels={right}' in problems[0]
    assert f'model.auxiliary_head.in_channels={right[model.auxiliary_head.in_index]}' \
        in problems[1]


def test_train_py_stops_before_loading_data(tmp_path):
    proc = tool_process(
        [sys.executable, 'tools/train.py', 'configs/retinanet_soft_tiny_1x.py', '--work-dir',
         str(tmp_path), '--cfg-options', 'model.neck.in_channels=[64,128,256]',
         f'train_dataloader.dataset.data_root={tmp_path}/none/'])
    assert proc.returncode != 0
    assert 'set model.neck.in_channels=[128, 320, 512]' in proc.stderr
    assert 'Traceback' not in proc.stderr
