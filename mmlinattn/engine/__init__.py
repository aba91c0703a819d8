"""mmengine hooks (registered in :data:`mmlinattn.registry.HOOKS`).

Importing this package also switches on safe checkpoint loading
(:func:`~mmlinattn.utils.checkpoint_schemes.install_safe_checkpoint_loading`): the configs
list it in ``custom_imports``, so a run of any tool on them, mmdet's and mmseg's own
included, loads checkpoints with ``weights_only=True`` through every scheme of mmengine;
and mmengine's lookup of ``mmdet::`` / ``mmseg::`` config bases reads each package's model
index once per process (:func:`~mmlinattn.utils.external_configs.cache_external_config_index`).
"""
from mmlinattn.utils.checkpoint_schemes import install_safe_checkpoint_loading
from mmlinattn.utils.external_configs import cache_external_config_index
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
cache_external_config_index()
