"""Every checkpoint scheme of mmengine's ``CheckpointLoader``, loaded with ``weights_only=True``.

mmengine's own loaders for ``torchvision://``, ``modelzoo://``, ``open-mmlab://``,
``openmmlab://`` and ``mmcls://`` download through ``torch.hub.load_state_dict_from_url``,
which unpickles with ``weights_only=False``: a crafted file served under such a name would run
code.  Here each scheme resolves its name the way mmengine does, then loads through
:func:`~mmlinattn.utils.checkpoint.safe_load_checkpoint`.  A scheme registered later by anyone
else (or a loader replaced with ``force=True``) is refused until it is registered with
:func:`register_safe_scheme`: unknown loaders fail closed.
"""
import copyreg
import io
import os
import os.path as osp
import re
import tempfile
from typing import Any, Callable, Dict, Optional, Sequence, Union

import torch

from .checkpoint import UnsafeCheckpointError, safe_load_checkpoint, trusted_globals

_INSTALLED = False

_SAFE_LOADERS = set()
_SAFE_PREFIXES: Dict[str, Callable] = {}  # prefix -> loader, as mmengine keeps them
_UNCHECKED_GET_LOADER: Optional[Callable] = None  # mmengine's own lookup, once installed


def register_safe_scheme(prefixes: Union[str, Sequence[str]], loader: Callable) -> None:
    """Register ``loader`` for ``prefixes`` with mmengine and mark it as one that loads with
    ``weights_only=True`` (so the fail-closed check lets it through)."""
    from mmengine.runner.checkpoint import CheckpointLoader
    _SAFE_LOADERS.add(loader)
    for prefix in ([prefixes] if isinstance(prefixes, str) else prefixes):
        _SAFE_PREFIXES[prefix] = loader
    CheckpointLoader.register_scheme(prefixes=prefixes, loader=loader, force=True)


def load_from_local_safe(filename: str, map_location: Any = None) -> Any:
    return safe_load_checkpoint(filename, map_location)


def load_from_http_safe(filename: str, map_location: Any = None,
                        model_dir: Optional[str] = None) -> Any:
    """Download ``filename`` once (rank 0; others wait) into torch hub's checkpoint cache
    and load it with :func:`safe_load_checkpoint`."""
    from urllib.parse import urlparse

    from mmengine.dist import barrier, get_dist_info
    from torch.hub import download_url_to_file, get_dir
    model_dir = model_dir or osp.join(get_dir(), 'checkpoints')
    os.makedirs(model_dir, exist_ok=True)
    cached = osp.join(model_dir, osp.basename(urlparse(filename).path))
    rank, world_size = get_dist_info()
    if rank == 0 and not osp.isfile(cached):
        download_url_to_file(filename, cached, progress=True)
    if world_size > 1:
        barrier()
    return safe_load_checkpoint(cached, map_location)


def _known_name(table: dict, name: str, filename: str) -> str:
    if name not in table:
        raise KeyError(f'unknown checkpoint name in {filename!r}; known names: '
                       f'{sorted(table)[:20]}...')
    return table[name]


def load_from_torchvision_safe(filename: str, map_location: Any = None) -> Any:
    """``torchvision://NAME`` (and the deprecated ``modelzoo://NAME``)."""
    from mmengine.runner.checkpoint import get_torchvision_models
    name = filename.split('://', 1)[1]
    url = _known_name(get_torchvision_models(), name, filename)
    return load_from_http_safe(url, map_location)


def load_from_openmmlab_safe(filename: str, map_location: Any = None) -> Any:
    """``open-mmlab://NAME`` / ``openmmlab://NAME``: a URL, or a file under mmengine's home."""
    from mmengine.runner.checkpoint import (_get_mmengine_home, get_deprecated_model_names,
                                            get_external_models)
    name = filename.split('://', 1)[1]
    name = get_deprecated_model_names().get(name, name)
    target = _known_name(get_external_models(), name, filename)
    if target.startswith(('http://', 'https://')):
        return load_from_http_safe(target, map_location)
    return safe_load_checkpoint(osp.join(_get_mmengine_home(), target), map_location)


def load_from_mmcls_safe(filename: str, map_location: Any = None) -> Any:
    """``mmcls://NAME``: the backbone of an mmcls classifier."""
    from mmengine.runner.checkpoint import _process_mmcls_checkpoint, get_mmcls_models
    url = _known_name(get_mmcls_models(), filename[len('mmcls://'):], filename)
    return _process_mmcls_checkpoint(load_from_http_safe(url, map_location))


def load_from_pavi_safe(filename: str, map_location: Any = None) -> Any:
    """``pavi://PATH``: downloaded from pavi's model cloud into a temporary directory."""
    try:
        from pavi import modelcloud
    except ImportError as err:
        raise ImportError('install pavi to load checkpoints from pavi://') from err
    model = modelcloud.get(filename[len('pavi://'):])
    with tempfile.TemporaryDirectory() as tmp:
        path = osp.join(tmp, model.name)
        model.download(path)
        return safe_load_checkpoint(path, map_location)


def load_from_ceph_safe(filename: str, map_location: Any = None) -> Any:
    """``s3://`` / ``petrel://`` (optionally ``<backend>:`` prefixed), read into memory."""
    from mmengine.fileio import get_file_backend
    backend = get_file_backend(filename, backend_args={'backend': 'petrel'})
    return safe_load_checkpoint(io.BytesIO(backend.get(filename)), map_location,
                                name=filename)


def load_checkpoint_safely(filename: str, map_location: Any = None) -> Any:
    """Load ``filename`` through the safe loader of its scheme (local path, ``http(s)://``,
    ``torchvision://``, ...), whether or not :func:`install_safe_checkpoint_loading` ran:
    the loads mmlinattn performs itself (a backbone's ``init_cfg``) never depend on which
    modules a config imported.  The longest matching prefix wins, as in mmengine."""
    for prefix in sorted(_SAFE_PREFIXES, key=len, reverse=True):
        if prefix and re.match(prefix, filename) is not None:
            return _SAFE_PREFIXES[prefix](filename, map_location)
    if re.match(r'[a-z][\w+.-]*://', filename):
        raise UnsafeCheckpointError(
            f'refused to load checkpoint {filename!r}: mmlinattn has no safe loader for its '
            f'scheme (known: {sorted(p for p in _SAFE_PREFIXES if p)}); download the file and '
            f'give its local path, or register a loader with register_safe_scheme')
    return load_from_local_safe(filename, map_location)


def _refusing_loader(loader: Callable) -> Callable:
    def load_from_unchecked_scheme(filename, map_location=None, *args, **kwargs):
        raise UnsafeCheckpointError(
            f'refused to load checkpoint {filename!r}: its scheme is served by '
            f'{getattr(loader, "__module__", "?")}.{getattr(loader, "__qualname__", loader)}, '
            f'which mmlinattn has not checked for safe unpickling (weights_only=True). Load '
            f'the file from a local path, or register a loader built on '
            f'mmlinattn.utils.checkpoint.safe_load_checkpoint with '
            f'mmlinattn.utils.checkpoint_schemes.register_safe_scheme.')
    return load_from_unchecked_scheme


def _checked_loader(cls, path: str) -> Callable:
    loader = _UNCHECKED_GET_LOADER(path)
    return loader if loader in _SAFE_LOADERS else _refusing_loader(loader)


SCHEMES = {
    '': load_from_local_safe,
    ('http://', 'https://'): load_from_http_safe,
    ('modelzoo://', 'torchvision://'): load_from_torchvision_safe,
    ('open-mmlab://', 'openmmlab://'): load_from_openmmlab_safe,
    'mmcls://': load_from_mmcls_safe,
    'pavi://': load_from_pavi_safe,
    (r'(\S+\:)?s3://', r'(\S+\:)?petrel://'): load_from_ceph_safe,
}


for _prefixes, _loader in SCHEMES.items():  # what load_checkpoint_safely knows from the start
    for _prefix in ([_prefixes] if isinstance(_prefixes, str) else _prefixes):
        _SAFE_PREFIXES[_prefix] = _loader


def install_safe_schemes() -> None:
    """Register the safe loader of every scheme above and make every other loader refuse."""
    global _UNCHECKED_GET_LOADER
    from mmengine.runner.checkpoint import CheckpointLoader
    for prefixes, loader in SCHEMES.items():
        register_safe_scheme(prefixes, loader)
    if _UNCHECKED_GET_LOADER is None:
        _UNCHECKED_GET_LOADER = CheckpointLoader._get_checkpoint_loader
        CheckpointLoader._get_checkpoint_loader = classmethod(_checked_loader)


def _reduce_history_buffer(buf):
    """Pickle a ``HistoryBuffer`` as a constructor call with plain lists.

    Its default pickle also stores a dict of bound statistics methods, rebuilt through
    ``builtins.getattr``, which safe unpickling rightly refuses."""
    return (type(buf), (buf._log_history.tolist(), buf._count_history.tolist(),
                        buf.max_length))


def install_safe_checkpoint_loading() -> None:
    """Allow-list mmengine's checkpoint types and route every checkpoint scheme of mmengine
    through :func:`~.checkpoint.safe_load_checkpoint` (this module). Idempotent.

    This changes mmengine's process-wide state (it re-registers the loaders of
    ``mmengine.runner.CheckpointLoader`` with ``force=True`` and adds torch safe globals), so
    it is never an effect of ``import mmlinattn`` or ``import mmlinattn.models``.  It is
    switched on explicitly: by importing :mod:`mmlinattn.engine` (the configs list it in
    ``custom_imports``, so mmdet's and mmseg's own ``tools/train.py`` get it too), by this
    repository's tools, or by calling this function before building a Runner.
    """
    global _INSTALLED
    if _INSTALLED:
        return
    from mmengine.logging.history_buffer import HistoryBuffer

    # torch >= 2.6 loads with weights_only=True by default, mmengine's own calls too;
    # before 2.4 there is no allowlist to add to (and the default is weights_only=False:
    # the loads that matter go through the schemes routed below).
    if hasattr(torch.serialization, 'add_safe_globals'):
        torch.serialization.add_safe_globals(list(trusted_globals()))
    copyreg.pickle(HistoryBuffer, _reduce_history_buffer)
    install_safe_schemes()
    _INSTALLED = True
