"""The fast form of LDN's explicit grid diffusion (Fein-Ashley, "Linear Diffusion Networks",
§3.3, E4 / E8): each step's increment written in place in eager inference."""
from typing import Optional

import torch
import torch.nn.functional as F

from ..ops import diffusion as plain
from . import policy
from .dispatch import fast_form, fast_ops

__all__ = ['fast_grid_diffusion']


@fast_form('diffusion increment in place', policy.eager_unavailable)
def increment_in_place(y: torch.Tensor, weight: torch.Tensor, a_deg: torch.Tensor, groups: int,
                       keep: Optional[torch.Tensor]) -> bool:
    """:func:`_increment` writes in place on the conv's output: eager inference (under
    autograd an in-place op on the view would make the backward copy the whole gradient)."""
    return not policy.needs_grad(y, weight, a_deg)


@increment_in_place.dispatch(plain.increment)
def _increment(y: torch.Tensor, weight: torch.Tensor, a_deg: torch.Tensor, groups: int,
               keep: Optional[torch.Tensor]) -> torch.Tensor:
    """:func:`mmlinattn.ops.diffusion.increment`, in place on the conv's output where
    :func:`increment_in_place` rules so."""
    k = weight.shape[-1]
    inc = F.conv2d(y, weight, padding=k // 2, groups=y.shape[1])
    split = (groups, y.shape[1] // groups)
    inc.unflatten(1, split).addcmul_(a_deg, y.unflatten(1, split), value=-1)
    return inc if keep is None else inc.mul_(keep)


@fast_ops.dispatch(plain.grid_diffusion)
def fast_grid_diffusion(x: torch.Tensor, kernel: torch.Tensor, step: torch.Tensor,
                        n_steps: int = 1, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`mmlinattn.ops.grid_diffusion` (its arguments and values), each increment in
    place in eager inference."""
    return plain.euler_steps(x, kernel, step, n_steps, valid, _increment)
