"""Convert a detector / segmentor with mmdeploy (its public API; the same steps and flags as
mmdeploy's own ``tools/deploy.py``, which works equally once mmdeploy's repository is at
hand).

    python tools/deployment/mmdeploy_deploy.py DEPLOY_CFG MODEL_CFG CHECKPOINT IMG
        [--work-dir DIR] [--device cpu] [--test-img IMG ...] [--cfg-options k=v ...]

``DEPLOY_CFG``: one of ``configs/deploy/`` (or mmdeploy's own, e.g. its
``configs/mmdet/detection/detection_onnxruntime_dynamic.py``).  ``IMG`` is the image traced
at export.  Writes ``DIR/end2end.onnx`` and prints, for IMG and each ``--test-img`` (an
image of another size, which a dynamic graph must also run), how far the backend's
predictions are from the PyTorch model's, both through mmdeploy's own wrappers.  Evaluate
the result with ``tools/deployment/mmdeploy_test.py``.
"""
import argparse
import os
import os.path as osp
import sys

import torch
from mmengine.config import DictAction
from mmengine.logging import print_log

from mmlinattn.deployment.mmdeploy_api import load_configs, require_mmdeploy


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='convert a model with mmdeploy')
    parser.add_argument('deploy_cfg', help='mmdeploy deploy config (configs/deploy/)')
    parser.add_argument('model_cfg', help='detector / segmentor config')
    parser.add_argument('checkpoint', help='its weights')
    parser.add_argument('img', help='image traced at export')
    parser.add_argument('--work-dir', default='work_dirs/mmdeploy', help='output folder')
    parser.add_argument('--device', default='cpu', help='device of the conversion')
    parser.add_argument('--test-img', nargs='+', default=[],
                        help='more images (other sizes) to compare backend and PyTorch on')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of the model config')
    return parser.parse_args(argv)


def backend_files(deploy_cfg, work_dir: str):
    """The files mmdeploy's backend reads (``end2end.onnx`` for ONNX Runtime)."""
    from mmdeploy.utils import get_onnx_config
    return [osp.join(work_dir, get_onnx_config(deploy_cfg)['save_file'])]


def compare_outputs(deploy_cfg, model_cfg, checkpoint, files, images, device='cpu'):
    """``{image: difference}`` (:func:`_difference`) of both models' predictions through
    mmdeploy's task processor (its pre-processing, its wrappers), per image."""
    from mmdeploy.apis import build_task_processor
    task = build_task_processor(model_cfg, deploy_cfg, device)
    torch_model = task.build_pytorch_model(checkpoint)
    backend = task.build_backend_model(files, task.update_data_preprocessor)
    result = {}
    for img in images:
        outs = []
        for model in (torch_model, backend):
            inputs, _ = task.create_input(img, None, data_preprocessor=getattr(
                model, 'data_preprocessor', None))
            with torch.no_grad():
                outs.append(model.test_step(inputs)[0])
        result[img] = _difference(*outs)
    return result


def _difference(eager, deployed, top: int = 20) -> str:
    """How far the backend's prediction is from PyTorch's, independent of the order of tied
    detections: for detectors the largest difference of the score-sorted scores and the
    smallest IoU of PyTorch's ``top`` best boxes with a backend box of the same class; for
    segmentors the share of pixels whose class differs."""
    if hasattr(eager, 'pred_instances'):
        from torchvision.ops import box_iou
        a, b = eager.pred_instances, deployed.pred_instances
        n = min(len(a), len(b))
        if n == 0:
            return f'{len(a)} vs {len(b)} detections'
        sa, sb = a.scores.sort(descending=True)[0], b.scores.sort(descending=True)[0]
        score = float((sa[:n] - sb[:n]).abs().max())
        best = a.scores.argsort(descending=True)[:top]
        iou = box_iou(a.bboxes[best], b.bboxes)
        iou = iou.masked_fill(a.labels[best, None] != b.labels[None, :], 0).max(1)[0]
        return (f'{len(a)} vs {len(b)} detections, max score difference {score:.3g}, '
                f'min IoU of the top {len(best)} boxes {float(iou.min()):.4f}')
    a, b = eager.pred_sem_seg.data, deployed.pred_sem_seg.data
    return f'{float((a != b).float().mean()):.3%} of the pixels in another class'


def main(argv=None):
    args = parse_args(argv)
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    require_mmdeploy()
    from mmdeploy.apis import torch2onnx
    deploy_cfg, model_cfg = load_configs(args.deploy_cfg, args.model_cfg, args.cfg_options)
    for img in [args.img, *args.test_img]:
        if not osp.isfile(img):
            raise SystemExit(f'image {img!r} does not exist')
    if not osp.isfile(args.checkpoint):
        raise SystemExit(f'checkpoint {args.checkpoint!r} does not exist')
    os.makedirs(args.work_dir, exist_ok=True)
    files = backend_files(deploy_cfg, args.work_dir)
    torch2onnx(args.img, args.work_dir, osp.basename(files[0]), deploy_cfg=deploy_cfg,
               model_cfg=model_cfg, model_checkpoint=args.checkpoint, device=args.device)
    print_log(f'wrote {files[0]}', logger='current')
    for img, diff in compare_outputs(deploy_cfg, model_cfg, args.checkpoint, files,
                                     [args.img, *args.test_img], args.device).items():
        print(f'{img}: backend vs pytorch: {diff}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
