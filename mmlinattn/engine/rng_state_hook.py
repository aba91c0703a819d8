"""Save and restore random-number-generator states in checkpoints."""
import random

import numpy as np
import torch
from mmengine.hooks import Hook

from ..registry import HOOKS


@HOOKS.register_module()
class RNGStateHook(Hook):
    """Make ``--resume`` continue exactly where the run stopped.

    mmengine re-seeds at start-up but does not store the generators' states in checkpoints,
    so after a resume stochastic depth, dropout and random augmentations draw different
    numbers than the uninterrupted run would have.  This hook stores the torch (CPU and
    CUDA), numpy and ``random`` states with every checkpoint and restores them on resume.
    States are stored as tensors and plain numbers, which ``weights_only`` loading accepts.

    mmengine re-seeds after this hook when the config's ``randomness.seed`` differs from the
    checkpoint's, and builds the data sampler with the seed it drew at start-up; so the
    resumed run must start with the checkpoint's seed.  ``tools/train.py --resume`` sets it
    when the config has none; a Runner built by other code needs ``randomness.seed`` set.
    """

    priority = 'VERY_LOW'
    KEY = 'rng_state'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        version, internal, gauss_next = random.getstate()
        state = dict(torch=torch.get_rng_state(),
                     numpy=[kind, torch.from_numpy(keys.astype(np.int64)), int(pos),
                            int(has_gauss), float(gauss)],
                     random=[version, torch.tensor(internal, dtype=torch.int64), gauss_next])
        if torch.cuda.is_available():
            state['cuda'] = torch.cuda.get_rng_state_all()
        checkpoint[self.KEY] = state

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        state = checkpoint.get(self.KEY)
        if state is None:
            return
        torch.set_rng_state(state['torch'])
        kind, keys, pos, has_gauss, gauss = state['numpy']
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
        version, internal, gauss_next = state['random']
        random.setstate((version, tuple(internal.tolist()), gauss_next))
        if 'cuda' in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state['cuda'])
