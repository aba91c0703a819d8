"""A backbone ``init_cfg`` naming a checkpoint file that does not exist (as the examples of
docs/user_guides/configs.md do until the user makes one) says what to do."""
import pytest

import mmlinattn.models  # noqa: F401  (registers the backbones)
from mmlinattn.registry import MODELS
from mmlinattn.utils.checkpoint import MissingCheckpointError


def test_missing_pretrained_file_says_what_to_do(tmp_path):
    path = str(tmp_path / 'checkpoints' / 'ldn_small.pth')
    model = MODELS.build(dict(type='LDN', arch='tiny',
                              init_cfg=dict(type='Pretrained', checkpoint=path)))
    with pytest.raises(MissingCheckpointError) as err:
        model.init_weights()
    message = str(err.value)
    assert path in message and 'init_cfg=None' in message
    assert 'tools/model_converters/convert_checkpoint.py' in message
    assert 'docs/user_guides/weights.md' in message
