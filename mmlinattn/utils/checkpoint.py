"""Safe checkpoint loading under torch >= 2.6 (``weights_only=True`` kept on).

mmengine 0.10.x pickles a few of its own objects into checkpoints (``HistoryBuffer`` in the
message hub, numpy scalars and arrays, ``ConfigDict``-free plain metadata).  torch >= 2.6
refuses those under ``weights_only=True``.  Instead of switching safe loading off, we
allow-list exactly those types and register a local-file loader with mmengine's
``CheckpointLoader`` that always passes ``weights_only=True`` and turns a refusal into an
error that says what was refused and why.
"""
import copyreg
import os
import os.path as osp
import pickle
from typing import Any, List, Optional

import numpy as np
import torch

_INSTALLED = False


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint needs arbitrary code execution to unpickle and was refused."""


def _mmengine_safe_globals() -> List[Any]:
    """Types mmengine writes into its checkpoints (message hub, metadata)."""
    from mmengine.logging.history_buffer import HistoryBuffer
    safe: List[Any] = [HistoryBuffer, np.ndarray, np.dtype]
    # numpy's array reconstruction helper lives in numpy.core (1.x) or numpy._core (2.x).
    try:
        from numpy._core.multiarray import _reconstruct, scalar
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct, scalar
    safe += [_reconstruct, scalar]
    # numpy scalar/dtype classes pickled as e.g. numpy.dtypes.Float64DType.
    safe += [type(np.dtype(t)) for t in ('float16', 'float32', 'float64', 'int32', 'int64',
                                          'uint8', 'bool')]
    safe += [np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]
    return safe


def _reduce_history_buffer(buf):
    """Pickle a ``HistoryBuffer`` as a constructor call with plain lists.

    Its default pickle also stores a dict of bound statistics methods, rebuilt through
    ``builtins.getattr``, which safe unpickling rightly refuses."""
    return (type(buf), (buf._log_history.tolist(), buf._count_history.tolist(),
                        buf.max_length))


def safe_load_checkpoint(filename: str, map_location: Any = 'cpu') -> Any:
    """``torch.load(filename, weights_only=True)`` with mmengine's types allowed.

    Raises:
        FileNotFoundError: ``filename`` does not exist.
        UnsafeCheckpointError: the file would execute code (or build an arbitrary object)
            when unpickled.  Such files are never loaded.
    """
    filename = osp.expanduser(str(filename))
    if not osp.isfile(filename):
        raise FileNotFoundError(f'checkpoint {filename!r} does not exist')
    try:
        return torch.load(filename, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        hint = ''
        if 'getattr' in str(err):
            hint = ('(Checkpoints that mmengine wrote without mmlinattn imported pickle '
                    'HistoryBuffer through builtins.getattr; resave the weights with '
                    "torch.save({'state_dict': ...}) and load them with load_from instead of "
                    '--resume.) ')
        raise UnsafeCheckpointError(
            f'refused to load checkpoint {filename!r}: it contains objects that safe '
            f'unpickling (torch.load(weights_only=True)) does not allow, so loading it could '
            f'run arbitrary code. If you created this file yourself from trusted code, '
            f're-save only tensors / plain containers (e.g. '
            f"torch.save({{'state_dict': model.state_dict()}}, path)). {hint}Details: {err}"
        ) from err


def load_from_local_safe(filename: str, map_location: Any) -> Any:
    return safe_load_checkpoint(filename, map_location)


def load_from_http_safe(filename: str, map_location: Any = None,
                        model_dir: Optional[str] = None) -> Any:
    """Download ``filename`` once (rank 0; others wait) into torch hub's checkpoint cache
    and load it with :func:`safe_load_checkpoint`, i.e. ``weights_only=True``."""
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


def install_safe_checkpoint_loading() -> None:
    """Allow-list mmengine's checkpoint types and route mmengine's local loads through
    :func:`safe_load_checkpoint`. Idempotent."""
    global _INSTALLED
    if _INSTALLED:
        return
    from mmengine.logging.history_buffer import HistoryBuffer
    from mmengine.runner.checkpoint import CheckpointLoader
    torch.serialization.add_safe_globals(_mmengine_safe_globals())
    copyreg.pickle(HistoryBuffer, _reduce_history_buffer)
    CheckpointLoader.register_scheme(prefixes='', loader=load_from_local_safe, force=True)
    CheckpointLoader.register_scheme(prefixes=('http://', 'https://'),
                                     loader=load_from_http_safe, force=True)
    _INSTALLED = True


# --------------------------------------------------------------------------- backbone loading
_STATE_DICT_KEYS = ('state_dict', 'model', 'model_ema', 'state_dict_ema', 'module')
_PREFIXES = ('module.', 'backbone.', 'encoder.')


def extract_state_dict(checkpoint: Any, prefix: str = None) -> dict:
    """The tensor dict inside a checkpoint (mmengine, timm or plain), prefixes stripped.

    Args:
        checkpoint: what ``torch.load`` returned.
        prefix: keep only keys under this prefix (mmengine's ``init_cfg.prefix``), e.g.
            ``'backbone.'`` to take the backbone out of a whole detector.
    """
    sd = checkpoint
    if isinstance(sd, dict):
        for key in _STATE_DICT_KEYS:
            if key in sd and isinstance(sd[key], dict):
                sd = sd[key]
                break
    if not isinstance(sd, dict) or not all(isinstance(k, str) for k in sd):
        raise ValueError('checkpoint holds no state dict (expected a dict of tensors, or one '
                         f'under one of {list(_STATE_DICT_KEYS)})')
    sd = {k: v for k, v in sd.items() if torch.is_tensor(v)}
    if prefix:
        prefix = prefix if prefix.endswith('.') else prefix + '.'
        sd = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
        if not sd:
            raise ValueError(f'no key in the checkpoint starts with prefix {prefix!r}')
    for p in _PREFIXES:
        if sd and all(k.startswith(p) for k in sd):
            sd = {k[len(p):]: v for k, v in sd.items()}
    return sd


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


_WHOLE_MODEL_PREFIXES = ('backbone.', 'model.backbone.', 'module.backbone.')


def _likely_cause(report: dict, model: torch.nn.Module, state_dict: dict) -> str:
    """One sentence naming the most likely reason for a poor match (see
    :func:`load_pretrained_backbone`)."""
    own = model.state_dict()
    unexpected, mismatch = report['unexpected'], report['shape_mismatch']
    for prefix in _WHOLE_MODEL_PREFIXES:
        inner = [k[len(prefix):] for k in unexpected if k.startswith(prefix)]
        if inner and sum(k in own for k in inner) * 2 >= len(inner):
            return (f'the checkpoint is a whole detector / segmentor whose backbone weights '
                    f'are under {prefix!r}: add prefix={prefix!r} to init_cfg')
    if mismatch and len(mismatch) >= len(report['matched']):
        k = mismatch[0]
        return (f'most shared tensors have other shapes (e.g. {k}: checkpoint '
                f'{tuple(state_dict[k].shape)}, model {tuple(own[k].shape)}): the checkpoint '
                f'is for another arch; check `arch` (embed_dims / num_heads / depths)')
    has_converter = getattr(model, 'has_checkpoint_converter', lambda: False)()
    converted = getattr(model, 'convert_weights', False)
    if unexpected and has_converter and not converted:
        return ("the key names differ from this backbone's: an official (authors') "
                'checkpoint needs convert_weights=True')
    if unexpected and converted:
        return ('the keys differ even after convert_weights=True: the checkpoint is for '
                f'another model or arch (e.g. unexpected key {unexpected[0]!r})')
    if report['missing'] and not unexpected and not mismatch:
        return (f"the checkpoint lacks {len(report['missing'])} of the backbone's tensors "
                f"(e.g. {report['missing'][0]!r}): it is for a shallower arch (fewer blocks or "
                f'stages; check `arch`) or holds only part of a backbone')
    return ('the checkpoint does not belong to this backbone (e.g. unexpected key '
            f'{unexpected[0]!r})' if unexpected else 'the checkpoint does not belong to this '
            'backbone')


def load_pretrained_backbone(model: torch.nn.Module, init_cfg: dict) -> dict:
    """Load ``init_cfg['checkpoint']`` into a :class:`PyramidBackbone`, loudly.

    Applies the family's ``convert_checkpoint`` (when ``model.convert_weights``) and
    ``adapt_state_dict`` (resolution-shaped tensors), logs how many parameters were loaded,
    missing and unexpected, and raises ``RuntimeError`` when less than
    ``init_cfg.get('min_match', 0.9)`` of the parameters were filled, unless
    ``init_cfg['allow_partial']`` is true.  Returns the match report.
    """
    from mmengine.logging import MMLogger, print_log
    from mmengine.runner.checkpoint import CheckpointLoader
    logger = MMLogger.get_current_instance()
    path = init_cfg.get('checkpoint')
    if not path:
        raise ValueError("init_cfg type='Pretrained' needs a `checkpoint` path")
    ckpt = CheckpointLoader.load_checkpoint(path, map_location=init_cfg.get('map_location',
                                                                             'cpu'))
    sd = extract_state_dict(ckpt, init_cfg.get('prefix'))
    if getattr(model, 'convert_weights', False):
        sd = model.convert_checkpoint(sd)
    name = type(model).__name__
    stored = {k: tuple(v.shape) for k, v in sd.items()}
    sd = model.adapt_state_dict(sd)
    for k, v in sd.items():
        if k in stored and stored[k] != tuple(v.shape):
            print_log(f'{name}: resized {k} from {stored[k]} to {tuple(v.shape)} to fit this '
                      f'model (resolution-shaped tensor)', logger=logger)
    report = match_report(model, sd)
    loadable = {k: sd[k] for k in report['matched']}
    model.load_state_dict(loadable, strict=False)
    print_log(f'{name}: loaded {len(report["matched"])} tensors from {path} '
              f'({report["fraction"]:.1%} of parameters); missing {len(report["missing"])}, '
              f'unexpected {len(report["unexpected"])}, shape mismatch '
              f'{len(report["shape_mismatch"])}', logger=logger)
    for kind in ('missing', 'unexpected', 'shape_mismatch'):
        if report[kind]:
            print_log(f'{name}: {kind} keys (first 10): {report[kind][:10]}', logger=logger)
    min_match = float(init_cfg.get('min_match', 0.9))
    if report['fraction'] < min_match and not init_cfg.get('allow_partial', False):
        raise RuntimeError(
            f'{name}: checkpoint {path!r} filled only {report["fraction"]:.1%} of the '
            f'parameters (< {min_match:.0%}); refusing to train from a half-loaded backbone. '
            f'Likely cause: {_likely_cause(report, model, sd)}. To load it anyway, add '
            f'allow_partial=True to init_cfg.')
    return report
