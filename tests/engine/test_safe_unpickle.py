"""Both forms of the safe loader (mmlinattn/utils/safe_unpickle.py): ``weights_only=True`` with
``safe_globals`` (torch >= 2.5) and the restricted unpickler (torch 2.1-2.4, and testable on
every torch) load what training checkpoints hold and refuse a file that would run code, in
the zip and the legacy format.  The torch21 lane runs this file on torch 2.1, where only the
restricted form exists."""
import argparse
import pickle
from collections import OrderedDict

import numpy as np
import pytest
import torch

from mmlinattn.utils import safe_unpickle
from mmlinattn.utils.checkpoint import trusted_globals

FORMS = ['restricted'] + (['weights_only'] if safe_unpickle.HAS_SAFE_GLOBALS else [])


def _load(form, path):
    if form == 'restricted':
        return safe_unpickle.restricted_load(str(path), 'cpu', trusted_globals())
    return safe_unpickle.safe_torch_load(str(path), 'cpu', trusted_globals())


class _Payload:
    """Unpickling this would create a file: a stand-in for arbitrary code execution."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


def test_the_form_follows_the_torch_api():
    assert safe_unpickle.HAS_SAFE_GLOBALS == hasattr(torch.serialization, 'safe_globals')
    major, minor = map(int, torch.__version__.split('.')[:2])
    assert safe_unpickle.HAS_SAFE_GLOBALS == ((major, minor) >= (2, 5))


@pytest.mark.parametrize('zipped', [True, False])
@pytest.mark.parametrize('form', FORMS)
def test_training_checkpoint_contents_load(form, zipped, tmp_path):
    state = OrderedDict(w=torch.arange(6.).view(2, 3), b=torch.nn.Parameter(torch.ones(2)))
    saved = {'state_dict': state, 'meta': {'epoch': 3, 'loss': np.float64(0.25),
                                           'iters': np.int64(7),
                                           'hist': np.arange(4, dtype=np.float32)},
             'args': argparse.Namespace(lr=0.1, model='x')}
    path = tmp_path / 'ckpt.pth'
    torch.save(saved, path, _use_new_zipfile_serialization=zipped)
    got = _load(form, path)
    assert torch.equal(got['state_dict']['w'], state['w'])
    assert torch.equal(got['state_dict']['b'], state['b'].detach())
    assert got['meta']['loss'] == 0.25 and type(got['meta']['loss']) is np.float64
    assert got['meta']['iters'] == 7
    np.testing.assert_array_equal(got['meta']['hist'], np.arange(4, dtype=np.float32))
    assert got['args'] == argparse.Namespace(lr=0.1, model='x')


@pytest.mark.parametrize('zipped', [True, False])
@pytest.mark.parametrize('form', FORMS)
def test_code_running_file_is_refused(form, zipped, tmp_path):
    marker = tmp_path / 'pwned'
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': {'w': torch.ones(2)}, 'meta': _Payload(str(marker))}, path,
               _use_new_zipfile_serialization=zipped)
    with pytest.raises(pickle.UnpicklingError, match=r'GLOBAL (builtins|io)\.open'):
        _load(form, path)
    assert not marker.exists()


def test_restricted_form_says_a_non_pickle_is_not_one(tmp_path):
    path = tmp_path / 'notes.pth'
    path.write_bytes(b'model weights, see README\n')
    with pytest.raises(ValueError, match='not a pickle'):
        _load('restricted', path)
