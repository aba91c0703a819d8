from .base import BlockStage, PyramidBackbone

__all__ = ['BlockStage', 'PyramidBackbone']
