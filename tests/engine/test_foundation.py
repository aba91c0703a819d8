"""Package-level contract: import isolation, registry reach, safe checkpoints."""
import os
import pickle
import subprocess
import sys

import pytest
import torch

import mmlinattn.engine  # noqa: F401  (installs the safe loader)
from mmlinattn.utils.checkpoint import UnsafeCheckpointError, safe_load_checkpoint


def test_models_import_without_mmdet_mmseg():
    code = ('import sys, mmlinattn.models; '
            "bad = [m for m in ('mmdet', 'mmseg') if m in sys.modules]; "
            'assert not bad, bad')
    subprocess.run([sys.executable, '-c', code], check=True)


@pytest.mark.parametrize('scope', ['mmdet', 'mmseg'])
def test_scoped_type_resolves_from_library(scope):
    """`type='mmlinattn.X'` inside mmdet's / mmseg's registry builds our module."""
    import importlib

    from mmengine.registry import DefaultScope

    import mmlinattn.models  # noqa: F401
    from mmlinattn.registry import MODELS
    lib_models = importlib.import_module(f'{scope}.registry').MODELS
    importlib.import_module(f'{scope}.utils').register_all_modules(init_default_scope=False)
    names = sorted(MODELS.module_dict)
    assert names, 'no module registered in mmlinattn.registry.MODELS'
    with DefaultScope.overwrite_default_scope(scope):
        for name in names:
            assert lib_models.get(f'mmlinattn.{name}') is MODELS.get(name)


class _Payload:
    """Unpickling this would create a file: a stand-in for arbitrary code execution."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


def _write_malicious(tmp_path):
    marker = tmp_path / 'pwned'
    ckpt = tmp_path / 'evil.pth'
    torch.save({'state_dict': {'w': torch.zeros(1)}, 'meta': _Payload(str(marker))}, ckpt)
    assert not marker.exists()
    return ckpt, marker


def test_unsafe_checkpoint_refused(tmp_path):
    ckpt, marker = _write_malicious(tmp_path)
    with pytest.raises(UnsafeCheckpointError, match='refused to load checkpoint'):
        safe_load_checkpoint(ckpt)
    assert not marker.exists()


def test_unsafe_checkpoint_refused_through_mmengine(tmp_path):
    """mmengine's own loaders (resume, load_from, init_cfg) go through the safe path."""
    from mmengine.runner.checkpoint import _load_checkpoint
    ckpt, marker = _write_malicious(tmp_path)
    with pytest.raises(pickle.UnpicklingError, match='refused'):
        _load_checkpoint(str(ckpt), map_location='cpu')
    assert not marker.exists()


def test_mmengine_checkpoint_roundtrip_with_weights_only(tmp_path):
    """A checkpoint holding mmengine's message-hub state loads with weights_only=True."""
    import numpy as np
    from mmengine.logging import MessageHub
    hub = MessageHub.get_instance('ckpt_test')
    for i in range(3):
        hub.update_scalar('train/loss', float(i))
    hub.update_info('iter', 3)
    state = {'meta': {'seed': np.int64(3), 'iter': 3, 'lr': np.float64(0.1)},
             'state_dict': {'w': torch.ones(2)}, 'message_hub': hub.state_dict()}
    path = tmp_path / 'ok.pth'
    torch.save(state, path)
    loaded = safe_load_checkpoint(path)
    assert torch.equal(loaded['state_dict']['w'], torch.ones(2))
    buf = loaded['message_hub']['log_scalars']['train/loss']
    assert buf.current() == 2.0
    assert os.path.isfile(path)


def test_rng_state_hook_roundtrip(tmp_path):
    """RNG states saved by the hook survive a weights_only round trip and restore exactly."""
    import random

    import numpy as np

    from mmlinattn.engine import RNGStateHook
    hook, ckpt = RNGStateHook(), {}
    random.random(), np.random.rand(), torch.rand(1)
    hook.before_save_checkpoint(None, ckpt)
    torch.save(ckpt, tmp_path / 'rng.pth')
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    hook.after_load_checkpoint(None, safe_load_checkpoint(tmp_path / 'rng.pth'))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
