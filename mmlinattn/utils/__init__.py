from .checkpoint import (CheckpointMismatchError, CorruptCheckpointError, UnsafeCheckpointError,
                         install_safe_checkpoint_loading, safe_load_checkpoint)

__all__ = [
    'CheckpointMismatchError', 'CorruptCheckpointError', 'UnsafeCheckpointError',
    'install_safe_checkpoint_loading', 'safe_load_checkpoint'
]
