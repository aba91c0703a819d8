from .embed import ConvStem, PatchConv, pad_to_multiple
from .ffn import ConvFFN
from .norm import LayerNorm2d
from .pos_embed import InterpolatedPosEmbed, resize_pos_embed, sincos_2d
from .utils import map_to_tokens, maybe_checkpoint, tokens_to_map

__all__ = [
    'ConvStem', 'PatchConv', 'pad_to_multiple', 'ConvFFN', 'LayerNorm2d',
    'InterpolatedPosEmbed', 'resize_pos_embed', 'sincos_2d', 'map_to_tokens',
    'maybe_checkpoint', 'tokens_to_map'
]
