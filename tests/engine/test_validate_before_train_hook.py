"""``tools/train.py --val-before-train`` (mmlinattn.ValidateBeforeTrainHook): the validation
runs once before training and leaves the random-number generators as it found them (the
whole-run check is tests/tools/test_learns_on_photos.py, whose untrained metrics come
from it)."""
import random
import types

import numpy as np
import torch

from mmlinattn.engine import ValidateBeforeTrainHook


def _draws():
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_validates_once_and_restores_the_generators():
    runs = []

    def validate():              # a validation that draws random numbers of every library
        runs.append(_draws())
    runner = types.SimpleNamespace(val_loop=types.SimpleNamespace(run=validate))
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    expected = _draws()
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    ValidateBeforeTrainHook().before_train(runner)
    assert len(runs) == 1 and runs[0] == expected      # it ran, and it drew numbers
    assert _draws() == expected                        # training then draws the same ones


def test_no_validation_configured_is_a_warning(monkeypatch):
    import mmlinattn.engine.validate_before_train_hook as hook_module
    logged = []
    monkeypatch.setattr(hook_module, 'print_log', lambda msg, **kw: logged.append(msg))
    runner = types.SimpleNamespace(val_loop=None)
    ValidateBeforeTrainHook().before_train(runner)     # no exception: training goes on
    assert len(logged) == 1 and 'nothing to validate' in logged[0]
