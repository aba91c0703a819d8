"""mmengine hooks (registered in :data:`mmlinattn.registry.HOOKS`)."""
from .rng_state_hook import RNGStateHook

__all__ = ['RNGStateHook']
