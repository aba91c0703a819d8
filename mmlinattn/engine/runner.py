"""Shared by the tools that run a config (``tools/train.py``, ``tools/test.py``,
``demo/image_demo.py``, ...): library selection from the config's ``default_scope``,
distributed set-up (CPU adjustments, timeout), the dataset and channel pre-flight checks, the
resumed seed and readable checkpoint errors.

mmdet / mmseg are imported only when :func:`register_library` is called, so the package keeps
importing without them.
"""
import copy
import importlib
import logging
import os.path as osp
from contextlib import contextmanager
from datetime import timedelta
from typing import Optional

import torch
from mmengine.config import Config, ConfigDict
from mmengine.logging import print_log

import mmlinattn.engine  # noqa: F401  (registers the hooks the tools add)
import mmlinattn.models  # noqa: F401  (registers the backbones)
from mmlinattn.utils.channel_check import check_channels
from mmlinattn.utils.checkpoint import (CheckpointMismatchError, CorruptCheckpointError,
                                        MissingCheckpointError, UnsafeCheckpointError,
                                        safe_load_checkpoint)
from mmlinattn.utils.data_check import check_datasets
from mmlinattn.utils.weights_hint import weights_hint

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


def build_in_scope(cfg: dict, scope: str):
    """Build a model config of mmdet or mmseg (``scope``) through mmengine's root registry,
    as mmengine's Runner does: the library is imported by name, never by this package."""
    from mmengine.registry import MODELS, DefaultScope
    register_library(scope)
    with DefaultScope.overwrite_default_scope(scope):   # leaves the caller's scope alone
        return MODELS.build(cfg)


def build_config_model(config, cfg_options: Optional[dict] = None):
    """(model in eval mode on CPU, cfg) for a config path or a ``Config``; SyncBN -> BN."""
    from mmengine.model import revert_sync_batchnorm
    cfg = config if isinstance(config, Config) else Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    scope = cfg.get('default_scope')
    if scope not in LIBRARIES:
        raise ValueError(f"config default_scope must be 'mmdet' or 'mmseg', got {scope!r}")
    model = build_in_scope(cfg.model, scope)
    return revert_sync_batchnorm(model).eval(), cfg


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


def rank_zero_logger(cfg: Config) -> None:
    """mmengine's own ``LoggerHook`` becomes :class:`mmlinattn.engine.RankZeroLoggerHook`,
    so that a distributed test leaves one valid ``<timestamp>.json`` (see its docstring)."""
    hook = cfg.get('default_hooks', {}).get('logger')
    if hook is not None and hook.get('type') in ('LoggerHook', 'mmengine.LoggerHook'):
        hook['type'] = 'mmlinattn.RankZeroLoggerHook'


def use_safe_checkpoint_hook(cfg: Config) -> None:
    """mmengine's own ``CheckpointHook`` becomes :class:`mmlinattn.engine.SafeCheckpointHook`
    (same arguments), so that a failed save (disk full) keeps the previous checkpoint and
    ``last_checkpoint`` naming it; see its docstring."""
    from mmengine.hooks import CheckpointHook
    hook = cfg.get('default_hooks', {}).get('checkpoint')
    if hook is not None and hook.get('type') in ('CheckpointHook', 'mmengine.CheckpointHook',
                                                 CheckpointHook):
        hook['type'] = 'mmlinattn.SafeCheckpointHook'


#: Seconds a rank waits in a collective for the others (``env_cfg.dist_cfg.timeout``
#: overrides it).  A rank that dies is noticed by torchrun at once; this bounds the wait
#: for one that hangs.  It must exceed the longest stretch one rank works alone: rank 0's
#: metric computation (COCO evaluation) while the others wait for its result.
DIST_TIMEOUT_S = 600


def setup_launcher(cfg: Config, launcher: str) -> None:
    """Distributed set-up that also works without a GPU (gloo backend, CPU DDP), with a
    collective timeout of ``env_cfg.dist_cfg.timeout`` seconds (default
    :data:`DIST_TIMEOUT_S`)."""
    if launcher == 'none':
        return
    rank_zero_logger(cfg)
    env_cfg = cfg.setdefault('env_cfg', ConfigDict())
    dist_cfg = env_cfg.setdefault('dist_cfg', ConfigDict(backend='nccl'))
    timeout = dist_cfg.setdefault('timeout', DIST_TIMEOUT_S)  # mmengine's init_dist reads it
    if torch.cuda.is_available():
        return
    import torch.distributed as dist
    if not dist.is_initialized():
        # mmengine's init_dist calls torch.cuda.set_device, so start gloo ourselves.
        dist.init_process_group(backend='gloo', timeout=timedelta(seconds=timeout))
    cfg.model_wrapper_cfg = ConfigDict(type='MMDistributedDataParallel', device_ids=None)
    n = _replace_sync_bn(cfg.model)
    if n:
        print_log(f'CPU distributed run: replaced {n} SyncBN layer(s) by BN (SyncBN needs '
                  'CUDA)', logger='current')


def check_config_datasets(cfg: Config, split_keys, config: str = None,
                          command: str = None) -> None:
    """Stop with a readable message if a dataloader's files are missing.  ``command`` (how
    this run of ``config`` was started, e.g. ``python tools/train.py CONFIG``) becomes, in
    the message, the command that runs the config on the demo data."""
    demo_command = None
    if command is not None:
        demo_command = (f'{command} --cfg-options '
                        f'$(python tools/misc/demo_overrides.py {config})')
    problems = check_datasets(cfg, split_keys, demo_command)
    if problems:
        raise SystemExit('\n\n'.join(problems))


def check_config_channels(cfg: Config) -> None:
    """Stop before any data is loaded if a neck / head ``in_channels`` does not match the
    mmlinattn backbone's output channels."""
    problems = check_channels(cfg.get('model') or {})
    if problems:
        raise SystemExit('\n'.join(problems))


def warn_stuck_warmup(cfg: Config) -> None:
    """Warn about a LinearLR that spans one step: mmengine applies only its first value,
    so the LR stays at ``start_factor`` times the base for the rest of the run."""
    for s in cfg.get('param_scheduler') or []:
        if s.get('type') == 'LinearLR' and s.get('end', 2) - s.get('begin', 0) < 2:
            print_log(f'param_scheduler {dict(s)} spans one step, so the LR stays at '
                      f"start_factor={s.get('start_factor')} x base for the whole run; make "
                      'it end at least 2 steps after it begins', logger='current',
                      level=logging.WARNING)


def add_custom_hook(cfg: Config, hook: dict) -> None:
    """Append ``hook`` to ``custom_hooks`` unless a hook of its type is there already."""
    hooks = list(cfg.get('custom_hooks') or [])
    name = hook['type'].split('.')[-1]
    if not any(str(h.get('type', '')).split('.')[-1] == name for h in hooks):
        cfg.custom_hooks = hooks + [hook]


def resume_path(cfg: Config):
    """The checkpoint a ``resume=True`` config continues: ``load_from``, else the latest in
    the work dir (as mmengine picks it); None when there is none."""
    from mmengine.runner import find_latest_checkpoint
    path = cfg.get('load_from') or find_latest_checkpoint(cfg.work_dir)
    return path if path and osp.isfile(path) else None


#: what mmengine's ``Runner.resume`` reads besides the weights
RESUME_STATE = (('meta', 'epoch'), ('meta', 'iter'), ('message_hub', None))


def check_resumable(cfg: Config) -> None:
    """Stop with a readable message when ``--resume`` names a file without training state
    (a converted, published or ``load_from`` checkpoint): mmengine would fail inside its
    runner with ``KeyError: 'meta'`` (or ``'epoch'``)."""
    path = resume_path(cfg)
    if path is None:
        return
    ckpt = safe_load_checkpoint(path, mmap=True)
    ckpt = ckpt if isinstance(ckpt, dict) else {}
    lacks = [f'{key}.{sub}' if sub else key for key, sub in RESUME_STATE
             if not isinstance(ckpt.get(key), dict) or (sub and sub not in ckpt[key])]
    if lacks:
        raise SystemExit(
            f'--resume {path}: the file holds weights but no training state (it lacks '
            f'{", ".join(lacks)}): it was not written by a training run of tools/train.py, '
            f'so there is nothing to continue. To start a new run from its weights, use '
            f'load_from instead: --cfg-options load_from={path} (without --resume).')


def use_checkpoint_seed(cfg: Config) -> None:
    """Resume with the seed the interrupted run drew when the config sets none.

    mmengine would draw a new seed, build the data sampler with it, and only then re-seed
    from the checkpoint, after :class:`mmlinattn.RNGStateHook` restored the generators'
    states; the resumed run would not continue the interrupted one."""
    randomness = dict(cfg.get('randomness') or {})
    if randomness.get('seed') is not None:
        return
    path = resume_path(cfg)
    if path is None:
        return
    seed = (safe_load_checkpoint(path, mmap=True).get('meta') or {}).get('seed')
    if seed is not None:
        cfg.randomness = dict(randomness, seed=seed)
        print_log(f'resuming with the seed of {path}: {seed}', logger='current')


#: the least fraction of a model's parameters a ``load_from`` checkpoint of tools/train.py
#: must fill: a fine-tune with another class count leaves only the classifiers (a few per
#: cent) unfilled; under half, the run would mostly train from scratch
FINETUNE_MIN_MATCH = 0.5


def check_load_from(cfg: Config, allow_partial: bool = False) -> None:
    """A training run that starts from ``load_from`` (not a resume) reports the fraction of
    the model the checkpoint fills and refuses below :data:`FINETUNE_MIN_MATCH`."""
    if cfg.get('load_from') and not cfg.get('resume'):
        add_custom_hook(cfg, dict(type='mmlinattn.CheckpointMatchHook',
                                  min_match=FINETUNE_MIN_MATCH, allow_partial=allow_partial,
                                  purpose='train from a checkpoint that fills less than '
                                  'half of the model (a fine-tune with another class count '
                                  'still fills most of it)'))


def check_backbone_weights(cfg: Config) -> None:
    """Stop before anything is built when the backbone's ``init_cfg`` names a local file that
    does not exist, with how to make it.  A resumed or ``load_from`` run takes its backbone
    from that checkpoint, so there the missing file is only logged and not loaded."""
    backbone = (cfg.get('model') or {}).get('backbone') or {}
    init_cfg = backbone.get('init_cfg') or {}
    path = init_cfg.get('checkpoint') if init_cfg.get('type') == 'Pretrained' else None
    if not path or '://' in path or osp.isfile(path):
        return
    hint = weights_hint(backbone.get('type', ''), backbone.get('arch'), path, backbone)
    if cfg.get('resume') or cfg.get('load_from'):
        print_log(f'backbone init_cfg checkpoint {path!r} does not exist; not needed, the '
                  f'weights come from {cfg.get("load_from") or "the resumed checkpoint"}',
                  logger='current')
        backbone['init_cfg'] = None
        return
    raise SystemExit(f'This config fine-tunes ImageNet weights from {path!r}, which does not '
                     f'exist. {hint}')


@contextmanager
def exit_on_bad_checkpoint():
    """A checkpoint that is unsafe, corrupt, or does not fit the model ends the run with
    its message (exit status 1) instead of a traceback."""
    try:
        yield
    except (CheckpointMismatchError, CorruptCheckpointError, MissingCheckpointError,
            UnsafeCheckpointError) as err:
        raise SystemExit(f'{type(err).__name__}: {err}') from None


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


def enable_show(cfg, scope: str, show_dir, show: bool, wait_time: float) -> None:
    """Draw the predictions of a test run (``--show`` / ``--show-dir`` of mmdet's and mmseg's
    test tools): in a window for ``wait_time`` s each, and / or saved under ``show_dir``."""
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise SystemExit('--show / --show-dir need a `visualization` hook in default_hooks')
    hook['draw'] = True
    if scope == 'mmseg':
        hook['interval'] = 1  # mmseg's hook draws every 50th image by default
    if show:
        hook['show'] = True
        hook['wait_time'] = wait_time
    if not show_dir:
        return
    if scope == 'mmdet':
        hook['test_out_dir'] = show_dir
    else:
        cfg.visualizer['save_dir'] = show_dir
        vis_backends = cfg.visualizer.get('vis_backends') or []
        cfg.visualizer['vis_backends'] = vis_backends or [dict(type='LocalVisBackend')]


#: mmdet's default when a config has no ``tta_model``
DET_TTA_MODEL = dict(type='DetTTAModel',
                     tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5), max_per_img=100))
DET_FLIP_META = ('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor', 'flip',
                 'flip_direction')


def _det_flip_pipeline(test_pipeline):
    """The test pipeline with its packing step replaced by flipped + unflipped views."""
    views = [[dict(type='RandomFlip', prob=1.0), dict(type='RandomFlip', prob=0.0)],
             [dict(type='PackDetInputs', meta_keys=DET_FLIP_META)]]
    return copy.deepcopy(test_pipeline[:-1]) + [dict(type='TestTimeAug', transforms=views)]


def enable_tta(cfg, scope: str) -> None:
    """Wrap the model in the config's ``tta_model`` and test with its ``tta_pipeline``, as
    mmdet's and mmseg's test tools do."""
    dataset = cfg.test_dataloader.dataset
    if scope == 'mmdet':
        cfg.setdefault('tta_model', DET_TTA_MODEL)
        if 'tta_pipeline' not in cfg:
            leaf = dataset
            while 'dataset' in leaf:
                leaf = leaf['dataset']
            cfg.tta_pipeline = _det_flip_pipeline(leaf.pipeline)
    missing = [k for k in ('tta_model', 'tta_pipeline') if k not in cfg]
    if missing:
        raise SystemExit(f'--tta needs {" and ".join(missing)} in the config (mmseg\'s '
                         'default_runtime.py and dataset configs define them)')
    cfg.model = dict(cfg.tta_model, module=cfg.model)
    dataset.pipeline = cfg.tta_pipeline


__all__ = ['library_of', 'register_library', 'rank_zero_logger', 'use_safe_checkpoint_hook',
           'setup_launcher', 'check_config_datasets', 'check_config_channels',
           'warn_stuck_warmup', 'add_custom_hook', 'resume_path', 'check_resumable',
           'use_checkpoint_seed', 'FINETUNE_MIN_MATCH', 'check_load_from',
           'check_backbone_weights',
           'exit_on_bad_checkpoint', 'set_work_dir', 'env_is_cpu', 'close_process_group',
           'DIST_TIMEOUT_S', 'enable_show', 'enable_tta']
