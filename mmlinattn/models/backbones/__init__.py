from .base import BlockStage, PyramidBackbone
from .nalaformer import NaLaFormer
from .soft import SOFT
from .ldn import LDN
from .infvit import InfViT, InfViTPlain

__all__ = ['BlockStage', 'PyramidBackbone', 'LDN']
__all__ += ['SOFT']
__all__ += ['NaLaFormer']
__all__ += ['InfViT', 'InfViTPlain']
