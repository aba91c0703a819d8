"""Shared by tools/train.py and tools/test.py: library selection from the config's
``default_scope``, CPU adjustments, and the missing-dataset check.

Kept in tools/ because it imports mmdet / mmseg, which the ``mmlinattn`` package never does.
"""
import importlib
import os.path as osp
import sys

import torch
from mmengine.config import Config, ConfigDict
from mmengine.logging import print_log

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
if ROOT not in sys.path:  # running from a clone without `pip install -e .`
    sys.path.insert(0, ROOT)

import mmlinattn  # noqa: E402,F401  (installs safe checkpoint loading)
import mmlinattn.engine  # noqa: E402,F401  (registers our hooks)
import mmlinattn.models  # noqa: E402,F401  (registers our backbones)
from mmlinattn.utils.data_check import check_datasets  # noqa: E402

LIBRARIES = {'mmdet': 'MMDetection', 'mmseg': 'MMSegmentation'}


def library_of(cfg: Config) -> str:
    """The library a config belongs to, from its ``default_scope``."""
    scope = cfg.get('default_scope')
    if scope not in LIBRARIES:
        raise SystemExit(f'config default_scope is {scope!r}; this tool runs configs whose '
                         f"default_scope is one of {sorted(LIBRARIES)} (inherit an mmdet / "
                         f'mmseg base config, or set default_scope)')
    return scope


def register_library(scope: str) -> None:
    """Import and register every module of mmdet or mmseg (not of the other one)."""
    utils = importlib.import_module(f'{scope}.utils')
    utils.register_all_modules(init_default_scope=False)


def _replace_sync_bn(node) -> int:
    count = 0
    if isinstance(node, dict):
        if node.get('type') == 'SyncBN':
            node['type'] = 'BN'
            count += 1
        for v in node.values():
            count += _replace_sync_bn(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            count += _replace_sync_bn(v)
    return count


def _rank_zero_logger(cfg: Config) -> None:
    """mmengine's own ``LoggerHook`` becomes :class:`mmlinattn.engine.RankZeroLoggerHook`,
    so that a distributed test leaves one valid ``<timestamp>.json`` (see its docstring)."""
    hook = cfg.get('default_hooks', {}).get('logger')
    if hook is not None and hook.get('type') in ('LoggerHook', 'mmengine.LoggerHook'):
        hook['type'] = 'mmlinattn.RankZeroLoggerHook'


def setup_launcher(cfg: Config, launcher: str) -> None:
    """Distributed set-up that also works without a GPU (gloo backend, CPU DDP)."""
    if launcher == 'none':
        return
    _rank_zero_logger(cfg)
    if torch.cuda.is_available():
        return
    import torch.distributed as dist
    if not dist.is_initialized():
        # mmengine's init_dist calls torch.cuda.set_device, so start gloo ourselves.
        dist.init_process_group(backend='gloo')
    cfg.model_wrapper_cfg = ConfigDict(type='MMDistributedDataParallel', device_ids=None)
    n = _replace_sync_bn(cfg.model)
    if n:
        print_log(f'CPU distributed run: replaced {n} SyncBN layer(s) by BN (SyncBN needs '
                  'CUDA)', logger='current')


def check_config_datasets(cfg: Config, split_keys) -> None:
    """Stop with a readable message if a dataloader's files are missing."""
    problems = check_datasets(cfg, split_keys)
    if problems:
        raise SystemExit('\n\n'.join(problems))


def set_work_dir(cfg: Config, config_path: str, work_dir) -> None:
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(config_path))[0])


def env_is_cpu() -> bool:
    return not torch.cuda.is_available()


def close_process_group() -> None:
    """Tear down the torch.distributed group (if any) while the interpreter is whole.

    Call it after dropping the runner: the DDP wrapper and its reducer hold the group, and a
    group still alive at interpreter exit is destroyed in finalization, where gloo's
    threads sometimes abort the process ("terminate called without an active exception",
    1 in 12-24 two-process test runs under load).  ``gc.collect`` frees the runner's
    reference cycles now, so the group and its threads go with ``destroy_process_group``.
    """
    import gc

    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


__all__ = ['library_of', 'register_library', 'setup_launcher', 'check_config_datasets',
           'set_work_dir', 'env_is_cpu', 'close_process_group']
