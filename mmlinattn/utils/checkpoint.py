"""Safe checkpoint loading under torch >= 2.6 (``weights_only=True`` kept on; torch < 2.5:
:mod:`.safe_unpickle`'s restricted unpickler, the same allowlist).

Training checkpoints hold a few objects besides tensors: mmengine's runner state (the message
hub's ``HistoryBuffer``, numpy scalars and arrays) and the ``argparse.Namespace`` that timm's
and the papers' authors' training scripts store under ``args``.  torch refuses those under
``weights_only=True``.  Instead of switching safe loading off, :func:`safe_load_checkpoint`
allows exactly those types, in every process, whatever was imported, and turns a refusal into
an error that names the refused object.  :mod:`.checkpoint_schemes` routes every scheme of
mmengine's ``CheckpointLoader`` through it.
"""
import argparse
import functools
import os
import os.path as osp
import pickle
import re
import struct
from typing import IO, Any, Callable, List, Optional, Tuple, Union

import torch

from .safe_unpickle import safe_torch_load


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint needs arbitrary code execution to unpickle and was refused."""


class CorruptCheckpointError(ValueError):
    """A checkpoint file is empty, truncated or not a ``torch.save`` file."""


class MissingCheckpointError(FileNotFoundError):
    """A backbone's ``init_cfg`` names a local checkpoint file that does not exist."""



@functools.lru_cache(maxsize=None)
def trusted_globals() -> Tuple[Any, ...]:
    """The non-tensor types of training checkpoints that unpickle without running code:
    mmengine's runner state and the ``args`` namespace of timm / the authors' scripts."""
    import numpy as np
    from mmengine.logging.history_buffer import HistoryBuffer
    safe: List[Any] = [HistoryBuffer, argparse.Namespace, np.ndarray, np.dtype]
    # numpy's array reconstruction helper lives in numpy.core (1.x) or numpy._core (2.x).
    try:
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct, scalar
    safe += [_reconstruct, scalar]
    # numpy scalar/dtype classes pickled as e.g. numpy.dtypes.Float64DType.
    names = ('float16', 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool')
    safe += [type(np.dtype(t)) for t in names]
    safe += [np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]
    return tuple(safe)


def safe_load_checkpoint(filename: Union[str, IO[bytes]], map_location: Any = 'cpu',
                         name: Optional[str] = None, mmap: bool = False) -> Any:
    """``torch.load(filename, weights_only=True)`` with :func:`trusted_globals` allowed.

    ``filename`` may also be an open binary file; ``name`` then names it in errors.
    ``mmap=True`` maps tensors instead of reading them (cheap when only metadata is needed).

    Raises:
        FileNotFoundError: ``filename`` does not exist.
        CorruptCheckpointError: the file is empty, truncated or not written by ``torch.save``.
        UnsafeCheckpointError: the file would execute code (or build an arbitrary object)
            when unpickled.  Such files are never loaded.
    """
    if isinstance(filename, (str, os.PathLike)):
        filename = name = osp.expanduser(str(filename))
        if not osp.isfile(filename):
            raise FileNotFoundError(f'checkpoint {filename!r} does not exist')
        if osp.getsize(filename) == 0:
            raise CorruptCheckpointError(
                f'checkpoint {filename!r} is empty (0 bytes): the save or download that wrote '
                f'it was cut short; write or download it again')
    try:
        return safe_torch_load(filename, map_location, trusted_globals(), mmap)
    except pickle.UnpicklingError as err:
        if 'Unsupported operand' in str(err):  # not a pickle at all
            raise _corrupt(name, err) from err
        raise _unsafe(name, err) from err
    except (EOFError, IndexError, KeyError, ValueError, struct.error) as err:
        raise _corrupt(name, err) from err
    except RuntimeError as err:
        if 'PytorchStreamReader' not in str(err):
            raise
        raise _corrupt(name, err) from err


def _unsafe(name: Optional[str], err: Exception) -> 'UnsafeCheckpointError':
    found = re.search(r'GLOBAL ([\w.]+)', str(err))
    what = f'`{found.group(1)}`' if found else 'an object'
    hint = ''
    if found and found.group(1) == 'builtins.getattr':
        hint = ('(Checkpoints that mmengine wrote without mmlinattn imported pickle '
                'HistoryBuffer through builtins.getattr; resave the weights with '
                "torch.save({'state_dict': ...}) and load them with load_from instead of "
                '--resume.) ')
    return UnsafeCheckpointError(
        f'refused to load checkpoint {name!r}: it needs {what} to unpickle, which safe '
        f'unpickling (torch.load(weights_only=True)) does not allow, so loading it could '
        f'run arbitrary code. If you created this file yourself from trusted code, re-save '
        f"only tensors / plain containers (e.g. torch.save({{'state_dict': "
        f'model.state_dict()}}, path)). {hint}Details: {str(err)[-300:]}')


def _corrupt(name: Optional[str], err: Exception) -> 'CorruptCheckpointError':
    return CorruptCheckpointError(
        f'checkpoint {name!r} is not a readable PyTorch checkpoint: it is truncated (an '
        f'interrupted save or download) or not a file written by torch.save '
        f'({type(err).__name__}: {str(err)[:200]}); write or download it again')


# --------------------------------------------------------------------------- backbone loading
#: where training scripts keep the EMA weights: timm's train.py, DeiT and the SOFT authors'
#: code.  (mmengine's EMAHook swaps its EMA weights into ``state_dict`` itself.)
EMA_KEYS = ('state_dict_ema', 'model_ema')
_RAW_KEYS = ('state_dict', 'model', 'module')
_PREFIXES = ('module.', 'backbone.', 'encoder.')


def select_weights(checkpoint: Any, ema: Optional[bool] = None) -> Tuple[Any, Optional[str]]:
    """The one rule every loader of this package follows (a backbone's ``init_cfg``, the
    converters, timm's own loader): the EMA weights where the file has them, else the raw
    ones.  ``ema=True`` requires the EMA weights, ``ema=False`` takes the raw ones.  Returns
    (what is under the chosen key, the key); the key is None for a plain state dict."""
    if not isinstance(checkpoint, dict):
        return checkpoint, None
    found = [k for k in EMA_KEYS if isinstance(checkpoint.get(k), dict)]
    if ema and not found:
        raise ValueError(f'ema=True but the checkpoint has no EMA weights (looked for '
                         f'{list(EMA_KEYS)}; it has {sorted(map(str, checkpoint))[:12]}); '
                         f'train with --model-ema, or load the raw weights (ema=False)')
    if found and ema is not False:
        return checkpoint[found[0]], found[0]
    for key in _RAW_KEYS:
        if isinstance(checkpoint.get(key), dict):
            return checkpoint[key], key
    return checkpoint, None


def extract_weights(checkpoint: Any, prefix: str = None,
                    ema: Optional[bool] = None) -> Tuple[dict, Optional[str]]:
    """The tensor dict inside a checkpoint (mmengine, timm, the authors' or plain), chosen
    by :func:`select_weights`, prefixes stripped, and the key it was under.

    Args:
        checkpoint: what ``torch.load`` returned.
        prefix: keep only keys under this prefix (mmengine's ``init_cfg.prefix``), e.g.
            ``'backbone.'`` to take the backbone out of a whole detector.
        ema: see :func:`select_weights`.
    """
    sd, key = select_weights(checkpoint, ema)
    if not isinstance(sd, dict) or not all(isinstance(k, str) for k in sd):
        raise ValueError('checkpoint holds no state dict (expected a dict of tensors, or one '
                         f'under one of {list(EMA_KEYS + _RAW_KEYS)})')
    sd = {k: v for k, v in sd.items() if torch.is_tensor(v)}
    if prefix:
        prefix = prefix if prefix.endswith('.') else prefix + '.'
        sd = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
        if not sd:
            raise ValueError(f'no key in the checkpoint starts with prefix {prefix!r}')
    for p in _PREFIXES:
        if sd and all(k.startswith(p) for k in sd):
            sd = {k[len(p):]: v for k, v in sd.items()}
    return sd, key


def extract_state_dict(checkpoint: Any, prefix: str = None,
                       ema: Optional[bool] = None) -> dict:
    """:func:`extract_weights` without the key."""
    return extract_weights(checkpoint, prefix, ema)[0]


def match_report(model: torch.nn.Module, state_dict: dict) -> dict:
    """Which of ``model``'s parameters/buffers a state dict fills.

    Returns a dict with ``matched``, ``missing``, ``unexpected`` and ``shape_mismatch``
    (lists of keys) and ``fraction``: matched parameter elements / all parameter elements.
    """
    own = model.state_dict()
    params = dict(model.named_parameters())
    matched = [k for k, v in state_dict.items() if k in own and own[k].shape == v.shape]
    mismatch = [k for k, v in state_dict.items() if k in own and own[k].shape != v.shape]
    unexpected = [k for k in state_dict if k not in own]
    missing = [k for k in own if k not in state_dict]
    total = sum(p.numel() for p in params.values())
    got = sum(params[k].numel() for k in matched if k in params)
    return dict(matched=matched, missing=missing, unexpected=unexpected,
                shape_mismatch=mismatch, fraction=got / max(total, 1))


class CheckpointMismatchError(RuntimeError):
    """A checkpoint fills too few of a model's parameters, or holds NaN / Inf weights."""


def check_finite_weights(state_dict: dict, path: str) -> None:
    """Raise :class:`CheckpointMismatchError` naming the tensors that hold NaN / Inf."""
    bad = [k for k, v in state_dict.items()
           if torch.is_tensor(v) and v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise CheckpointMismatchError(
            f'checkpoint {path!r} has NaN / Inf values in {len(bad)} tensor(s): {bad[:10]}; it '
            f'was probably saved after training diverged. Use an earlier checkpoint.')


def report_match(model: torch.nn.Module, state_dict: dict, path: str, min_match: float,
                 allow_partial: bool, cause: Callable[[dict], str], purpose: str,
                 override: str) -> dict:
    """Log how much of ``model`` a state dict fills and raise
    :class:`CheckpointMismatchError` below ``min_match`` (a fraction of the parameters)
    unless ``allow_partial``.  ``cause(report)`` names the likely reason, ``purpose`` what a
    partial load would spoil and ``override`` how to ask for it anyway."""
    from mmengine.logging import MMLogger, print_log
    logger = MMLogger.get_current_instance()
    name = type(model).__name__
    check_finite_weights(state_dict, path)
    report = match_report(model, state_dict)
    print_log(f'{name}: loaded {len(report["matched"])} tensors from {path} '
              f'({report["fraction"]:.1%} of parameters); missing {len(report["missing"])}, '
              f'unexpected {len(report["unexpected"])}, shape mismatch '
              f'{len(report["shape_mismatch"])}', logger=logger)
    for kind in ('missing', 'unexpected', 'shape_mismatch'):
        if report[kind]:
            print_log(f'{name}: {kind} keys (first 10): {report[kind][:10]}', logger=logger)
    if report['fraction'] < min_match and not allow_partial:
        raise CheckpointMismatchError(
            f'{name}: checkpoint {path!r} filled only {report["fraction"]:.1%} of the '
            f'parameters (< {min_match:.0%}); refusing to {purpose}. Likely cause: '
            f'{cause(report)}. To load it anyway, {override}.')
    return report


def _model_cause(report: dict, state_dict: dict) -> str:
    """Likely reason a whole detector / segmentor checkpoint does not fit the config."""
    if report['shape_mismatch'] and len(report['shape_mismatch']) >= len(report['matched']):
        return ('most shared tensors have other shapes (e.g. '
                f"{report['shape_mismatch'][0]}): the checkpoint was trained with another "
                'arch / number of classes than this config')
    keys = list(state_dict)
    if keys and all(not k.startswith(('backbone.', 'neck.', 'decode_head.', 'bbox_head.',
                                      'rpn_head.', 'roi_head.')) for k in keys):
        return ('the checkpoint holds no detector / segmentor keys (a backbone-only or '
                "foreign checkpoint?); use a backbone checkpoint through the backbone's "
                "init_cfg=dict(type='Pretrained', ...) instead")
    return ('the checkpoint was written for another model or config (e.g. unexpected key '
            f"{report['unexpected'][0]!r})" if report['unexpected'] else
            'the checkpoint was written for another model or config')


def check_model_checkpoint(model: torch.nn.Module, checkpoint: Any, path: str,
                           min_match: float = 0.9, allow_partial: bool = False,
                           purpose: str = 'evaluate a model that is partly random weights'
                           ) -> dict:
    """The match report of a whole-model checkpoint (mmengine's ``state_dict``, ``module.``
    stripped as mmengine does) against ``model``; raises like :func:`report_match`."""
    sd = checkpoint.get('state_dict', checkpoint) if isinstance(checkpoint, dict) else {}
    sd = {re.sub(r'^module\.', '', k): v for k, v in sd.items() if torch.is_tensor(v)}
    return report_match(model, sd, path, min_match, allow_partial,
                        cause=lambda r: _model_cause(r, sd), purpose=purpose,
                        override='pass --allow-partial')
