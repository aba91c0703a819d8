"""The demo and photo datasets' classes and sources (their converters are
``tools/dataset_converters/``); needs neither mmdet nor mmseg."""
from .demo import DEMO_CLASSES, DEMO_PALETTE
from .photos import PHOTO_ROOT, PHOTO_SETS, is_photo_root

__all__ = ['DEMO_CLASSES', 'DEMO_PALETTE', 'PHOTO_ROOT', 'PHOTO_SETS', 'is_photo_root']
