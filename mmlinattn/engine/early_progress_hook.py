"""Log every one of the first training iterations, so a slow (CPU) run shows progress at once."""
from mmengine.hooks import Hook, LoggerHook

from ..registry import HOOKS


@HOOKS.register_module()
class EarlyProgressHook(Hook):
    """Print the log line of each of the first ``num_iters`` training iterations.

    ``LoggerHook`` prints every ``interval`` (50) iterations: on a small CPU machine that is
    minutes of silence at the start of a run.  This hook fills in the iterations the logger
    skips, using the runner's own log processor, so the lines look the same and the logger's
    own lines are not printed twice.  Only text is written; the scalars file is the logger's.
    """

    priority = 'BELOW_NORMAL'

    def __init__(self, num_iters: int = 10):
        self.num_iters = num_iters

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        if runner.iter >= self.num_iters:
            return
        logger = next((h for h in runner.hooks if isinstance(h, LoggerHook)), None)
        if logger is not None and (logger.every_n_inner_iters(batch_idx, logger.interval)
                                   or logger.end_of_epoch(runner.train_dataloader, batch_idx)):
            return  # the logger prints this one
        _, log_str = runner.log_processor.get_log_after_iter(runner, batch_idx, 'train')
        runner.logger.info(log_str)
