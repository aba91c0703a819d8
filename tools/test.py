"""Evaluate a trained detector or segmentor.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE_OR_DIR]
                         [--show-dir DIR] [--allow-partial] [--cfg-options k=v ...]
                         [--launcher pytorch]

The library (mmdet or mmseg) is chosen from the config's ``default_scope``.  ``--out``:
for mmdet a ``.pkl`` file of raw detections; for mmseg a directory of predicted label maps.
``--show-dir``: drawn predictions are written under ``<work_dir>/<timestamp>/<show_dir>``.
A checkpoint that fills less than 90 % of the model's parameters (another arch, another
model) or holds NaN / Inf weights stops the run with the match report, unless
``--allow-partial`` is given.
"""
import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.runner import Runner

from runner_utils import (add_custom_hook, check_config_datasets, close_process_group,
                          exit_on_bad_checkpoint, library_of, register_library, set_work_dir,
                          setup_launcher)


def parse_args():
    parser = argparse.ArgumentParser(description='Test (and evaluate) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the directory to save the evaluation metrics')
    parser.add_argument('--out', help='mmdet: .pkl file for raw results; mmseg: directory '
                        'for predicted label maps')
    parser.add_argument('--show-dir', help='directory (relative to the work dir) where '
                        'painted predictions are saved')
    parser.add_argument('--allow-partial', action='store_true',
                        help='evaluate even if the checkpoint fills less than 90%% of the '
                        "model's parameters (the rest stays randomly initialised)")
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def enable_show(cfg, scope: str, show_dir: str) -> None:
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise SystemExit('--show-dir needs a `visualization` hook in default_hooks')
    hook['draw'] = True
    if scope == 'mmdet':
        hook['test_out_dir'] = show_dir
    else:
        hook['interval'] = 1
        cfg.visualizer['save_dir'] = show_dir
        vis_backends = cfg.visualizer.get('vis_backends') or []
        cfg.visualizer['vis_backends'] = vis_backends or [dict(type='LocalVisBackend')]


def main():
    args = parse_args()
    for path, what in ((args.config, 'config'), (args.checkpoint, 'checkpoint')):
        if not osp.isfile(path):
            raise SystemExit(f'{what} file {path!r} does not exist')
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    scope = library_of(cfg)
    register_library(scope)
    set_work_dir(cfg, args.config, args.work_dir)
    cfg.load_from = args.checkpoint
    add_custom_hook(cfg, dict(type='mmlinattn.CheckpointMatchHook',
                              allow_partial=args.allow_partial))
    if args.show_dir:
        enable_show(cfg, scope, args.show_dir)
    if args.out and scope == 'mmseg':
        cfg.test_evaluator['output_dir'] = args.out
        cfg.test_evaluator['keep_results'] = True
    check_config_datasets(cfg, ('test_dataloader', ))
    setup_launcher(cfg, args.launcher)
    runner = Runner.from_cfg(cfg)
    if args.out and scope == 'mmdet':
        if not args.out.endswith(('.pkl', '.pickle')):
            raise SystemExit(f'--out must be a .pkl file for mmdet configs, got {args.out!r}')
        from mmdet.evaluation import DumpDetResults
        runner.test_evaluator.metrics.append(DumpDetResults(out_file_path=args.out))
    with exit_on_bad_checkpoint():
        runner.test()
    del runner  # its DDP wrapper holds the process group
    close_process_group()


if __name__ == '__main__':
    main()
