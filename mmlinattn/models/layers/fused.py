"""Inference forms of common residual patterns, one pass fewer over the tokens."""
from typing import Optional

import torch
import torch.nn as nn

from ...ops._grad import needs_grad


def residual_linear(x: torch.Tensor, linear: nn.Linear, y: torch.Tensor,
                    gamma: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x + gamma * linear(y)`` (LayerScale ``gamma``, or none) as one GEMM that accumulates
    into a copy of ``x``: ``(x + gamma b) + y (gamma W)^T``.

    The same sum as the two-step form up to rounding, without the separate pass that scales
    and adds the linear's output.  No autograd (``out=``): for inference only.  Under
    autocast, or with mixed dtypes, it is the two-step form (an ``out=`` GEMM is not autocast).
    """
    w, b = linear.weight, linear.bias
    if torch.is_autocast_enabled(x.device.type) or not x.dtype == y.dtype == w.dtype:
        z = linear(y)
        return x + z if gamma is None else torch.addcmul(x, gamma, z)
    if gamma is not None:
        w = w * gamma[:, None]
        b = None if b is None else b * gamma
    out = x.clone(memory_format=torch.contiguous_format) if b is None else x + b
    flat = out.view(-1, out.shape[-1])
    torch.addmm(flat, y.reshape(-1, y.shape[-1]), w.t(), out=flat)
    return out


def residual_branch(shortcut: torch.Tensor, linear: nn.Linear, y: torch.Tensor,
                    gamma: Optional[torch.Tensor] = None, drop_path: Optional[nn.Module] = None,
                    dropout: Optional[nn.Module] = None, training: bool = False) -> torch.Tensor:
    """``shortcut + drop_path(gamma * dropout(linear(y)))``: a residual branch that ends in
    ``linear`` (LayerScale ``gamma`` and the modules optional).

    In inference (``training`` False and no gradient needed) the LayerScale and the residual
    go into the linear's GEMM (:func:`residual_linear`); otherwise DropPath, being linear,
    lets one ``addcmul`` do both."""
    params = [t for t in (linear.weight, linear.bias, gamma) if t is not None]
    if not training and not needs_grad(shortcut, y, *params):
        return residual_linear(shortcut, linear, y, gamma)
    y = linear(y)
    if dropout is not None:
        y = dropout(y)
    return add_residual(shortcut, y, gamma, drop_path)


def add_residual(shortcut: torch.Tensor, y: torch.Tensor, gamma: Optional[torch.Tensor] = None,
                 drop_path: Optional[nn.Module] = None) -> torch.Tensor:
    """``shortcut + drop_path(gamma * y)``; DropPath, being linear, lets one ``addcmul`` do
    the scaling and the sum."""
    if drop_path is not None:
        y = drop_path(y)
    return shortcut + y if gamma is None else torch.addcmul(shortcut, gamma, y)
