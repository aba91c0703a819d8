"""Evaluate a model converted by mmdeploy with the model config's own test set and metric
(mmdeploy's public API; the same steps and flags as mmdeploy's ``tools/test.py``).

    python tools/deployment/mmdeploy_test.py DEPLOY_CFG MODEL_CFG --model FILE [FILE ...]
        [--work-dir DIR] [--device cpu] [--batch-size 1] [--cfg-options k=v ...]

``--model``: what ``tools/deployment/mmdeploy_deploy.py`` wrote (``DIR/end2end.onnx``).  The
metrics are logged by mmengine as in ``tools/test.py`` and kept in the run's folder under
``--work-dir``; compare them with ``python tools/test.py MODEL_CFG CHECKPOINT``, the same
weights run eagerly.
"""
import argparse
import os.path as osp
import sys
from copy import deepcopy

from mmengine.config import DictAction

from mmlinattn.deployment.mmdeploy_api import load_configs, require_mmdeploy


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='evaluate an mmdeploy backend model')
    parser.add_argument('deploy_cfg', help='mmdeploy deploy config (configs/deploy/)')
    parser.add_argument('model_cfg', help='detector / segmentor config')
    parser.add_argument('--model', nargs='+', required=True, help='backend model file(s)')
    parser.add_argument('--work-dir', default='work_dirs/mmdeploy_test',
                        help='folder of the logs and metrics')
    parser.add_argument('--device', default='cpu', help='device of the backend')
    parser.add_argument('--batch-size', type=int, default=1, help='test batch size')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of the model config')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    require_mmdeploy()
    from mmdeploy.apis import build_task_processor
    for f in args.model:
        if not osp.isfile(f):
            raise SystemExit(f'backend model {f!r} does not exist; convert it first with '
                             f'tools/deployment/mmdeploy_deploy.py')
    deploy_cfg, model_cfg = load_configs(args.deploy_cfg, args.model_cfg, args.cfg_options)
    task = build_task_processor(model_cfg, deploy_cfg, args.device)
    loader = deepcopy(model_cfg['test_dataloader'])
    loader['batch_size'] = args.batch_size
    loader['dataset'] = task.build_dataset(loader['dataset'])
    dataloader = task.build_dataloader(loader)
    model = task.build_backend_model(args.model, task.update_data_preprocessor)
    runner = task.build_test_runner(model, args.work_dir, dataloader=dataloader)
    metrics = runner.test()
    model.destroy()
    return 0 if metrics else 1


if __name__ == '__main__':
    sys.exit(main())
