"""Plain-ViT pieces: the patchify + position + class-token input and the softmax block.

Dosovitskiy et al., "An Image is Worth 16x16 Words" (arXiv 2010.11929), Sec. 3.1, Eq. 1-3.
"""
from typing import Tuple

import torch
import torch.nn as nn
from timm.layers import trunc_normal_
from timm.models.vision_transformer import Block as TimmBlock

from .channels_last import map_as_tokens
from .embed import PatchConv
from .pos_embed import InterpolatedPosEmbed
from .token_grid import TokenGrid


class PlainEmbed(nn.Module):
    """ViT input (Eq. 1): non-overlapping patchify, a learned position embedding stored at
    ``pos_grid`` and resized (bicubic) to the current grid, and a prepended class token.

    Returns ``(tokens (B, [1 +] h*w, C), grid)`` with the grid's ``h = ceil(H /
    patch_size)``.
    """

    def __init__(self, in_channels: int, dim: int, patch_size: int, pos_grid: Tuple[int, int],
                 with_cls_token: bool = True):
        super().__init__()
        self.proj = PatchConv(in_channels, dim, patch_size, patch_size)
        self.pos_embed = InterpolatedPosEmbed(dim, pos_grid)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if with_cls_token else None
        if self.cls_token is not None:
            trunc_normal_(self.cls_token, std=0.02)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens: 1 with the class token, else 0."""
        return int(self.cls_token is not None)

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, TokenGrid]:
        x, grid = self.proj(x, grid)
        tokens = map_as_tokens(self.pos_embed(x, grid))
        if self.cls_token is not None:
            cls = self.cls_token.to(tokens.dtype).expand(tokens.shape[0], -1, -1)
            tokens = torch.cat([cls, tokens], dim=1)
        return tokens, grid


class SoftmaxBlock(TimmBlock):
    """Pre-LN softmax ViT block (Eq. 2-3; timm's), called as ``block(x, grid)``."""

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        # batch padding is never a key; prefix tokens (the class token) always are
        mask = grid.valid_tokens(x)
        return super().forward(x, attn_mask=None if mask is None else mask[:, None, None])
