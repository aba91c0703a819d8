from ..layers.stage import BlockStage
from .base import BackboneBase, IsotropicBackbone, PyramidBackbone
from .infvit import InfViT, InfViTPlain
from .ldn import LDN
from .nalaformer import NaLaFormer
from .soft import SOFT

__all__ = [
    'BackboneBase', 'BlockStage', 'IsotropicBackbone', 'PyramidBackbone', 'SOFT', 'NaLaFormer',
    'InfViT', 'InfViTPlain', 'LDN'
]
