"""``frozen_stages`` takes effect at construction, for every family.

mmengine builds the model, wraps it in DDP, and only then calls ``train()``; parameters frozen
in ``train()`` alone were already registered by DDP, which then waits for their gradients
("Expected to have finished reduction in the prior iteration").
"""
import gc
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from dist_helpers import free_port
from archs import FAMILIES, TINY

from mmlinattn.registry import MODELS


def build(family, **kwargs):
    """Built as the Runner does: no ``train()`` / ``eval()`` call before use."""
    return MODELS.build(dict(TINY[family], **kwargs))


def _frozen_names(model):
    names = []
    for i in range(model.frozen_stages + 1):
        for prefix in (f'patch_embeds.{i}.', f'stages.{i}.', f'out_norms.{i}.'):
            names += [n for n, _ in model.named_parameters() if n.startswith(prefix)]
    return names


@pytest.mark.parametrize('family', FAMILIES)
def test_frozen_before_train_is_called(family):
    model = build(family, frozen_stages=0)
    frozen = set(_frozen_names(model))
    assert frozen
    for n, p in model.named_parameters():
        assert p.requires_grad == (n not in frozen), n


@pytest.mark.parametrize('family', FAMILIES)
def test_init_weights_keeps_frozen(family, tmp_path):
    src = build(family)
    path = tmp_path / 'bb.pth'
    torch.save({'state_dict': src.state_dict()}, path)
    for init_cfg in (None, dict(type='Pretrained', checkpoint=str(path))):
        model = build(family, frozen_stages=1, init_cfg=init_cfg)
        model.init_weights()  # what the Runner calls after build, before train()
        frozen = set(_frozen_names(model))
        assert all(p.requires_grad == (n not in frozen) for n, p in model.named_parameters())


def _ddp_worker(rank, port, families):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=2)
    try:
        for family in families:
            # the Runner's order: build -> DDP -> train()
            model = torch.nn.parallel.DistributedDataParallel(build(family, frozen_stages=0))
            model.train()
            opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
            for _ in range(2):  # the second iteration is where DDP used to fail
                outs = model(torch.randn(1, 3, 64, 64))
                sum(o.mean() for o in outs).backward()
                opt.step()
                opt.zero_grad()
            # a DDP wrapper holds the group: gloo's threads must stop before teardown
            del model, opt, outs
        gc.collect()
    finally:
        dist.destroy_process_group()


def test_frozen_stages_train_under_ddp():
    """Two gloo processes, every family; a worker's exception fails the test with its
    traceback."""
    mp.spawn(_ddp_worker, args=(free_port(), FAMILIES), nprocs=2)
