"""Feed-forward blocks on token sequences (B, N, C) with the token grid passed explicitly."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from timm.layers import Mlp as TimmMlp

from ...kernels import seam
from .branch import Branch, Hidden
from .channels_last import conv_tokens
from .norm import build_act
from .token_grid import TokenGrid

RECOMPUTE = ('none', 'last', 'all')


def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise ValueError(f'recompute must be one of {RECOMPUTE}, got {recompute!r}')


class ConvFFN(Branch):
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
        recompute: what eager training recomputes in the backward instead of keeping
            (activation checkpointing of the hidden stretch): ``'none'``; ``'last'``, the
            op just before fc2 (the activation in Mix-FFN order, the depthwise conv in
            NaLaFormer's), one hidden-size tensor fewer per block for one more forward of
            that op; ``'all'``, everything after fc1 (fc1's output is all that is kept), two
            tensors fewer for one more forward of both.  fc2's product itself is never
            recomputed: the checkpoint's recomputation stops once fc2's input is rebuilt
            (PyTorch's early stop, on by default).
    """

    def __init__(self, dim: int, hidden_dim: int, act_cfg: dict = dict(type='GELU'),
                 dw_residual: bool = False, act_before_dw: bool = False, drop: float = 0.0,
                 recompute: str = 'none'):
        super().__init__()
        _check_recompute(recompute)
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.dwconv = nn.Conv2d(hidden_dim, hidden_dim, 3, 1, 1, groups=hidden_dim)
        self.act = build_act(act_cfg)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop = nn.Dropout(drop)
        self.dw_residual = dw_residual
        self.act_before_dw = act_before_dw
        self.recompute = recompute
        self.row_halo = self.dwconv.kernel_size[0] // 2  # local: inference may run it in stripes

    out_proj_name, out_drop_name = 'fc2', 'drop'

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """``drop(fc2(drop(steps(fc1(x)))))``, the steps the activation and the depthwise
        conv on ``grid`` in the configured order."""
        h = self.fc1(x)
        for step in self.hidden_steps(grid):
            h = step.fn(h)
        return self.drop(self.fc2(self.drop(h)))

    def hidden(self, x: torch.Tensor, grid: TokenGrid, norm: Optional[nn.Module] = None,
               summary=None) -> Hidden:
        """fc2's input from ``norm(x)``, with the fast forms composed in
        (``kernels.hidden_chain``: the GELU in a oneDNN epilogue, the steps recomputed in the
        backward)."""
        return Hidden(*seam.hidden_chain(x, norm, self.fc1, self.hidden_steps(grid), self.drop,
                                         self.recompute))

    def hidden_steps(self, grid: TokenGrid) -> Tuple[seam.Step, seam.Step]:
        """The steps between fc1 and fc2: the activation and the depthwise conv (+ residual)
        on ``grid``, in the configured order."""
        dwconv = seam.Step(_GridConv(self.dwconv, grid, self.dw_residual), self.dwconv)
        act = seam.Step(self.act)
        return (act, dwconv) if self.act_before_dw else (dwconv, act)


class _GridConv:
    """``conv_tokens(conv, t, grid, residual, act)``: the depthwise step of
    :meth:`ConvFFN.hidden_steps`, which may take the activation after it.  Channels-last
    views: oneDNN keeps that layout, so no copy either way (a transposed view with a batch
    stride of C instead makes it fall back to NCHW: ~5x slower at 1024²)."""

    def __init__(self, conv: nn.Conv2d, grid: TokenGrid, residual: bool):
        self.conv, self.grid, self.residual = conv, grid, residual

    def __call__(self, t: torch.Tensor, act: Optional[nn.Module] = None) -> torch.Tensor:
        return conv_tokens(self.conv, t, self.grid, residual=self.residual, act=act)


class Mlp(Branch, TimmMlp):
    """timm's ``Mlp`` (fc1 -> act -> drop -> norm -> fc2 -> drop, the same parameters and
    state-dict keys) that can recompute its activation in the backward.

    Args:
        recompute: ``'none'``, or ``'last'`` / ``'all'`` (the same here: the activation is
            the only op between fc1 and fc2): eager training keeps fc1's output only and
            rebuilds fc2's input from it in the backward (one hidden-size tensor fewer per
            block for one more activation forward; fc2's product is not recomputed, see
            :class:`ConvFFN`).
        *args, **kwargs: timm's ``Mlp``.
    """

    def __init__(self, *args, recompute: str = 'none', **kwargs):
        super().__init__(*args, **kwargs)
        _check_recompute(recompute)
        self.recompute = recompute

    out_proj_name, out_drop_name = 'fc2', 'drop2'
    row_halo = 0  # per token: inference may run it in stripes

    def forward(self, x: torch.Tensor, grid=None) -> torch.Tensor:
        """timm's: ``drop2(fc2(norm(drop1(act(fc1(x))))))`` (``grid`` unused: per token)."""
        return self.drop2(self.fc2(self._fc2_input(self.fc1(x))))

    def hidden(self, x: torch.Tensor, grid=None, norm: Optional[nn.Module] = None,
               summary=None) -> Hidden:
        """fc2's input from ``norm(x)``, with the fast forms composed in
        (``kernels.hidden_chain``: fc1 and a GELU as one oneDNN primitive; in eager training
        with ``recompute``, fc1's output kept and the rest recomputed in the backward)."""
        steps = (seam.Step(self.act), seam.Step(self.drop1), seam.Step(self.norm))
        return Hidden(*seam.hidden_chain(x, norm, self.fc1, steps,
                                         recompute='none' if self.recompute == 'none' else 'all',
                                         plain_first=True))

    def _fc2_input(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(self.drop1(self.act(h)))
