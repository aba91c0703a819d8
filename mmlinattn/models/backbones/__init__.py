from .base import BlockStage, PyramidBackbone
from .infvit import InfViT, InfViTPlain
from .ldn import LDN
from .nalaformer import NaLaFormer
from .soft import SOFT

__all__ = ['BlockStage', 'PyramidBackbone', 'SOFT', 'NaLaFormer', 'InfViT', 'InfViTPlain', 'LDN']
