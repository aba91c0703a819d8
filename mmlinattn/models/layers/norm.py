"""Norm and activation layers from OpenMMLab-style config dicts, in pure PyTorch.

``norm_cfg=dict(type='BN')`` / ``act_cfg=dict(type='ReLU')`` use mmcv's type names, so a
config written for mmcv's ``build_norm_layer`` / ``build_activation_layer`` works here, but
the backbones do not need mmcv (its compiled ops are only in the det / seg extras).
mmengine's registry knows no ``torch.nn`` layers, hence these two small tables.
"""
from typing import Optional

import torch.nn as nn
from timm.layers import LayerNorm2d

__all__ = ['LayerNorm2d', 'NORM_LAYERS', 'ACT_LAYERS', 'build_norm', 'build_act',
           'norm_cancels_bias']

#: mmcv's norm type names -> torch classes (``LN2d``: LayerNorm over the channels of NCHW)
NORM_LAYERS = {
    'BN': nn.BatchNorm2d, 'BN2d': nn.BatchNorm2d, 'SyncBN': nn.SyncBatchNorm,
    'GN': nn.GroupNorm, 'LN': nn.LayerNorm, 'LN2d': LayerNorm2d, 'IN': nn.InstanceNorm2d,
}
#: mmcv's activation type names -> torch classes
ACT_LAYERS = {
    'ReLU': nn.ReLU, 'ReLU6': nn.ReLU6, 'LeakyReLU': nn.LeakyReLU, 'PReLU': nn.PReLU,
    'ELU': nn.ELU, 'GELU': nn.GELU, 'SiLU': nn.SiLU, 'Swish': nn.SiLU, 'Sigmoid': nn.Sigmoid,
    'Tanh': nn.Tanh, 'HSwish': nn.Hardswish, 'HSigmoid': nn.Hardsigmoid, 'Mish': nn.Mish,
}
# batch statistics subtract a per-channel mean, so a conv bias in front of them is wasted
_BIAS_CANCELLING = ('BN', 'BN2d', 'SyncBN')


def _split(cfg: dict, table: dict, what: str):
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'{what} must be a dict with a "type" key, got {cfg!r}')
    kwargs = dict(cfg)
    name = kwargs.pop('type')
    if name not in table:
        raise ValueError(f'{what} type must be one of {sorted(table)}, got {name!r}')
    return table[name], kwargs


def build_norm(cfg: dict, num_features: int) -> nn.Module:
    """The norm of ``cfg`` over ``num_features`` channels, e.g. ``dict(type='BN')``,
    ``dict(type='GN', num_groups=8)`` or ``dict(type='LN2d', eps=1e-6)``; the other keys are
    the class's keyword arguments, plus mmcv's ``requires_grad`` (default True)."""
    cls, kwargs = _split(cfg, NORM_LAYERS, 'norm_cfg')
    requires_grad = kwargs.pop('requires_grad', True)
    if cls is nn.GroupNorm:
        if 'num_groups' not in kwargs:
            raise ValueError(f"norm_cfg type 'GN' needs num_groups, got {cfg!r}")
        layer = cls(num_channels=num_features, **kwargs)
    else:
        layer = cls(num_features, **kwargs)
    for p in layer.parameters():
        p.requires_grad = requires_grad
    return layer


def build_act(cfg: Optional[dict]) -> nn.Module:
    """The activation of ``cfg`` (e.g. ``dict(type='GELU', approximate='tanh')``), or
    ``nn.Identity()`` for None."""
    if cfg is None:
        return nn.Identity()
    cls, kwargs = _split(cfg, ACT_LAYERS, 'act_cfg')
    return cls(**kwargs)


def norm_cancels_bias(cfg: Optional[dict]) -> bool:
    """Whether the norm of ``cfg`` makes a preceding conv's bias redundant (batch norms)."""
    return cfg is not None and cfg.get('type') in _BIAS_CANCELLING
