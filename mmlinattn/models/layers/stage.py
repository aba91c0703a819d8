"""One stage of token-mixing blocks at constant resolution, NCHW in and out."""
from typing import Optional, Sequence

import torch
import torch.nn as nn

from ...kernels import stage_forms
from .channels_last import map_as_tokens, tokens_as_map
from .token_grid import TokenGrid, grid_of_map
from .utils import maybe_checkpoint


class BlockStage(nn.Module):
    """A position embedding, then blocks on the (B, H*W, C) tokens, NCHW in and out.

    Every block is called as ``block(tokens, grid)`` with the stage's :class:`TokenGrid`.

    Args:
        blocks: the stage's blocks.
        pos_embed: called as ``pos_embed(map, grid)`` on the NCHW map first (None: none).
        cls_token_dim: prepend a learned class token of this width for the blocks and drop
            it afterwards (SOFT's stage 4, Lu et al., arXiv 2207.03341, Table 1); None: none.
        with_cp: activation checkpointing per block.
    """

    def __init__(self, blocks: Sequence[nn.Module], pos_embed: Optional[nn.Module] = None,
                 cls_token_dim: Optional[int] = None, with_cp: bool = False):
        super().__init__()
        self.pos_embed = pos_embed
        self.cls_token = None
        if cls_token_dim is not None:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, cls_token_dim))
            nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.blocks = nn.ModuleList(blocks)
        self.with_cp = with_cp

    def forward_tokens(self, x: torch.Tensor, grid: TokenGrid, owned: bool = False
                       ) -> torch.Tensor:
        """(B, C, H, W) on ``grid`` -> the tokens after the blocks, class token first if any.

        ``owned``: the caller made ``x`` and reads it no more. The caller's reference keeps
        ``x`` alive through the whole stage, a map that no block reads after the first, so in
        inference the position embedding is added into ``x``, and on a large map each block's
        output is copied back into it (one copy per block instead of a third map beside the
        blocks' input and output)."""
        if self.pos_embed is not None:
            x = stage_forms.add_position(self.pos_embed, x, grid, owned)
        # channels-last view for a channels-last map (what the previous stage and its
        # down-sampling conv hand over), else one copy: contiguous tokens for every block
        t = map_as_tokens(x)
        del x  # a view's base lives on in t; what the blocks replace is freed as they go
        if self.cls_token is not None:
            t = torch.cat([self.cls_token.expand(t.shape[0], -1, -1).to(t.dtype), t], dim=1)
        # (a loop here, not in a helper: a caller's reference to the first tokens would keep
        # them alive through every block)
        home = stage_forms.stage_home(self, t, owned)
        for blk in self.blocks:
            t = maybe_checkpoint(blk, t, grid, enabled=self.with_cp)
            if home is not None and t.data_ptr() != home.data_ptr():
                t = home.copy_(t)
        return t

    def forward(self, x: torch.Tensor, grid: Optional[TokenGrid] = None,
                owned: bool = False) -> torch.Tensor:
        """NCHW map on ``grid`` (None: the map's own size, nothing padded) -> NCHW map
        (``owned``: see :meth:`forward_tokens`)."""
        grid = grid_of_map(x, grid)
        t = self.forward_tokens(x, grid, owned)
        if self.cls_token is not None:
            t = t[:, 1:].contiguous()
        # a channels-last view (no copy); the next conv keeps that layout
        return tokens_as_map(t, grid.hw)
