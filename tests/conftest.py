import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _restore_default_scope():
    """A test that runs a Runner or calls ``init_default_scope`` makes its scope current for
    the whole process; later ``mmlinattn`` registry builds would then look in mmdet's."""
    from mmengine.registry import DefaultScope
    saved = DefaultScope._instance_dict.copy()
    yield
    DefaultScope._instance_dict.clear()
    DefaultScope._instance_dict.update(saved)
