"""mmengine's ``LoggerHook`` with the test-metrics JSON written by rank 0 only."""
from mmengine.dist import is_main_process
from mmengine.hooks import LoggerHook

from ..registry import HOOKS


@HOOKS.register_module()
class RankZeroLoggerHook(LoggerHook):
    """``LoggerHook`` whose ``after_test_epoch`` runs on rank 0 only.

    mmengine 0.10's ``LoggerHook.after_test_epoch`` dumps ``<timestamp>.json`` from every
    rank of a distributed test.  The ranks open the same file for writing at the same
    moment, and when rank 1's line (its own timings) is longer than rank 0's, the file ends
    with rank 1's surplus characters and is no longer valid JSON.  Only rank 0 holds the
    gathered metrics worth keeping, and the other ranks' loggers print nothing, so they skip
    the hook.  Everything else is the parent's.
    """

    def after_test_epoch(self, runner, metrics=None) -> None:
        if is_main_process():
            super().after_test_epoch(runner, metrics)
