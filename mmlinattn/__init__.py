"""mmlinattn: linear-complexity attention backbones for MMDetection and MMSegmentation."""
from .utils.checkpoint import install_safe_checkpoint_loading

__version__ = '0.1.0'

# mmengine 0.10.x calls ``torch.load`` without ``weights_only``; under torch >= 2.6 that means
# ``weights_only=True`` and its own checkpoints no longer load.  Allow-list exactly the types
# mmengine writes and route local loads through a loader that keeps safe unpickling on.
install_safe_checkpoint_loading()

__all__ = ['__version__']
