"""Classifier checkpoint -> dense backbone checkpoint (the inverse of "one model, two heads").

A :class:`~mmlinattn.timm.classifier.LinAttnClassifier` stores its backbone under
``backbone.`` and its head under ``head.``; the dense backbone (``type='mmlinattn.<Family>'``)
uses the same names without the prefix.  The conversion is therefore a prefix strip plus
dropping the head; nothing is renamed or reshaped.
"""
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..utils.checkpoint import extract_state_dict, safe_load_checkpoint


def load_timm_checkpoint(path: str) -> Any:
    """What timm's ``train.py`` wrote (``args`` included), through ``safe_load_checkpoint``."""
    return safe_load_checkpoint(path)


def select_state_dict(checkpoint: Any, ema: Optional[bool] = None) -> Dict[str, torch.Tensor]:
    """The model weights in a timm checkpoint by the package's one rule (the EMA weights
    where present; ``ema=True`` requires them, ``ema=False`` takes the raw ones):
    :func:`~mmlinattn.utils.checkpoint.select_weights`."""
    return extract_state_dict(checkpoint, ema=ema)


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
