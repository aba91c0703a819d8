"""A backbone's pretrained weights, loaded loudly (:func:`load_pretrained_backbone`).

Above both :mod:`.checkpoint` (the safe unpickler and the match report) and
:mod:`.checkpoint_schemes` (mmengine's schemes routed through it), so that neither of the two
imports the other's caller.
"""
import os.path as osp
from typing import Optional

import torch

from .checkpoint import (EMA_KEYS, MissingCheckpointError, extract_weights,
                         report_match)
from .checkpoint_identity import check_authors_file, check_checkpoint_identity
from .weights_hint import arch_name, weights_hint
from .checkpoint_schemes import load_checkpoint_safely


_WHOLE_MODEL_PREFIXES = ('backbone.', 'model.backbone.', 'module.backbone.')


def _other_family(model: torch.nn.Module, state_dict: dict) -> Optional[str]:
    """The registered family whose key layout the checkpoint has, if not the model's."""
    from .key_layout import guess_family
    family = guess_family(state_dict)
    return family if family and family != type(model).__name__ else None


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
    family = _other_family(model, state_dict) if unexpected or mismatch else None
    if family:
        return (f'the checkpoint has the key layout of a {family} backbone, not of '
                f"{type(model).__name__}: use type='mmlinattn.{family}' (with the "
                f"checkpoint's arch) for it")
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

    First checks that a converted file (or an authors' NaLaFormer file, with
    ``convert_weights``) was made for this model (:mod:`~.checkpoint_identity`;
    ``init_cfg['allow_other_model']`` skips that).  Takes the EMA weights where the file has
    them (``init_cfg['ema']``: True requires them, False takes the raw ones;
    :func:`select_weights`) and says which it took.
    Applies the family's ``convert_checkpoint`` (when ``model.convert_weights``) and
    ``adapt_state_dict`` (resolution-shaped tensors), logs how many parameters were loaded,
    missing and unexpected, and raises :class:`CheckpointMismatchError` when less than
    ``init_cfg.get('min_match', 0.9)`` of the parameters were filled, unless
    ``init_cfg['allow_partial']`` is true, or when a tensor holds NaN / Inf.  Returns the
    match report.
    """
    from mmengine.logging import MMLogger, print_log

    logger = MMLogger.get_current_instance()
    path = init_cfg.get('checkpoint')
    if not path:
        raise ValueError("init_cfg type='Pretrained' needs a `checkpoint` path")
    if '://' not in path and not osp.isfile(path):
        hint = weights_hint(type(model).__name__, arch_name(model), path)
        raise MissingCheckpointError(f'{type(model).__name__}: init_cfg checkpoint {path!r} '
                                     f'does not exist. {hint}')
    ckpt = load_checkpoint_safely(path, map_location=init_cfg.get('map_location', 'cpu'))
    check_checkpoint_identity(model, ckpt, path, init_cfg)
    sd, key = extract_weights(ckpt, init_cfg.get('prefix'), init_cfg.get('ema'))
    check_authors_file(model, sd, path, init_cfg)
    name = type(model).__name__
    if key is not None:
        kind = 'EMA' if key in EMA_KEYS else 'raw'
        other = ('init_cfg ema=False takes the raw ones' if kind == 'EMA' else
                 'the file has no EMA weights' if init_cfg.get('ema') is None else
                 'as init_cfg ema=False asks')
        print_log(f'{name}: {path}: the {kind} weights ({key!r}; {other})', logger=logger)
    if getattr(model, 'convert_weights', False):
        sd = model.convert_checkpoint(sd)
    stored = {k: tuple(v.shape) for k, v in sd.items()}
    sd = model.adapt_state_dict(sd)
    for k, v in sd.items():
        if k in stored and stored[k] != tuple(v.shape):
            print_log(f'{name}: resized {k} from {stored[k]} to {tuple(v.shape)} to fit this '
                      f'model (resolution-shaped tensor)', logger=logger)
    report = report_match(
        model, sd, path, float(init_cfg.get('min_match', 0.9)),
        bool(init_cfg.get('allow_partial', False)),
        cause=lambda r: _likely_cause(r, model, sd),
        purpose='train from a half-loaded backbone', override='add allow_partial=True to '
        'init_cfg')
    model.load_state_dict({k: sd[k] for k in report['matched']}, strict=False)
    return report
