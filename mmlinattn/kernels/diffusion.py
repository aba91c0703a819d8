"""The fast form of LDN's explicit grid diffusion (Fein-Ashley, "Linear Diffusion Networks",
§3.3, E4 / E8): each step's increment written in place in eager inference."""
from typing import Optional

import torch
import torch.nn.functional as F

from ..ops import diffusion as plain
from . import policy

__all__ = ['fast_grid_diffusion']


def _increment_inplace(y: torch.Tensor, weight: torch.Tensor, a_deg: torch.Tensor, groups: int,
                       keep: Optional[torch.Tensor]) -> torch.Tensor:
    """:func:`mmlinattn.ops.diffusion.increment` in place on the conv's output where no
    autograd records it (under autograd an in-place op on the view would make the backward
    copy the whole gradient)."""
    if not policy.eager_inference(y, weight, a_deg):
        return plain.increment(y, weight, a_deg, groups, keep)
    k = weight.shape[-1]
    inc = F.conv2d(y, weight, padding=k // 2, groups=y.shape[1])
    split = (groups, y.shape[1] // groups)
    inc.unflatten(1, split).addcmul_(a_deg, y.unflatten(1, split), value=-1)
    return inc if keep is None else inc.mul_(keep)


def fast_grid_diffusion(x: torch.Tensor, kernel: torch.Tensor, step: torch.Tensor,
                        n_steps: int = 1, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`mmlinattn.ops.grid_diffusion` (its arguments and values), each increment in
    place in eager inference."""
    if policy.plain():
        return plain.grid_diffusion(x, kernel, step, n_steps, valid)
    return plain.euler_steps(x, kernel, step, n_steps, valid, _increment_inplace)
