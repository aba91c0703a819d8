import os

import pytest
import torch


def pytest_configure(config):
    """Under pytest-xdist (tools/run_tests.sh), the worker processes share the cores: each
    takes its share of torch threads instead of all of them."""
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    if workers > 1:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // workers))


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


@pytest.fixture
def gemm_spy(monkeypatch):
    """One entry per product a residual branch accumulated into its stream by the GEMM
    (:mod:`mmlinattn.models.layers.fused`), i.e. without calling its linear."""
    import mmlinattn.models.layers.fused as fused
    calls, plain = [], fused._accumulate_product

    def spy(out, y, w):
        calls.append(tuple(w.shape))
        return plain(out, y, w)
    monkeypatch.setattr(fused, '_accumulate_product', spy)
    return calls
