"""Row stripes of a local residual branch in inference.

An FFN's hidden tensor (tokens x 4-8 times the channels) is the widest tensor of a pyramid's
first stage: 8 GiB for InfViT-small's stage 1 on an 8192² image, two of them alive at once.
Every step of an FFN is per token except its depthwise convolution, which reads ``row_halo``
rows above and below; so in inference the branch can run a few rows of the token grid at a
time, each stripe with its halo rows, and add its output to the rows of the residual stream it
belongs to.  The result equals the whole-map branch up to rounding (the GEMMs and the
convolution on fewer rows may order their sums differently).

A branch takes part by a ``row_halo`` attribute (:class:`~.residual.ResidualBranch`: None, a
global mixer, by default).
"""
from typing import Callable

import torch
import torch.nn as nn

from . import policy
from .dispatch import fast_form


@fast_form('FFN row stripes', policy.eager_unavailable)
def ffn_stripes(branch: nn.Module, x: torch.Tensor, grid) -> bool:
    """``branch`` (with its ``row_halo``) runs in row stripes of ``grid`` on the tokens ``x``:
    eager inference, one token per grid cell, a hidden tensor above
    :data:`.policy.STRIPE_HIDDEN_BYTES`, and more than one stripe."""
    halo = getattr(branch, 'row_halo', None)
    if halo is None or grid is None or branch.training or policy.hooked(branch):
        return False
    hidden = x.shape[0] * x.shape[1] * branch.out_proj.in_features * x.element_size()
    return (x.dim() == 3 and x.shape[1] == grid.num_tokens
            and hidden > policy.STRIPE_HIDDEN_BYTES
            and stripe_rows(branch, x, grid) + 2 * halo < grid.hw[0]
            and policy.eager_inference(x, *branch.parameters()))


def stripe_rows(branch: nn.Module, x: torch.Tensor, grid) -> int:
    """Rows per stripe: about :data:`.policy.STRIPE_TARGET_BYTES` of hidden tensor on the CPU,
    :data:`.policy.DEVICE_STRIPE_TARGET_BYTES` elsewhere; at least one."""
    target = policy.STRIPE_TARGET_BYTES if x.device.type == 'cpu' else \
        policy.DEVICE_STRIPE_TARGET_BYTES
    per_row = x.shape[0] * grid.hw[1] * branch.out_proj.in_features * x.element_size()
    return max(1, target // per_row)


def accumulate_striped(out: torch.Tensor, branch: nn.Module, x: torch.Tensor, grid, norm,
                       gamma, residual_linear: Callable) -> torch.Tensor:
    """``out += gamma * branch(norm(x), grid)`` stripe by stripe, each stripe's rows of
    ``out`` through the seam's ``residual_linear(rows, linear, h, gamma)``; ``out``
    (contiguous, the caller's) and ``x`` are distinct tensors, so every stripe reads unchanged
    input rows."""
    height, width = grid.hw
    halo, linear = branch.row_halo, branch.out_proj
    rows = stripe_rows(branch, x, grid)
    for a in range(0, height, rows):
        b = min(height, a + rows)
        s, e = max(0, a - halo), min(height, b + halo)
        h, _ = branch.residual_parts(x[:, s * width:e * width].contiguous(), grid.rows(s, e),
                                     norm)
        h = h[:, (a - s) * width:(b - s) * width]
        part = out[:, a * width:b * width]
        part.copy_(residual_linear(part, linear, h, gamma))
    return out
