from .simple_fpn import SimpleFeaturePyramid

__all__ = ['SimpleFeaturePyramid']
