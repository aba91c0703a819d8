"""Backbones and necks, registered in :data:`mmlinattn.registry.MODELS`.

Importing this package never imports mmdet or mmseg.
"""
import sys

from . import backbones, necks  # noqa: F401 (registers the modules)

if 'mmdeploy' in sys.modules:  # mmdeploy's own tools load a config: keep its exporter working
    from ..deployment import mmdeploy_rewriters  # noqa: F401
