from .checkpoint import (CheckpointMismatchError, CorruptCheckpointError, UnsafeCheckpointError,
                         install_safe_checkpoint_loading, safe_load_checkpoint)
from .cpu_memory import GLIBC_TUNABLES_REUSE, reuse_freed_cpu_memory

__all__ = [
    'CheckpointMismatchError', 'CorruptCheckpointError', 'UnsafeCheckpointError',
    'install_safe_checkpoint_loading', 'safe_load_checkpoint',
    'GLIBC_TUNABLES_REUSE', 'reuse_freed_cpu_memory'
]
