"""Which model a converted checkpoint was made for, checked against the model it goes into.

``tools/model_converters/convert_checkpoint.py`` records in every file it writes, under
``meta['backbone_cfg']``, the backbone config its weights were converted for (the family, the
arch and the options: the authors' presets, NaLaFormer's kernel and attention types, the
``--model-kwargs`` of a timm run).  Key names cannot tell these models apart: a file made for
the NaLaFormer authors' model (``attn_types='official', kernel='relu_split_rope'``) fills
every parameter of the paper's NaLaFormer and computes other features there.
:func:`check_checkpoint_identity` compares that record with the model being loaded and stops
with the difference and the fix; :func:`check_authors_file` does the same for a file in the
NaLaFormer authors' layout loaded with ``convert_weights=True`` (that layout holds their model
only).  Files without the record (a training run's checkpoint, a user's own file) load as
before.
"""
import ast
import inspect
from typing import Any, Dict, List, Optional, Tuple

import torch

from .checkpoint import CheckpointMismatchError
from .weights_hint import CONVERTER, WEIGHTS_DOC

#: Build arguments that do not change what the stored weights compute, so they may differ
#: between the converted model and the one loading its file: how the same values are
#: computed (memory, speed, SOFT's large-input options ``pinv`` / ``max_landmarks``, which
#: the dense configs choose), training-only settings, what the dense model adds around the
#: stored weights (the returned stages and their fresh output norms, the grid that position
#: tables are stored at and resized from, the input channels, whose stem the match report
#: checks), and how the file is loaded.  Every other argument is compared.
FREE_OPTIONS = frozenset({
    'with_cp', 'fuse_feature_maps', 'ffn_recompute', 'pure_chunk_size', 'pinv',
    'max_landmarks',
    'drop_path_rate', 'frozen_stages', 'norm_eval', 'step_init',
    'out_indices', 'out_norm', 'in_channels', 'pretrain_img_size', 'img_size',
    'convert_weights', 'pretrained', 'init_cfg',
})
#: free options still worth naming in the fix (the authors' model has them)
_SHOWN_FREE = ('out_norm', )
#: arch entries that only set training or initial values
_FREE_ARCH_KEYS = frozenset({'drop_path_rate'})
#: the BatchNorm variants (one model, another way to share the batch statistics)
_BN_TYPES = frozenset({'BN', 'BN2d', 'SyncBN', 'MMSyncBN', 'NaiveSyncBN', 'naiveSyncBN'})
OVERRIDE = 'allow_other_model'


class CheckpointIdentityError(CheckpointMismatchError):
    """A converted checkpoint was made for another model than the one loading it."""


def build_arguments(cls: type, args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
    """Every argument of ``cls(*args, **kwargs)``, defaults filled in along the chain of
    ``__init__`` methods up to mmengine's ``BaseModule``; None if they do not bind."""
    from mmengine.model import BaseModule
    out: Dict[str, Any] = {}
    first = True
    for klass in cls.__mro__:
        if klass is BaseModule or not issubclass(klass, BaseModule):
            break
        init = klass.__dict__.get('__init__')
        if init is None:
            continue
        sig = inspect.signature(init)
        if first:
            try:
                bound = sig.bind(None, *args, **kwargs)
            except TypeError:
                return None
            bound.apply_defaults()
            for name, value in list(bound.arguments.items())[1:]:
                kind = sig.parameters[name].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    out.update({k: v for k, v in value.items() if k not in out})
                elif kind is not inspect.Parameter.VAR_POSITIONAL:
                    out[name] = value
            first = False
            continue
        for name, param in sig.parameters.items():
            if (name not in out and param.default is not inspect.Parameter.empty
                    and param.kind is not inspect.Parameter.VAR_KEYWORD):
                out[name] = param.default
    return out


def recorded_backbone_cfg(checkpoint: Any, path: str) -> Optional[dict]:
    """The backbone config the converter recorded in ``checkpoint['meta']``, or None."""
    meta = checkpoint.get('meta') if isinstance(checkpoint, dict) else None
    text = meta.get('backbone_cfg') if isinstance(meta, dict) else None
    if text is None:
        return None
    try:
        cfg = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError) as err:
        raise CheckpointIdentityError(
            f"checkpoint {path!r} records the model it was made for as meta['backbone_cfg'] "
            f'= {str(text)[:200]!r}, which is not a readable config ({err}); convert the source '
            f'again with {CONVERTER}, or add {OVERRIDE}=True to init_cfg to load it '
            f'unchecked') from err
    if not isinstance(cfg, dict) or not isinstance(cfg.get('type'), str):
        raise CheckpointIdentityError(
            f"checkpoint {path!r}: meta['backbone_cfg'] is not a backbone config with a type "
            f'({str(text)[:200]!r}); convert the source again with {CONVERTER}, or add '
            f'{OVERRIDE}=True to init_cfg to load it unchecked')
    return cfg


def _family(type_: str) -> str:
    return type_.split('.')[-1]


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _is_plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def _same(a: Any, b: Any) -> bool:
    """Equal, a scalar counting as that value in every stage."""
    if isinstance(a, tuple) != isinstance(b, tuple):
        seq, one = (a, b) if isinstance(a, tuple) else (b, a)
        return all(v == one for v in seq)
    return a == b


def _view(name: str, value: Any) -> Any:
    """What of an option's value decides what the weights compute."""
    if name.startswith('layer_scale'):  # only whether there is a LayerScale (its value is a
        return _plain(tuple(v is None for v in value) if isinstance(value, (list, tuple))
                      else value is None)  # weight in the file)
    if name == 'norm_cfg' and isinstance(value, dict):
        kind = value.get('type')
        return 'BN' if kind in _BN_TYPES else kind
    return _plain(value)


def _option(model: torch.nn.Module, name: str) -> Any:
    """An option as the model resolved it (e.g. ``attn_types='official'`` -> per stage),
    else as it was given."""
    resolved = getattr(model, name, None)
    if name != 'arch' and resolved is not None and _is_plain(resolved):
        return _view(name, resolved)
    return _view(name, model.build_args.get(name))


def _differences(model: torch.nn.Module, ref: torch.nn.Module) -> List[str]:
    """Names of the options (``arch`` for any arch entry) in which ``model`` and ``ref``
    compute differently."""
    diffs = []
    arch, ref_arch = model.arch, ref.arch
    if any(not _same(_view(k, arch[k]), _view(k, ref_arch[k]))
           for k in set(arch) & set(ref_arch) - _FREE_ARCH_KEYS):
        diffs.append('arch')
    names = (set(model.build_args) | set(ref.build_args)) - FREE_OPTIONS - {'arch'}
    for name in sorted(names):
        if not _same(_option(model, name), _option(ref, name)):
            diffs.append(name)
    return diffs


def _call(type_: str, cfg: dict) -> str:
    """``Type(arch=..., ...)``: the options of a config that tell models apart."""
    shown = {k: v for k, v in cfg.items() if k not in ('type', 'out_indices')
             and (k, v) != ('in_channels', 3)}
    return f"{type_}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def _arch_text(model: torch.nn.Module) -> Any:
    from .weights_hint import arch_name
    return arch_name(model) or model.build_args.get('arch')


def _official_presets(family: str) -> Dict[Optional[str], dict]:
    """The converter's ``--preset`` choices per family (None: the family's one preset); the
    families' ``OFFICIAL_PRESETS`` / ``OFFICIAL_PRESET`` as :data:`weights_hint.PRESETS` holds
    them (utils imports no model code)."""
    from .weights_hint import PRESETS
    presets = {k: dict(v) for k, v in PRESETS.get(family, {}).items()}
    return {None: presets['official']} if family == 'NaLaFormer' else presets


def _reconvert(model: torch.nn.Module, meta: dict, path: str) -> Optional[str]:
    """The converter command that makes ``path`` for ``model`` from the same authors' file,
    where the model is one of the authors' (its options are one of the presets)."""
    family = type(model).__name__
    if not meta.get('official') or not meta.get('source'):
        return None
    if family == 'SOFT' and not model.arch.get('cls_token'):  # not one of their archs
        return None
    arch = _arch_text(model)
    if not isinstance(arch, str):
        arch = f'{family}:{dict(model.arch)!r}'
    else:
        arch = f'{family}:{arch}'
    for preset, options in _official_presets(family).items():
        if all(_same(_option(model, k), _view(k, _built_value(model, k, v)))
               for k, v in options.items() if k not in FREE_OPTIONS):
            flag = f' --preset {preset}' if preset and preset != 'norm' else ''
            return (f"{CONVERTER} {meta['source']} {path} --official --arch-check "
                    f"'{arch}'{flag}")
    return None


def _built_value(model: torch.nn.Module, name: str, value: Any) -> Any:
    """``value`` of option ``name`` as ``model``'s family resolves it."""
    if name == 'attn_types' and value == 'official':
        return getattr(type(model), 'official_attn_types', value)
    return value


def _made_for(cfg: dict) -> Tuple[str, dict]:
    family = _family(cfg['type'])
    kwargs = {k: v for k, v in cfg.items() if k != 'type'}
    return family, kwargs


def _build_reference(cls: type, kwargs: dict, path: str) -> torch.nn.Module:
    """The model the file was made for, on the meta device (nothing allocated)."""
    kwargs = {k: v for k, v in kwargs.items() if k not in FREE_OPTIONS}
    try:
        with torch.device('meta'):
            return cls(**kwargs)
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointIdentityError(
            f'checkpoint {path!r} was made for {_call(cls.__name__, kwargs)}, a model this '
            f'version of mmlinattn cannot build ({err}); convert the source again with {CONVERTER}'
            f', or add {OVERRIDE}=True to init_cfg to load it unchecked') from err


#: meta['made_by'] of the record an authors' file implies (:func:`check_authors_file`)
_AUTHORS = 'the authors'


def _made_how(checkpoint: dict) -> str:
    if checkpoint['meta'].get('made_by') == _AUTHORS:
        return "is an authors' file (loaded with convert_weights=True) of"
    return 'was converted for'


def check_authors_file(model: torch.nn.Module, state_dict: dict, path: str,
                       init_cfg: dict) -> None:
    """:func:`check_checkpoint_identity` for a file in the NaLaFormer authors' layout loaded
    with ``convert_weights=True``: their layout holds one model, theirs
    (``OFFICIAL_PRESET``), so it goes only into that.  (The SOFT authors' files share one
    layout between two models, SOFT-Norm and plain SOFT: nothing to tell from the file.)"""
    if (type(model).__name__ != 'NaLaFormer' or not getattr(model, 'convert_weights', False)
            or 'patch_embed.proj.0.weight' not in state_dict):
        return
    from .weights_hint import PRESETS
    arch = (model.build_args or {}).get('arch', dict(model.arch))
    record = dict(type='NaLaFormer', arch=arch, **PRESETS['NaLaFormer']['official'])
    check_checkpoint_identity(model, {'meta': {'backbone_cfg': record, 'made_by': _AUTHORS}},
                              path, init_cfg)


def check_checkpoint_identity(model: torch.nn.Module, checkpoint: Any, path: str,
                              init_cfg: dict) -> None:
    """Raise :class:`CheckpointIdentityError` when ``checkpoint`` records (``meta``
    ``backbone_cfg``, written by the converter) a model that computes otherwise than
    ``model``: another family, arch, or any option outside :data:`FREE_OPTIONS` (compared as
    the families resolve them, e.g. NaLaFormer's ``attn_types='official'`` as its four
    stage types).  The error names the file, the model it was made for, what differs, and
    the config lines (or converter command) that fix it.  Nothing is checked for a file
    without the record or with ``init_cfg[allow_other_model]``."""
    from mmengine.logging import MMLogger, print_log
    recorded = recorded_backbone_cfg(checkpoint, path)
    if recorded is None:
        return
    name = type(model).__name__
    family, kwargs = _made_for(recorded)
    made_for = _call(family, kwargs)
    if init_cfg.get(OVERRIDE):
        print_log(f'{name}: {path} was made for {made_for}; loaded into this model unchecked '
                  f'({OVERRIDE}=True)', logger=MMLogger.get_current_instance())
        return
    head = (f'{name}: checkpoint {path!r} {_made_how(checkpoint)} another model than this '
            f'config builds, and its weights would compute other features in it. It was made '
            f'for {made_for}')
    tail = (f' To load it into this model anyway (e.g. to fine-tune it under other options on '
            f'purpose), add {OVERRIDE}=True to init_cfg.')
    other = (f'a checkpoint made for the model this config builds ({WEIGHTS_DOC} says where '
             f'each comes from)')
    if family not in [c.__name__ for c in type(model).__mro__]:
        raise CheckpointIdentityError(
            f'{head}, a {family} backbone; this config builds a {name}. Fix: use it with '
            f"type='mmlinattn.{family}' and its options ({made_for}), or load {other}.{tail}")
    if getattr(model, 'build_args', None) is None:
        raise CheckpointIdentityError(
            f"{head}; the arguments this {name} was built with are unknown, so the two cannot "
            f'be compared.{tail}')
    ref = _build_reference(type(model), kwargs, path)
    diffs = _differences(model, ref)
    if not diffs:
        return
    ours = ', '.join(
        f'{k}={_arch_text(model)!r}' if k == 'arch' else
        f'{k}={model.build_args.get(k)!r}' for k in diffs)
    theirs = ', '.join(f'{k}={kwargs.get(k, ref.build_args.get(k))!r}' for k in diffs)
    also = [f'{k}={kwargs[k]!r}' for k in _SHOWN_FREE
            if k in kwargs and kwargs[k] != model.build_args.get(k)]
    # e.g. NaLaFormer's out_norm: new norms around the same maps, either loads
    note = f" (the file's model also has {', '.join(also)}, which may differ)" if also else ''
    fix = (f'Fix: build the model the file was made for, with {theirs} in model.backbone'
           f'{note}; or load {other}')
    command = None if 'arch' in diffs else _reconvert(model, checkpoint['meta'], path)
    if command:
        fix += f', e.g. the same source converted for this model: {command}'
    raise CheckpointIdentityError(f'{head}; this config builds {ours}. {fix}.{tail}')
