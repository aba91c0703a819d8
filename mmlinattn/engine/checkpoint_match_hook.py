"""Refuse to run a model whose ``load_from`` checkpoint does not fit it."""
from mmengine.hooks import Hook
from mmengine.model import BaseTTAModel, is_model_wrapper

from ..registry import HOOKS
from ..utils.checkpoint import check_model_checkpoint


@HOOKS.register_module()
class CheckpointMatchHook(Hook):
    """Log how much of the model a loaded checkpoint fills; below ``min_match`` of the
    parameters (or with NaN / Inf weights) raise
    :class:`~mmlinattn.utils.checkpoint.CheckpointMismatchError` unless ``allow_partial``.

    mmengine loads ``load_from`` with ``strict=False`` and only warns, so a checkpoint of
    another arch or model would otherwise be evaluated as random weights.  Runs in
    ``after_load_checkpoint``, i.e. before the weights reach the model.
    """

    priority = 'VERY_HIGH'

    def __init__(self, min_match: float = 0.9, allow_partial: bool = False,
                 purpose: str = 'evaluate a model that is partly random weights'):
        self.min_match = min_match
        self.allow_partial = allow_partial
        self.purpose = purpose

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        model = runner.model
        # mmengine loads into what DDP or a test-time-augmentation model wraps
        while is_model_wrapper(model) or isinstance(model, BaseTTAModel):
            model = model.module
        path = str(runner._load_from)  # mmengine keeps no public copy of load_from
        check_model_checkpoint(model, checkpoint, path, self.min_match, self.allow_partial,
                               self.purpose)
