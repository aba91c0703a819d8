"""Dataset helpers that need neither mmdet nor mmseg (the demo-data generator)."""
from .demo import (CITYSCAPES_TRAIN_IDS, DEMO_CLASSES, DEMO_PALETTE, LAYOUTS, DemoSample,
                   generate_sample, layout_root, make_demo_data)

__all__ = ['CITYSCAPES_TRAIN_IDS', 'DEMO_CLASSES', 'DEMO_PALETTE', 'LAYOUTS', 'DemoSample',
           'generate_sample', 'layout_root', 'make_demo_data']
