"""Evaluate a trained detector or segmentor.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE_OR_DIR]
                         [--show] [--show-dir DIR] [--wait-time S] [--tta]
                         [--allow-partial] [--cfg-options k=v ...] [--launcher pytorch]
    python tools/test.py CONFIG MODEL.onnx --backend onnxruntime|openvino [--static-shapes]
                         [--precision f32|bf16] [...]

The library (mmdet or mmseg) is chosen from the config's ``default_scope``.  ``--out``:
for mmdet a ``.pkl`` file of raw detections; for mmseg a directory of predicted label maps.
``--show-dir``: drawn predictions are written under ``<work_dir>/<timestamp>/<show_dir>``;
``--show``: shown in a window for ``--wait-time`` seconds each.  ``--tta``: test-time
augmentation (the config's ``tta_model`` / ``tta_pipeline``, as in mmdet's and mmseg's tools).
A checkpoint that fills less than 90 % of the model's parameters (another arch, another
model) or holds NaN / Inf weights stops the run with the match report, unless
``--allow-partial`` is given.  ``--backend onnxruntime|openvino``: evaluate a graph exported
by tools/deployment/pytorch2onnx.py instead (the config's pre- and post-processing around
it; for Faster / Mask R-CNN the RoI graphs written beside MODEL.onnx too;
:class:`mmlinattn.deployment.DeployedModel`).  ``--static-shapes`` (OpenVINO): compile the
image graph once per input size instead of once for all sizes.  ``--precision bf16``
(OpenVINO, CPUs with bf16 instructions): run the graphs in bfloat16 instead of float32.
"""
import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.runner import Runner

from mmlinattn.deployment.runtimes import PRECISIONS
from mmlinattn.utils.checkpoint_schemes import install_safe_checkpoint_loading
from mmlinattn.utils.external_configs import prepare_external_configs
from mmlinattn.engine.runner import (add_custom_hook, check_config_channels,
                                    check_config_datasets, close_process_group, enable_show,
                                    enable_tta, exit_on_bad_checkpoint, library_of,
                                    register_library, set_work_dir, setup_launcher)


def parse_args():
    parser = argparse.ArgumentParser(description='Test (and evaluate) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file (an .onnx file with --backend)')
    parser.add_argument('--backend', choices=['pytorch', 'onnxruntime', 'openvino'],
                        default='pytorch', help='run the model eagerly (default) or the '
                        'exported ONNX graph in ONNX Runtime / OpenVINO on the CPU')
    parser.add_argument('--static-shapes', action='store_true',
                        help='--backend openvino: compile the image graph once per input '
                        'size, H and W fixed (faster kernels, ~1-2 s per new size; for test '
                        'pipelines of few sizes, e.g. fixed-size resizes or slide windows)')
    parser.add_argument('--precision', choices=PRECISIONS, default='f32',
                        help='--backend openvino: the inference precision (bf16 on CPUs '
                        'with AVX512_BF16 or AMX only; OpenVINO itself defaults to bf16 '
                        'there, this tool to f32)')
    parser.add_argument('--work-dir', help='the directory to save the evaluation metrics')
    parser.add_argument('--out', help='mmdet: .pkl file for raw results; mmseg: directory '
                        'for predicted label maps')
    parser.add_argument('--show', action='store_true',
                        help='show painted predictions in a window (needs a display)')
    parser.add_argument('--show-dir', help='directory (relative to the work dir) where '
                        'painted predictions are saved')
    parser.add_argument('--wait-time', type=float, default=2,
                        help='seconds each --show window stays open')
    parser.add_argument('--tta', action='store_true',
                        help="test-time augmentation with the config's tta_model and "
                        'tta_pipeline (mmdet configs without them: horizontal flip)')
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


def main():
    args = parse_args()
    install_safe_checkpoint_loading()
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
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
    deployed = args.backend != 'pytorch'
    if args.static_shapes and args.backend != 'openvino':
        raise SystemExit('--static-shapes is an OpenVINO option (--backend openvino); ONNX '
                         'Runtime runs the graph as exported and PyTorch needs no shapes')
    if args.precision != 'f32' and args.backend != 'openvino':
        raise SystemExit(f'--precision {args.precision} is an OpenVINO option (--backend '
                         'openvino); ONNX Runtime and PyTorch run float32 here')
    if deployed:
        # OpenVINO also reads its own IR (.xml), as quantize_onnx.py --quantizer nncf writes
        graphs = ('.onnx', '.xml') if args.backend == 'openvino' else ('.onnx', )
        if not args.checkpoint.endswith(graphs) or args.tta:
            raise SystemExit(f'--backend {args.backend} evaluates an exported .onnx graph '
                             f'(got {args.checkpoint!r}) and has no --tta; export it with '
                             f'tools/deployment/pytorch2onnx.py {args.config} --out MODEL.onnx '
                             '--dynamic')
        cfg.load_from = None
    else:
        cfg.load_from = args.checkpoint
        add_custom_hook(cfg, dict(type='mmlinattn.CheckpointMatchHook',
                                  allow_partial=args.allow_partial))
    if args.show or args.show_dir:
        enable_show(cfg, scope, args.show_dir, args.show, args.wait_time)
    if args.tta:
        enable_tta(cfg, scope)
    if args.out and scope == 'mmseg':
        cfg.test_evaluator['output_dir'] = args.out
        cfg.test_evaluator['keep_results'] = True
    check_config_channels(cfg)
    check_config_datasets(cfg, ('test_dataloader', ), args.config,
                          f'python tools/test.py {args.config} {args.checkpoint}')
    setup_launcher(cfg, args.launcher)
    runner = Runner.from_cfg(cfg)
    if deployed:
        from mmlinattn.deployment import DeployedModel
        runner.model = DeployedModel(runner.model, args.checkpoint, args.backend,
                                     static_shapes=args.static_shapes,
                                     precision=args.precision)
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
