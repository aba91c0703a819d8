from .embed import STEMS, ConvStem, PatchConv, early_conv_stem, pad_to_multiple
from .ffn import ConvFFN
from .token_grid import TokenGrid
from .norm import LayerNorm2d, build_act, build_norm
from .pos_embed import BilinearPosEmbed, InterpolatedPosEmbed, resize_pos_embed, sincos_2d
from .channels_last import map_as_tokens, tokens_as_map
from .utils import check_heads, maybe_checkpoint, per_stage
from .rope import apply_rope, rope_2d_angles
from .nala_attention import NaLaAttention, NaLaBlock
from .soft_attention import LandmarkSampler, SOFTBlock, SoftAttention, capped_grid
from .ldn_block import GridDiffusion, LDNBlock, LinearAttention
from .sincos_embed import SinCosPosEmbed2d
from .infsa_attention import InfSABlock, InfSAGamma, LinearInfSA, PureInfSA
from .vit import PlainEmbed, SoftmaxBlock
from .stage import BlockStage

__all__ = [
    'STEMS', 'ConvStem', 'PatchConv', 'early_conv_stem', 'pad_to_multiple', 'ConvFFN', 'LayerNorm2d', 'build_act',
    'build_norm', 'BilinearPosEmbed', 'InterpolatedPosEmbed', 'resize_pos_embed', 'sincos_2d',
    'map_as_tokens', 'tokens_as_map', 'check_heads', 'maybe_checkpoint', 'per_stage',
    'apply_rope', 'rope_2d_angles', 'NaLaAttention', 'NaLaBlock', 'LandmarkSampler',
    'SOFTBlock', 'SoftAttention', 'capped_grid', 'GridDiffusion', 'LDNBlock',
    'LinearAttention', 'SinCosPosEmbed2d', 'InfSABlock', 'InfSAGamma', 'LinearInfSA',
    'PureInfSA', 'PlainEmbed', 'SoftmaxBlock', 'BlockStage', 'TokenGrid'
]
