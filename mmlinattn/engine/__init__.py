"""mmengine hooks (registered in :data:`mmlinattn.registry.HOOKS`)."""
from .checkpoint_match_hook import CheckpointMatchHook
from .logger_hook import RankZeroLoggerHook
from .rng_state_hook import RNGStateHook
from .valid_region_hook import ValidRegionHook

__all__ = ['CheckpointMatchHook', 'RankZeroLoggerHook', 'RNGStateHook', 'ValidRegionHook']
