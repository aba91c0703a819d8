"""Every checkpoint scheme of mmengine loads with ``weights_only=True``.

mmengine's ``torchvision://``, ``modelzoo://``, ``open-mmlab://``, ``openmmlab://`` and
``mmcls://`` loaders unpickled downloads with ``weights_only=False``.  Each scheme here serves
a file whose unpickling would create a marker file; it must be refused and the marker must
not appear.  A scheme registered by someone else is refused (fail closed).
"""
import shutil
import sys
import types

import pytest
import torch
from mmengine.runner import checkpoint as mmengine_ckpt
from mmengine.runner.checkpoint import CheckpointLoader

import mmlinattn.engine  # noqa: F401  (installs the safe loaders)
from mmlinattn.utils.checkpoint import UnsafeCheckpointError
from mmlinattn.utils.checkpoint_schemes import SCHEMES


class _Payload:
    """Unpickling this creates a file: a stand-in for arbitrary code execution."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


@pytest.fixture
def files(tmp_path, monkeypatch):
    """An evil and a good checkpoint, served for every URL / name the schemes resolve to."""
    marker = tmp_path / 'pwned'
    weights = {'backbone.w': torch.arange(4.0)}
    torch.save({'state_dict': weights, 'meta': _Payload(str(marker))}, tmp_path / 'evil.pth')
    torch.save({'state_dict': weights}, tmp_path / 'good.pth')

    def download(url, dst, *args, **kwargs):
        shutil.copy(tmp_path / url.rsplit('/', 1)[1], dst)

    urls = {n: f'https://example.com/{n}.pth' for n in ('evil', 'good')}
    monkeypatch.setattr(torch.hub, 'download_url_to_file', download)
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path / 'hub'))
    for table in ('get_torchvision_models', 'get_mmcls_models', 'get_external_models'):
        monkeypatch.setattr(mmengine_ckpt, table, lambda: urls)
    monkeypatch.setattr(mmengine_ckpt, '_get_mmengine_home', lambda: str(tmp_path))

    class Backend:  # s3:// and petrel://
        def get(self, name):
            return (tmp_path / name.rsplit('/', 1)[1]).read_bytes()

    import mmengine.fileio
    monkeypatch.setattr(mmengine.fileio, 'get_file_backend', lambda *a, **k: Backend())
    monkeypatch.setattr(mmengine_ckpt, 'get_file_backend', lambda *a, **k: Backend())

    class Model:  # pavi://
        def __init__(self, name):
            self.name = name + '.pth'

        def download(self, dst):
            shutil.copy(tmp_path / self.name, dst)

    pavi = types.ModuleType('pavi')
    pavi.modelcloud = types.SimpleNamespace(get=Model)
    monkeypatch.setitem(sys.modules, 'pavi', pavi)
    return marker, weights


PATHS = ['https://example.com/{}.pth', 'http://example.com/{}.pth', 'torchvision://{}',
         'modelzoo://{}', 'open-mmlab://{}', 'openmmlab://{}', 'mmcls://{}', 'pavi://{}',
         's3://bucket/{}.pth', 'petrel://bucket/{}.pth', 'open-mmlab:s3://bucket/{}.pth']


@pytest.mark.parametrize('path', PATHS)
def test_every_scheme_refuses_code_and_loads_weights(path, files):
    marker, weights = files
    with pytest.raises(UnsafeCheckpointError, match='refused to load checkpoint'):
        CheckpointLoader.load_checkpoint(path.format('evil'))
    assert not marker.exists()
    sd = CheckpointLoader.load_checkpoint(path.format('good'))['state_dict']
    key = 'w' if path.startswith('mmcls') else 'backbone.w'  # mmcls keeps the backbone
    torch.testing.assert_close(sd[key], weights['backbone.w'])


def test_open_mmlab_local_entry(files, tmp_path, monkeypatch):
    """An ``open-mmlab://`` name can map to a file under mmengine's home instead of a URL."""
    marker, _ = files
    monkeypatch.setattr(mmengine_ckpt, 'get_external_models', lambda: {'evil': 'evil.pth'})
    with pytest.raises(UnsafeCheckpointError):
        CheckpointLoader.load_checkpoint('open-mmlab://evil')
    assert not marker.exists()


def test_every_registered_prefix_is_covered():
    """The list above spans every prefix mmengine registers: none is left to mmengine."""
    covered = {p for prefixes in SCHEMES for p in ([prefixes] if isinstance(prefixes, str)
                                                   else prefixes)}
    assert set(CheckpointLoader._schemes) == covered


@pytest.mark.parametrize('prefix', ['evil://', 'http://'])
def test_schemes_registered_later_fail_closed(prefix, files, monkeypatch):
    """A new scheme, or mmengine's own unsafe loader put back with ``force=True``, is
    refused before it can unpickle anything."""
    marker, _ = files
    monkeypatch.setattr(CheckpointLoader, '_schemes', dict(CheckpointLoader._schemes))

    def load_from_anything(filename, map_location=None):
        return torch.load(files[0].parent / 'evil.pth', weights_only=False)

    loader = mmengine_ckpt.load_from_http if prefix == 'http://' else load_from_anything
    CheckpointLoader.register_scheme(prefix, loader=loader, force=True)
    with pytest.raises(UnsafeCheckpointError, match='not checked for safe unpickling'):
        CheckpointLoader.load_checkpoint(f'{prefix}example.com/evil.pth')
    assert not marker.exists()
