from .checkpoint import (CheckpointMismatchError, CorruptCheckpointError, UnsafeCheckpointError,
                         safe_load_checkpoint)
from .checkpoint_schemes import install_safe_checkpoint_loading

__all__ = [
    'CheckpointMismatchError', 'CorruptCheckpointError', 'UnsafeCheckpointError',
    'install_safe_checkpoint_loading', 'safe_load_checkpoint'
]
