"""Validate the model a run starts from, before its first training iteration."""
import logging
import random

import numpy as np
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log

from ..registry import HOOKS


@HOOKS.register_module()
class ValidateBeforeTrainHook(Hook):
    """Run the validation loop once before training (``tools/train.py
    --val-before-train``): the metric of what the run starts from -- its initialisation,
    ``load_from``'s weights or a resumed checkpoint -- logged like every other validation,
    at iteration (epoch) 0, so one run shows how far training moved it.

    The random-number generators are put back as they were, so the training that follows
    draws the same numbers as a run without this hook.
    """

    priority = 'LOWEST'   # after every other before_train hook

    def before_train(self, runner) -> None:
        if runner.val_loop is None:
            print_log('--val-before-train: the config has no validation (val_dataloader, '
                      'val_cfg, val_evaluator); nothing to validate', logger='current',
                      level=logging.WARNING)
            return
        states = (torch.get_rng_state(), np.random.get_state(), random.getstate(),
                  torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
        try:
            runner.val_loop.run()
        finally:
            torch.set_rng_state(states[0])
            np.random.set_state(states[1])
            random.setstate(states[2])
            if states[3] is not None:
                torch.cuda.set_rng_state_all(states[3])
