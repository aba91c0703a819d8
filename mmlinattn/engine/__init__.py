"""mmengine hooks (registered in :data:`mmlinattn.registry.HOOKS`)."""
from .checkpoint_match_hook import CheckpointMatchHook
from .early_progress_hook import EarlyProgressHook
from .logger_hook import RankZeroLoggerHook
from .rng_state_hook import RNGStateHook
from .valid_region_hook import ValidRegionHook

__all__ = ['CheckpointMatchHook', 'EarlyProgressHook', 'RankZeroLoggerHook', 'RNGStateHook',
           'ValidRegionHook']
