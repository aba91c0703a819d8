"""``torch.load`` that refuses code, on every torch this package supports (2.1 and later).

torch >= 2.5: ``torch.load(weights_only=True)`` inside ``torch.serialization.safe_globals``,
with the extra types allowed for that one call.  torch 2.1-2.4 has ``weights_only=True`` with
a fixed allowlist (``add_safe_globals`` came in 2.4, ``safe_globals`` in 2.5) whose unpickler
builds nothing but tensors, parameters and ordered dicts, so numpy arrays and mmengine's
``HistoryBuffer`` cannot load through it.  There the same rule is enforced by a restricted
pickle module: an unpickler that resolves only torch's own weights-only globals and the extra
ones, and refuses every other global (the restriction the ``pickle`` documentation
describes under "Restricting Globals"): a file that would call anything else fails before
anything is called.  :func:`restricted_load` runs on every torch (the tests check both forms
on the new torch, and the restricted one on torch 2.1).
"""
import collections
import pickle
import types
from typing import IO, Any, Dict, Iterable, Union

import torch

__all__ = ['safe_torch_load', 'restricted_load', 'RefusedGlobal', 'HAS_SAFE_GLOBALS']

#: torch >= 2.5: ``weights_only=True`` can take extra globals for one call
HAS_SAFE_GLOBALS = hasattr(torch.serialization, 'safe_globals')


class RefusedGlobal(pickle.UnpicklingError):
    """The restricted unpickler met a global outside its allowlist."""


def _qualified_names(obj: Any) -> Iterable[str]:
    module, name = obj.__module__, obj.__qualname__
    yield f'{module}.{name}'
    # numpy 1.x and 2.x pickle the same helpers under numpy.core / numpy._core
    if module.startswith('numpy.core'):
        yield f'numpy._core{module[len("numpy.core"):]}.{name}'
    elif module.startswith('numpy._core'):
        yield f'numpy.core{module[len("numpy._core"):]}.{name}'


def _allowed(extra: Iterable[Any]) -> Dict[str, Any]:
    import _codecs

    from torch._weights_only_unpickler import _get_allowed_globals
    allowed = dict(_get_allowed_globals())
    # what torch >= 2.4 allows under weights_only too: pickle protocol 2 writes bytes (a numpy
    # scalar's) as _codecs.encode(text, 'latin1'); mmengine's runner state holds a Counter
    allowed['_codecs.encode'] = _codecs.encode
    allowed['collections.Counter'] = collections.Counter
    for obj in extra:
        allowed.update(dict.fromkeys(_qualified_names(obj), obj))
    return allowed


def _restricted_pickle_module(allowed: Dict[str, Any]) -> types.ModuleType:
    """A module with the ``Unpickler`` and ``load`` that ``torch.load(pickle_module=...)``
    uses, resolving no global outside ``allowed``."""

    class Unpickler(pickle.Unpickler):

        def find_class(self, module: str, name: str) -> Any:
            obj = allowed.get(f'{module}.{name}')
            if obj is None:
                raise RefusedGlobal(f'Unsupported global: GLOBAL {module}.{name} is not an '
                                    f'allowed global of the restricted unpickler')
            return obj

    mod = types.ModuleType('mmlinattn_restricted_pickle')
    mod.Unpickler = Unpickler
    mod.load = lambda file, **kwargs: Unpickler(file, **kwargs).load()
    mod.__version__ = pickle.format_version
    return mod


def restricted_load(f: Union[str, IO[bytes]], map_location: Any, extra: Iterable[Any],
                    mmap: bool = False) -> Any:
    """``torch.load`` through the restricted unpickler (the form for torch < 2.5).

    Raises:
        RefusedGlobal: the file names a global outside the allowlist.
        ValueError: the file is not a pickle at all.
    """
    module = _restricted_pickle_module(_allowed(extra))
    try:
        return torch.load(f, map_location=map_location, pickle_module=module,
                          weights_only=False, mmap=mmap)
    except RefusedGlobal:
        raise
    except pickle.UnpicklingError as err:  # e.g. "invalid load key": not a pickle
        raise ValueError(f'not a pickle: {err}') from err


def safe_torch_load(f: Union[str, IO[bytes]], map_location: Any, extra: Iterable[Any],
                    mmap: bool = False) -> Any:
    """``torch.load`` that allows torch's weights-only types and ``extra``, nothing else:
    ``weights_only=True`` on torch >= 2.5, :func:`restricted_load` before."""
    extra = list(extra)
    if not HAS_SAFE_GLOBALS:
        return restricted_load(f, map_location, extra, mmap)
    with torch.serialization.safe_globals(extra):
        return torch.load(f, map_location=map_location, weights_only=True, mmap=mmap)
