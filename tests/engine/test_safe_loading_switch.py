"""``import mmlinattn`` and ``import mmlinattn.models`` leave mmengine's checkpoint loading
as it was; ``import mmlinattn.engine`` (in every config's ``custom_imports``) switches the safe
loaders on, and does nothing else to mmengine (its config lookup stays its own).  Each check
runs in a fresh interpreter: this test process has installed them."""
import json
import subprocess
import sys

import torch

PROBE = '''
import copyreg, json, sys
from mmengine.config import config as config_module
from mmengine.logging.history_buffer import HistoryBuffer
from mmengine.config import utils as config_utils
from mmengine.runner.checkpoint import CheckpointLoader
import torch

def state():
    return dict(schemes={k: f'{v.__module__}.{v.__qualname__}'
                         for k, v in CheckpointLoader._schemes.items()},
                get_loader=repr(CheckpointLoader.__dict__['_get_checkpoint_loader']),
                # torch adds its own types as its modules load: only mmengine's matter here
                # (torch < 2.4 has no allowlist to add to: None)
                history_buffer_safe=any('HistoryBuffer' in repr(g)
                                        for g in torch.serialization.get_safe_globals())
                if hasattr(torch.serialization, 'get_safe_globals') else None,
                # pickled without builtins.getattr, so that safe loading can rebuild it
                history_buffer_reduce=HistoryBuffer in copyreg.dispatch_table,
                config_lookup=[repr(config_utils.load), repr(config_module.is_installed)])

before = state()
for name in sys.argv[1:]:
    __import__(name)
after = state()
print(json.dumps(dict(before=before, after=after)))
'''


def _probe(*modules):
    out = subprocess.run([sys.executable, '-c', PROBE, *modules], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_importing_the_package_and_models_registers_nothing():
    res = _probe('mmlinattn', 'mmlinattn.models')
    assert res['after'] == res['before']
    assert not res['after']['history_buffer_safe']
    assert res['before']['schemes'], 'mmengine registered no checkpoint scheme at all?'


def test_importing_the_engine_installs_the_safe_loaders():
    res = _probe('mmlinattn', 'mmlinattn.models', 'mmlinattn.engine')
    before, after = res['before']['schemes'], res['after']['schemes']
    assert before['http://'].startswith('mmengine.')
    assert set(after) == set(before)
    assert all(after[k].startswith('mmlinattn.utils.checkpoint_schemes.') for k in after), after
    assert after[''] == 'mmlinattn.utils.checkpoint_schemes.load_from_local_safe'
    assert res['after']['get_loader'] != res['before']['get_loader']
    if hasattr(torch.serialization, 'add_safe_globals'):
        assert res['after']['history_buffer_safe'] and not res['before']['history_buffer_safe']
    else:  # torch < 2.4: the restricted unpickler allows it (test_safe_unpickle.py)
        assert res['after']['history_buffer_safe'] is None
    assert res['after']['history_buffer_reduce'] and not res['before']['history_buffer_reduce']
    assert res['after']['config_lookup'] == res['before']['config_lookup']
