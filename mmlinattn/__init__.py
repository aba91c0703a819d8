"""mmlinattn: linear-complexity attention backbones for MMDetection and MMSegmentation.

Importing the package (or :mod:`mmlinattn.models`) changes nothing outside it: safe
checkpoint loading is switched on by :mod:`mmlinattn.engine` (which configs list in
``custom_imports``), by the tools, or by calling
:func:`mmlinattn.utils.install_safe_checkpoint_loading`.
"""
__version__ = '0.1.0'

__all__ = ['__version__']
