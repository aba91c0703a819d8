"""The exported RetinaNet, Mask R-CNN and UperNet evaluated by mmdet's CocoMetric / mmseg's
IoUMetric through ``tools/test.py CONFIG model.onnx --backend onnxruntime|openvino``,
against the same weights run eagerly, on the demo data: the same metric within 0.1 points."""
import os.path as osp
import sys

import pytest
import torch
from mmengine.config import Config
from tool_runs import last_metrics, run

from mmlinattn.engine.runner import build_config_model
from mmlinattn.datasets.demo_overrides import cfg_option_words, demo_options
from mmlinattn.kernels.policy import COMPILE_ENV
from repo_paths import ROOT

pytestmark = pytest.mark.slow

# A zero score threshold: random weights would otherwise leave no detection to evaluate.
# No padding to a multiple of 32, so that eager and deployed see the same input (the
# deployed model runs each image at its own size).
# Points: mmdet reports mAP as a fraction, mmseg mIoU in percent.
CASES = [
    ('configs/demo/retinanet_nalaformer_pico_demo.py', ('coco/bbox_mAP', ), 0.001,
     {'model.test_cfg.score_thr': 0.0, 'model.data_preprocessor.pad_size_divisor': 1},
     'onnxruntime'),
    # three graphs (image -> RPN, the box and the mask RoI stages), proposals in Python;
    # the demo's narrow Mask R-CNN (the tiny config's graphs at a quarter of the cost)
    ('configs/demo/maskrcnn_ldn_pico_demo.py', ('coco/bbox_mAP', 'coco/segm_mAP'), 0.001,
     {'model.test_cfg.rcnn.score_thr': 0.0, 'model.data_preprocessor.pad_size_divisor': 1},
     'onnxruntime'),
    # OpenVINO with the image graph compiled per input size (--static-shapes); UperNet's
    # pyramid pooling and auxiliary head at the photo config's width, on the nut photos
    ('configs/photos/upernet_ldn_pico_nuts.py', ('mIoU', ), 0.1, {}, 'openvino'),
]


@pytest.fixture(scope='module')
def demo_root(tmp_path_factory):
    from make_demo_data import make_demo_data
    root = str(tmp_path_factory.mktemp('demo'))
    make_demo_data(root, num_train=1, num_val=3, layouts=('coco', 'ade'), logger=None)
    return root


@pytest.mark.parametrize('config,metrics,points,extra,runtime', CASES,
                         ids=[osp.basename(c[0]) for c in CASES])
def test_deployed_metric_equals_eager(config, metrics, points, extra, runtime, demo_root,
                                      tmp_path):
    options = demo_options(Config.fromfile(osp.join(ROOT, config)), 2, data_root=demo_root,
                           num_train=1)
    options.update(extra)
    words = cfg_option_words(options)
    torch.manual_seed(0)
    model, _ = build_config_model(osp.join(ROOT, config), options)
    ckpt, onnx_path = str(tmp_path / 'random.pth'), str(tmp_path / 'model.onnx')
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, ckpt)
    export = run([sys.executable, 'tools/deployment/pytorch2onnx.py', config, ckpt, '--out',
                  onnx_path, '--dynamic', '--verify', '200', '264', '--cfg-options', *words])
    assert 'max relative difference vs eager' in export.stdout, export.stdout
    if 'maskrcnn' in config:
        assert '(mask RoI stage): max relative difference' in export.stdout, export.stdout
    # NaLaFormer's eager run on the default path, its feature maps compiled (the suite
    # keeps ops eager elsewhere): a real tool run of the compiled forms, against ONNX
    env = {COMPILE_ENV: '1'} if 'nalaformer' in config else {}
    scores, dumps = {}, {}
    for backend, weights in (('pytorch', ckpt), (runtime, onnx_path)):
        work = tmp_path / backend
        detection = metrics[0].startswith('coco')
        out = ['--out', str(work / 'dets.pkl')] if detection else []
        static = ['--static-shapes'] if backend == 'openvino' else []
        run([sys.executable, 'tools/test.py', config, weights, '--backend', backend,
             '--work-dir', str(work), *out, *static, '--cfg-options', *words], env=env)
        scores[backend] = [last_metrics(work)[m] for m in metrics]
        dumps[backend] = work / 'dets.pkl'
    for eager, deployed in zip(scores['pytorch'], scores[runtime]):
        assert abs(eager - deployed) <= points, scores
    if detection:
        # random weights find nothing (mAP 0 both ways): compare the detections themselves
        import pickle
        eager, deployed = (pickle.load(open(dumps[b], 'rb')) for b in ('pytorch', runtime))
        assert len(eager) == len(deployed) == 3
        for a, b in zip(eager, deployed):
            sa, sb = (torch.as_tensor(r['pred_instances']['scores']) for r in (a, b))
            assert len(sa) > 0 and len(sa) == len(sb)
            assert torch.allclose(sa.sort().values, sb.sort().values, atol=1e-4)
            if 'masks' in a['pred_instances']:
                # RLE-encoded; random weights put many mask probabilities near the 0.5
                # threshold, so a 1e-6 difference flips the odd pixel: compare the areas
                from pycocotools import mask as mask_utils
                ea, da = (torch.tensor(sorted(mask_utils.area(r['pred_instances']['masks'])
                                              .tolist()), dtype=torch.float64) for r in (a, b))
                assert ea.sum() > 0 and len(ea) == len(da)
                torch.testing.assert_close(da, ea, rtol=0.02, atol=2.0)
    else:  # random weights still overlap some ground truth
        assert scores['pytorch'][0] > 0, scores
