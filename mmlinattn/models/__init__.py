"""Backbones, necks, and the whole-image detector and segmentor, registered in
:data:`mmlinattn.registry.MODELS`.

Importing this package never imports mmdet or mmseg.
"""
from . import backbones, detectors, necks, segmentors  # noqa: F401 (registers the modules)
