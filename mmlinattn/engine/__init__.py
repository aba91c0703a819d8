"""mmengine hooks (registered in :data:`mmlinattn.registry.HOOKS`)."""
from .logger_hook import RankZeroLoggerHook
from .rng_state_hook import RNGStateHook
from .valid_region_hook import ValidRegionHook

__all__ = ['RankZeroLoggerHook', 'RNGStateHook', 'ValidRegionHook']
