"""Which backbone family a state dict was written by, from its key names alone.

Used to name the right family when a checkpoint of one family is loaded into another: key
names with their block / stage indices masked are compared with those of every registered
family (all archs, built on the meta device, so nothing is allocated).
"""
import re
from functools import lru_cache
from typing import Dict, FrozenSet, Iterable, Optional

import torch


def key_layout(keys: Iterable[str]) -> FrozenSet[str]:
    """Keys with every numeric index masked: ``stages.2.blocks.0.attn.q.weight`` ->
    ``stages.#.blocks.#.attn.q.weight``."""
    return frozenset(re.sub(r'(?<=\.)\d+(?=\.|$)|^\d+(?=\.)', '#', k) for k in keys)


@lru_cache(maxsize=None)
def family_layouts() -> Dict[str, FrozenSet[str]]:
    """The masked key set of every registered family (union over its ``arch_settings``)."""
    from ..registry import MODELS
    layouts = {}
    for name, cls in MODELS.module_dict.items():
        archs = getattr(cls, 'arch_settings', None)
        if not archs:
            continue
        keys = set()
        with torch.device('meta'):
            for arch in archs:
                keys |= key_layout(cls(arch=arch).state_dict())
        layouts[name] = frozenset(keys)
    return layouts


def guess_family(keys: Iterable[str], min_cover: float = 0.9) -> Optional[str]:
    """The one family whose layout holds at least ``min_cover`` of the (masked) keys and
    more of them than any other family; ``None`` if there is no such family."""
    layout = key_layout(keys)
    if not layout:
        return None
    cover = {name: len(layout & keys_) / len(layout)
             for name, keys_ in family_layouts().items()}
    ranked = sorted(cover, key=cover.get, reverse=True)
    best = ranked[0]
    if cover[best] < min_cover or (len(ranked) > 1 and cover[ranked[1]] == cover[best]):
        return None
    return best
