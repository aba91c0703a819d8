from .checkpoint import (UnsafeCheckpointError, install_safe_checkpoint_loading,
                         safe_load_checkpoint)

__all__ = ['UnsafeCheckpointError', 'install_safe_checkpoint_loading', 'safe_load_checkpoint']
