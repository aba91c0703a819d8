"""Parsing configs whose ``_base_`` names another package's file (``mmdet::...``,
``mmseg::...``) without re-reading that package's model index for every name.

For each such name, mmengine's ``Config.fromfile`` first looks the path up among the
package's model-zoo configs: it reads the package's ``.mim/model-index.yml`` and every
metafile that index lists (about a hundred YAML files for mmdet or mmseg), and only then,
finding no ``_base_/...`` file there, takes the path as it is.  Before that it asks whether
the package is installed, reloading ``pkg_resources`` to do so.  It does both again for every
external base of every config it parses: they were two thirds of the time it took to parse
one of our configs (``docs/user_guides/configs.md``, "Start-up").

:func:`cache_external_config_index` makes mmengine read each of those index files once per
process, and remember that a package is installed once it has found it: its own lookup runs
unchanged on the parsed files, which an installed package does not change while a process
runs.  It is switched on by the tools that parse configs and by the test suite, never by
importing a package of mmlinattn.

:func:`find_forked_config_packages` lets the same lookup find ``mmseg::`` bases on the
maintained ``onedl-*`` forks.  mmengine resolves ``mmseg::`` through the *distribution* name
``mmsegmentation`` (its ``MODULE2PACKAGE`` table); the fork installs the same ``mmseg`` module
under the distribution ``onedl-mmsegmentation``, so onedl-mmengine answers "mmsegmentation is
not installed" for every ``mmseg::`` base.  Where a distribution of that table is absent but
its module is importable, the entry is pointed at the module, which mmengine's lookup
finds through ``importlib`` on either stack.  :func:`prepare_external_configs` does both.
"""
import functools
import importlib.util
import os.path as osp
from importlib.metadata import PackageNotFoundError, distribution

_MARK = '_mmlinattn_cached_index'


def _is_index_file(path) -> bool:
    """A package's model-index or metafile: YAML under its ``.mim`` folder."""
    path = str(path)
    return (path.endswith(('.yml', '.yaml'))
            and f'{osp.sep}.mim{osp.sep}' in osp.abspath(path))


def _remember_installed(plain):
    """``plain(package)``, with a True answer kept for the rest of the process (a package
    that was missing is asked for again: it may be installed meanwhile)."""
    found = set()

    @functools.wraps(plain)
    def is_installed(package):
        if package not in found and plain(package):
            found.add(package)
        return package in found
    return is_installed


def cache_external_config_index() -> bool:
    """Memoise the YAML reads of mmengine's external-config lookup (see the module
    docstring); idempotent.  Returns False where this mmengine has no such lookup."""
    try:
        from mmengine.config import utils
    except ImportError:
        return False
    from mmengine.config import config
    if not (hasattr(utils, '_get_cfg_metainfo') and callable(getattr(utils, 'load', None))
            and callable(getattr(config, 'is_installed', None))):
        return False
    if getattr(utils.load, _MARK, False):
        return True
    config.is_installed = _remember_installed(config.is_installed)
    plain = utils.load
    cached = functools.lru_cache(maxsize=None)(plain)

    # mmengine's lookup only reads what it loads (it keeps the matching entry and returns
    # it to a caller that reads its 'Config' path), so one parsed copy can serve every call.
    @functools.wraps(plain)
    def load(file, *args, **kwargs):
        if not args and not kwargs and isinstance(file, str) and _is_index_file(file):
            return cached(file)
        return plain(file, *args, **kwargs)
    setattr(load, _MARK, True)
    load.cache_info = cached.cache_info
    utils.load = load
    return True


def _distribution_installed(name: str) -> bool:
    try:
        distribution(name)
    except PackageNotFoundError:
        return False
    return True


def find_forked_config_packages() -> dict:
    """Point mmengine's ``MODULE2PACKAGE`` entries whose distribution is absent, but whose
    module is installed (under a fork's distribution name), at the module (see the module
    docstring).  Returns the entries changed, ``{module: old distribution}``; idempotent,
    and a no-op on the stack whose distribution names the table already has."""
    try:
        from mmengine.config.utils import MODULE2PACKAGE
    except ImportError:
        return {}
    changed = {}
    for module, dist in list(MODULE2PACKAGE.items()):
        if (dist != module and not _distribution_installed(dist)
                and importlib.util.find_spec(module) is not None):
            MODULE2PACKAGE[module] = module
            changed[module] = dist
    return changed


def prepare_external_configs() -> None:
    """What the tools call before parsing a config: ``mmdet::`` / ``mmseg::`` bases found on
    either OpenMMLab stack (:func:`find_forked_config_packages`), each package's index read
    once per process (:func:`cache_external_config_index`)."""
    find_forked_config_packages()
    cache_external_config_index()
