"""Helpers shared by the checkpoint converters."""
from typing import Dict, Optional, Sequence, Tuple

import torch

StateDict = Dict[str, torch.Tensor]


def rename_prefix(key: str, table: Sequence[Tuple[str, str]]) -> Optional[str]:
    """``key`` with the first matching ``(theirs, ours)`` prefix replaced; None if none
    matches."""
    for theirs, ours in table:
        if key.startswith(theirs):
            return ours + key[len(theirs):]
    return None


def fold_conv_bias_into_bn(state_dict: StateDict, conv_bias: str, bn_prefix: str) -> None:
    """Remove the conv bias ``state_dict[conv_bias]`` and fold it into the BatchNorm after it.

    ``BN(conv(x) + b)`` equals ``BN'(conv(x))`` with ``running_mean' = running_mean - b``
    exactly in eval mode; in training the batch mean absorbs ``b`` anyway, so the bias-free
    conv of our layout loses nothing.  In place.
    """
    bias = state_dict.pop(conv_bias)
    key = f'{bn_prefix}.running_mean'
    if key not in state_dict:
        raise ValueError(f'cannot fold {conv_bias}: the checkpoint has no {key} (the '
                         f'BatchNorm after that conv)')
    if state_dict[key].shape != bias.shape:
        raise ValueError(f'cannot fold {conv_bias} {tuple(bias.shape)} into {key} '
                         f'{tuple(state_dict[key].shape)}: shapes differ')
    state_dict[key] = state_dict[key] - bias.to(state_dict[key].dtype)


def check_checkpoint_depths(family: str, found: Sequence[int], depths: Sequence[int],
                            hint: str) -> None:
    """``ValueError`` (ending in ``hint``) when an authors' checkpoint has blocks per stage
    ``found`` (empty or all 0: none found, nothing to check) other than the arch's
    ``depths``."""
    if any(found) and tuple(found) != tuple(depths):
        raise ValueError(f'the checkpoint has {family} blocks with depths {tuple(found)} but '
                         f'the arch has depths {tuple(depths)}; {hint}')


def downsampler_key(index: int, is_conv: bool, rest: str) -> str:
    """Our key of a parameter ``rest`` of down-sampler ``index``'s conv or norm."""
    return f"patch_embeds.{index}.{'conv' if is_conv else 'norm'}.{rest}"
