"""Inference forms of common residual patterns, one pass fewer over the tokens."""
from typing import Optional

import torch
import torch.nn as nn


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
