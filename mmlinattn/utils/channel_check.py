"""Check, from the config alone, that the neck (or decode head) takes the channels an
mmlinattn backbone returns.

A wrong ``in_channels`` list otherwise surfaces as a convolution shape error at the first
iteration, after the datasets have been loaded.  No mmdet / mmseg import.
"""
import inspect
from typing import List, Optional

from ..registry import MODELS


def _backbone_class(type_name):
    if not isinstance(type_name, str) or not type_name.startswith('mmlinattn.'):
        return None
    cls = MODELS.get(type_name.split('.', 1)[1])
    return cls if hasattr(cls, 'out_channels_of') else None


def backbone_out_channels(backbone: dict) -> Optional[List[int]]:
    """Channels of the maps the mmlinattn backbone of this config dict returns (None for
    other backbones)."""
    cls = _backbone_class(backbone.get('type'))
    if cls is None:
        return None
    arch = backbone.get('arch', _default(cls, 'arch'))
    out_indices = backbone.get('out_indices', _default(cls, 'out_indices'))
    return cls.out_channels_of(arch, out_indices)


def _default(cls, name: str):
    """The default of ``__init__`` argument ``name``: the first class in the MRO that
    names it (a family passes the scaffold's arguments on through ``**kwargs``)."""
    for klass in cls.__mro__:
        params = inspect.signature(klass.__init__).parameters if '__init__' in vars(klass) else {}
        if name in params:
            return params[name].default
    raise KeyError(f'{cls.__name__} takes no {name!r} argument')


def check_channels(model: dict) -> List[str]:
    """Messages for each ``in_channels`` of ``model`` (an mmdet / mmseg model config) that
    does not match what its mmlinattn backbone returns: the neck's, or without a neck the
    decode / auxiliary heads' (picked by ``in_index``, mmseg's default -1)."""
    backbone = model.get('backbone') or {}
    channels = backbone_out_channels(backbone)
    if channels is None:
        return []
    what = (f"{backbone['type']}(arch={backbone.get('arch')!r}, "
            f"out_indices={backbone.get('out_indices', 'default')}) returns maps with "
            f'{channels} channels')
    neck = model.get('neck')
    consumers = [('neck', neck[0] if isinstance(neck, (list, tuple)) else neck)]
    if neck is None:
        consumers = [(key, model.get(key)) for key in ('decode_head', 'auxiliary_head')]
    problems = []
    for key, cfg in consumers:
        for part in cfg if isinstance(cfg, (list, tuple)) else [cfg]:
            if not isinstance(part, dict) or 'in_channels' not in part:
                continue
            declared, index = part['in_channels'], part.get('in_index')
            if key == 'neck' or index is None and isinstance(declared, (list, tuple)):
                expected = channels if isinstance(declared, (list, tuple)) else channels[-1]
            elif isinstance(index, (list, tuple)):
                expected = [channels[i] for i in index]
            else:
                expected = channels[-1 if index is None else index]
            if isinstance(declared, tuple):
                declared = list(declared)
            if declared != expected:
                where = '' if index is None else f' (in_index={index})'
                problems.append(f'model.{key}.in_channels is {part["in_channels"]}, but '
                                f'{what}{where}; set model.{key}.in_channels={expected}')
    return problems
