"""Feed-forward blocks on token sequences (B, N, C) with the token grid passed explicitly."""
from typing import Optional

import torch
import torch.nn as nn

from ...ops._grad import recompute_in_backward
from .channels_last import conv_tokens
from .fused import residual_branch
from .norm import build_act
from .token_grid import TokenGrid


class ConvFFN(nn.Module):
    """fc1 -> act -> (depthwise 3x3 conv on the H x W grid [+ residual]) -> act? -> fc2.

    The Mix-FFN of PVTv2/SegFormer (``dw_residual=False, act_after_dw=True`` ordering
    fc1 -> dwconv -> act) and NaLaFormer's FFN (fc1 -> act -> dwconv + residual -> fc2) are
    both this module with different switches.

    Args:
        dim: input / output channels.
        hidden_dim: hidden channels.
        act_cfg: the activation (:func:`.norm.build_act`).
        dw_residual: add the depthwise conv's input back to its output.
        act_before_dw: apply the activation before (NaLaFormer) or after (Mix-FFN) the dwconv.
        drop: dropout after each linear.
        recompute_hidden: in eager training keep only fc1's output for the backward and
            recompute the activation and the depthwise conv there (activation checkpointing
            of that stretch): one hidden-size tensor less per block, for one more depthwise
            conv forward.
    """

    def __init__(self, dim: int, hidden_dim: int, act_cfg: dict = dict(type='GELU'),
                 dw_residual: bool = False, act_before_dw: bool = False, drop: float = 0.0,
                 recompute_hidden: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.dwconv = nn.Conv2d(hidden_dim, hidden_dim, 3, 1, 1, groups=hidden_dim)
        self.act = build_act(act_cfg)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop = nn.Dropout(drop)
        self.dw_residual = dw_residual
        self.act_before_dw = act_before_dw
        self.recompute_hidden = recompute_hidden

    def forward(self, x: torch.Tensor, grid: TokenGrid, shortcut: Optional[torch.Tensor] = None,
                gamma: Optional[torch.Tensor] = None,
                drop_path: Optional[nn.Module] = None) -> torch.Tensor:
        """(B, N, C) tokens on ``grid`` -> (B, N, C).  With a ``shortcut`` it returns the
        whole residual step ``shortcut + drop_path(gamma * FFN(x))`` (LayerScale ``gamma``
        optional), fused into ``fc2`` in inference (:func:`.fused.residual_branch`)."""
        hidden = self._hidden(x, grid)
        if shortcut is None:
            return self.drop(self.fc2(hidden))
        return residual_branch(shortcut, self.fc2, hidden, gamma, drop_path, self.drop,
                               self.training)

    def _hidden(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """Everything before ``fc2`` (its input, after the first dropout)."""
        x = self.fc1(x)
        if torch.compiler.is_compiling() or not self.recompute_hidden:
            x = self._mix(x, grid)
        else:  # keep fc1's output only; the rest is recomputed in the backward
            x = recompute_in_backward(lambda h: self._mix(h, grid), x)
        return self.drop(x)

    def _mix(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """The activation and the depthwise conv (+ residual), in the configured order."""
        if self.act_before_dw:
            x = self.act(x)
        # channels-last views: oneDNN keeps that layout, so no copy either way (a transposed
        # view with a batch stride of C instead makes it fall back to NCHW: ~5x slower at 1024²)
        x = conv_tokens(self.dwconv, x, grid, residual=self.dw_residual)
        if not self.act_before_dw:
            x = self.act(x)
        return x
