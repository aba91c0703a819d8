"""mmengine hooks (registered in :data:`mmlinattn.registry.HOOKS`).

Importing this package does one thing beyond registering the hooks: it switches on safe
checkpoint loading (:func:`~mmlinattn.utils.checkpoint_schemes.install_safe_checkpoint_loading`).
The configs list it in ``custom_imports``, so a run of any tool on them, mmdet's and mmseg's
own included, loads checkpoints with ``weights_only=True`` through every scheme of mmengine.

The faster lookup of ``mmdet::`` / ``mmseg::`` config bases
(:func:`~mmlinattn.utils.external_configs.cache_external_config_index`) is no effect of this
import: the tools that parse configs call it themselves.
"""
from mmlinattn.utils.checkpoint_schemes import install_safe_checkpoint_loading
from .checkpoint_match_hook import CheckpointMatchHook
from .early_progress_hook import EarlyProgressHook
from .logger_hook import RankZeroLoggerHook
from .rng_state_hook import RNGStateHook
from .safe_checkpoint_hook import SafeCheckpointHook
from .validate_before_train_hook import ValidateBeforeTrainHook
from .valid_region_hook import ValidRegionHook

__all__ = ['CheckpointMatchHook', 'EarlyProgressHook', 'RankZeroLoggerHook', 'RNGStateHook',
           'SafeCheckpointHook', 'ValidateBeforeTrainHook', 'ValidRegionHook']

install_safe_checkpoint_loading()
