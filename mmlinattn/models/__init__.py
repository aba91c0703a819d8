"""Backbones and necks, registered in :data:`mmlinattn.registry.MODELS`.

Importing this package never imports mmdet or mmseg.
"""
from . import backbones, necks, segmentors  # noqa: F401 (registers the modules)
