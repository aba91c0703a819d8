from .embed import ConvStem, PatchConv, pad_to_multiple
from .ffn import ConvFFN
from .token_grid import TokenGrid
from .norm import LayerNorm2d
from .pos_embed import InterpolatedPosEmbed, resize_pos_embed, sincos_2d
from .utils import map_to_tokens, maybe_checkpoint, tokens_to_map
from .rope import apply_rope, rope_2d_angles
from .nala_attention import NaLaAttention, NaLaBlock
from .soft_attention import LandmarkSampler, SoftAttention, capped_grid
from .ldn_block import GridDiffusion, LDNBlock, LinearAttention
from .sincos_embed import SinCosPosEmbed2d
from .infsa_attention import InfSAGamma, LinearInfSA, PureInfSA

__all__ = [
    'ConvStem', 'PatchConv', 'pad_to_multiple', 'ConvFFN', 'LayerNorm2d',
    'InterpolatedPosEmbed', 'resize_pos_embed', 'sincos_2d', 'map_to_tokens',
    'maybe_checkpoint', 'tokens_to_map', 'apply_rope', 'rope_2d_angles', 'NaLaAttention',
    'NaLaBlock', 'LandmarkSampler', 'SoftAttention', 'capped_grid', 'GridDiffusion', 'LDNBlock',
    'LinearAttention', 'SinCosPosEmbed2d', 'InfSAGamma', 'LinearInfSA', 'PureInfSA',
    'TokenGrid'
]
