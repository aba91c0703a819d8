"""Classifier checkpoint -> dense backbone checkpoint (the inverse of "one model, two heads").

A :class:`~mmlinattn.timm.classifier.LinAttnClassifier` stores its backbone under
``backbone.`` and its head under ``head.``; the dense backbone (``type='mmlinattn.<Family>'``)
uses the same names without the prefix.  The conversion is therefore a prefix strip plus
dropping the head; nothing is renamed or reshaped.
"""
import argparse
from typing import Any, Dict, List, Tuple

import torch

from ..utils.checkpoint import extract_state_dict, safe_load_checkpoint

# Where the EMA weights live: timm train.py (``state_dict_ema``), DeiT-style (``model_ema``).
EMA_KEYS = ('state_dict_ema', 'model_ema')


def load_timm_checkpoint(path: str) -> Any:
    """``safe_load_checkpoint`` that also admits the ``argparse.Namespace`` timm's
    ``train.py`` stores under ``args`` (plain attributes; nothing else is allowed)."""
    with torch.serialization.safe_globals([argparse.Namespace]):
        return safe_load_checkpoint(path)


def select_state_dict(checkpoint: Any, ema: bool = False) -> Dict[str, torch.Tensor]:
    """The model weights in a timm checkpoint: a plain state dict, or timm train.py's
    ``{'state_dict', 'state_dict_ema', ...}``; ``ema=True`` takes the EMA weights and raises
    ``ValueError`` when there are none."""
    if ema:
        found = [k for k in EMA_KEYS if isinstance(checkpoint, dict) and
                 isinstance(checkpoint.get(k), dict)]
        if not found:
            keys = sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint)
            raise ValueError(f'ema=True but the checkpoint has no EMA weights (looked for '
                             f'{list(EMA_KEYS)}; it has {keys}); train with --model-ema or '
                             f'convert without --ema')
        checkpoint = checkpoint[found[0]]
    return extract_state_dict(checkpoint)


def classifier_to_backbone(
        state_dict: Dict[str, torch.Tensor]) -> Tuple[Dict[str, torch.Tensor], List[str]]:
    """Split a classifier state dict into the backbone's (keys without ``backbone.``) and the
    list of dropped keys (the head, and anything that is not backbone).

    ``extract_state_dict`` already strips a ``backbone.`` prefix that every key carries (a
    classifier without head parameters); such a dict is returned as it is.
    """
    if not any(k.startswith(('backbone.', 'head.')) for k in state_dict):
        return dict(state_dict), []
    backbone = {k[len('backbone.'):]: v for k, v in state_dict.items()
                if k.startswith('backbone.')}
    dropped = [k for k in state_dict if not k.startswith('backbone.')]
    if not backbone:
        raise ValueError('the checkpoint has head keys but no backbone.* keys; it is not an '
                         'mmlinattn.timm classifier checkpoint')
    return backbone, dropped
