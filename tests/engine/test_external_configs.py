"""mmengine's lookup of ``mmdet::`` / ``mmseg::`` config bases with each package's model
index read once per process (:mod:`mmlinattn.utils.external_configs`): the same configs,
the same errors, the index files parsed once."""
import pytest
from mmengine.config import Config
from mmengine.config import config as config_module
from mmengine.config import utils as config_utils

import mmlinattn.engine  # noqa: F401  (the configs' custom_imports)
from mmlinattn.utils.external_configs import cache_external_config_index
from repo_paths import ROOT

# mmdet:: bases (RetinaNet, COCO), mmseg:: bases (UperNet, ADE20K), a demo leaf over both
CONFIGS = ('configs/retinanet_soft_tiny_1x.py', 'configs/upernet_ldn_tiny_ade20k_160k.py',
           'configs/demo/maskrcnn_ldn_pico_demo.py')


@pytest.fixture
def plain_lookup(monkeypatch):
    """mmengine's own functions back in place for this test (the suite installs the cache
    in every process, as the tools do)."""
    assert cache_external_config_index()
    for module, name in ((config_utils, 'load'), (config_module, 'is_installed')):
        monkeypatch.setattr(module, name, getattr(module, name).__wrapped__)


def _parse_all():
    return [Config.fromfile(f'{ROOT}/{c}').to_dict() for c in CONFIGS]


def test_same_configs_and_each_index_file_read_once(plain_lookup):
    reads = []
    plain_load = config_utils.load

    def counting_load(file, *args, **kwargs):
        reads.append(str(file))
        return plain_load(file, *args, **kwargs)
    config_utils.load = counting_load          # restored by plain_lookup's monkeypatch
    expected = _parse_all()
    index_reads = [r for r in reads if '/.mim/' in r]
    files = set(index_reads)
    # without the cache: every external base re-reads the whole index of its package
    assert files and len(index_reads) >= 2 * len(files)
    assert any('mmdet' in f for f in files) and any('mmseg' in f for f in files)

    reads.clear()
    assert cache_external_config_index()       # wraps the counting loader
    assert cache_external_config_index()       # and only once
    assert _parse_all() == expected
    assert sorted(r for r in reads if '/.mim/' in r) == sorted(files)
    reads.clear()
    assert _parse_all() == expected            # a second round reads no index file
    assert not [r for r in reads if '/.mim/' in r]


def _error(path):
    with pytest.raises(Exception) as info:
        Config.fromfile(str(path))
    return type(info.value), str(info.value)


def test_errors_are_mmengines(tmp_path, monkeypatch):
    """A base missing from an installed package, a package mmengine knows but that is not
    installed: the same exception and message with and without the cache."""
    missing = tmp_path / 'missing_base.py'
    missing.write_text("_base_ = ['mmdet::_base_/models/no_such_model.py']\n")
    absent = tmp_path / 'absent_package.py'
    absent.write_text("_base_ = ['mmpose::_base_/default_runtime.py']\n")
    assert cache_external_config_index()
    cached = [_error(missing), _error(absent)]
    for module, name in ((config_utils, 'load'), (config_module, 'is_installed')):
        monkeypatch.setattr(module, name, getattr(module, name).__wrapped__)
    assert cached == [_error(missing), _error(absent)]
    assert cached[0][0] is FileNotFoundError and 'no_such_model' in cached[0][1]
    assert cached[1][0] is ModuleNotFoundError and 'mmpose' in cached[1][1]


def test_mmseg_bases_resolve_where_a_fork_renamed_the_distribution(monkeypatch, tmp_path):
    """On the onedl lane, mmengine's table names the distribution ``mmsegmentation`` while
    ``mmseg`` comes from ``onedl-mmsegmentation``.  Simulated here on either lane with a
    table entry naming a distribution that is not installed: a config of one's own with an
    ``mmseg::`` base fails as on the forks, and works once the entry is pointed at the
    installed module; the shipped configs do that themselves (``_base_/forked_stacks.py``
    runs before their first ``mmseg::`` base)."""
    from mmengine.config.utils import MODULE2PACKAGE

    from mmlinattn.utils.external_configs import find_forked_config_packages
    monkeypatch.setitem(MODULE2PACKAGE, 'mmseg', 'renamed-mmsegmentation')
    monkeypatch.setitem(MODULE2PACKAGE, 'mmnothere', 'mmnothere-dist')  # neither installed
    own = tmp_path / 'own_upernet.py'
    own.write_text("_base_ = 'mmseg::_base_/models/upernet_swin.py'\n")
    with pytest.raises(ModuleNotFoundError, match='renamed-mmsegmentation is not installed'):
        Config.fromfile(str(own))
    upernet = f'{ROOT}/configs/upernet_ldn_tiny_ade20k_160k.py'
    assert Config.fromfile(upernet).model.decode_head.type == 'UPerHead'  # forked_stacks.py
    assert MODULE2PACKAGE['mmseg'] == 'mmseg'   # ... pointed the entry at the module
    monkeypatch.setitem(MODULE2PACKAGE, 'mmseg', 'renamed-mmsegmentation')
    changed = find_forked_config_packages()
    assert changed == {'mmseg': 'renamed-mmsegmentation'}
    assert MODULE2PACKAGE['mmseg'] == 'mmseg' and MODULE2PACKAGE['mmnothere'] == 'mmnothere-dist'
    assert MODULE2PACKAGE['mmdet'] == 'mmdet'  # found under its own name: left as it was
    assert Config.fromfile(str(own)).model.decode_head.type == 'UPerHead'
    assert find_forked_config_packages() == {}  # idempotent
