"""Train a detector or segmentor with an mmlinattn (or any OpenMMLab) config.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
                          [--auto-scale-lr] [--allow-partial] [--cfg-options k=v ...]
                          [--launcher pytorch]

The library (mmdet or mmseg) is chosen from the config's ``default_scope``.  A run that
starts from ``load_from`` reports the fraction of the model the checkpoint fills and stops
below half of the parameters unless ``--allow-partial`` is given; ``--resume`` needs a file
with training state.  Checkpoints are written so that a failed save keeps the previous one.
"""
import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.logging import print_log
from mmengine.runner import Runner

from mmlinattn.utils.checkpoint_schemes import install_safe_checkpoint_loading
from mmlinattn.utils.external_configs import prepare_external_configs
from mmlinattn.engine.runner import (add_custom_hook, check_backbone_weights,
                                    check_config_channels,
                                    check_config_datasets, check_load_from, check_resumable,
                                    close_process_group, env_is_cpu, exit_on_bad_checkpoint,
                                    library_of, register_library, set_work_dir, setup_launcher,
                                    use_checkpoint_seed, use_safe_checkpoint_hook,
                                    warn_stuck_warmup)


def parse_args():
    parser = argparse.ArgumentParser(description='Train a detector / segmentor')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument('--amp', action='store_true', default=False,
                        help='enable automatic-mixed-precision training (needs a GPU)')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate with the actual total batch size')
    parser.add_argument('--resume', nargs='?', type=str, const='auto',
                        help='resume from CKPT; without a path, from the latest checkpoint '
                        'in the work dir')
    parser.add_argument('--allow-partial', action='store_true',
                        help='start from a load_from checkpoint even when it fills less than '
                        'half of the model')
    parser.add_argument('--val-before-train', action='store_true',
                        help='validate the starting weights (initialisation, load_from or '
                        'the resumed checkpoint) before the first iteration, logged at 0')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, e.g. train_cfg.max_iters=100 '
                        'train_dataloader.batch_size=2')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main():
    args = parse_args()
    install_safe_checkpoint_loading()
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    if not osp.isfile(args.config):
        raise SystemExit(f'config file {args.config!r} does not exist')
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    scope = library_of(cfg)
    register_library(scope)
    set_work_dir(cfg, args.config, args.work_dir)
    if env_is_cpu():  # a slow machine shows its first iterations within a minute
        add_custom_hook(cfg, dict(type='mmlinattn.EarlyProgressHook', num_iters=10))

    if args.amp:
        if env_is_cpu():
            raise SystemExit('--amp needs a CUDA GPU (mmengine\'s AmpOptimWrapper uses '
                             'torch.cuda.amp); drop --amp to train in float32 on CPU')
        optim_wrapper = cfg.optim_wrapper.type
        if optim_wrapper == 'AmpOptimWrapper':
            print_log('AMP training is already enabled in your config.', logger='current')
        else:
            if optim_wrapper != 'OptimWrapper':
                raise SystemExit(f'--amp works with OptimWrapper, the config uses '
                                 f'{optim_wrapper}')
            cfg.optim_wrapper.type = 'AmpOptimWrapper'
            cfg.optim_wrapper.loss_scale = 'dynamic'

    if args.auto_scale_lr:
        if ('auto_scale_lr' in cfg and 'enable' in cfg.auto_scale_lr
                and 'base_batch_size' in cfg.auto_scale_lr):
            cfg.auto_scale_lr.enable = True
        else:
            raise SystemExit('--auto-scale-lr needs `auto_scale_lr = dict(enable=False, '
                             'base_batch_size=...)` in the config')

    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume

    if args.val_before_train:
        add_custom_hook(cfg, dict(type='mmlinattn.ValidateBeforeTrainHook'))
    # Store RNG states in checkpoints so that --resume continues the exact same run.
    add_custom_hook(cfg, dict(type='mmlinattn.RNGStateHook'))
    use_safe_checkpoint_hook(cfg)
    check_load_from(cfg, args.allow_partial)

    check_config_channels(cfg)
    check_config_datasets(cfg, ('train_dataloader', 'val_dataloader'),
                          args.config, f'python tools/train.py {args.config}')
    check_backbone_weights(cfg)
    warn_stuck_warmup(cfg)
    setup_launcher(cfg, args.launcher)
    with exit_on_bad_checkpoint():
        if cfg.get('resume'):
            check_resumable(cfg)
            use_checkpoint_seed(cfg)
        runner = Runner.from_cfg(cfg)
        runner.train()
    del runner  # its DDP wrapper holds the process group
    close_process_group()


if __name__ == '__main__':
    main()
