"""Post-training int8 quantization (ONNX Runtime static QDQ, or OpenVINO's NNCF) of a graph
exported by ``tools/deployment/pytorch2onnx.py``, calibrated on the config's own images.

    python tools/deployment/quantize_onnx.py CONFIG MODEL.onnx --out MODEL.int8.onnx
        [--calib-images 200] [--split train] [--keep-float REGEX ...] [--float-depthwise]
        [--cfg-options k=v ...]
    python tools/deployment/quantize_onnx.py CONFIG MODEL.onnx --out MODEL.int8.xml \
        --quantizer nncf [--calib-images 200] [--split train] [--float-depthwise]

Only ``Conv``, ``MatMul`` and ``Gemm`` are quantized (int8 weights per output channel,
uint8 activations, min-max ranges over ``--calib-images`` images of the ``--split``
dataloader through the test pipeline); ``--keep-float`` keeps the matching nodes in float32
too, ``--float-depthwise`` the depthwise convolutions (for OpenVINO: NaLaFormer's run slower
in int8 there; ONNX Runtime runs them faster in int8).  Evaluate the result as any exported
graph: ``python tools/test.py CONFIG MODEL.int8.onnx --backend onnxruntime``.  One-stage detectors,
segmentors and backbones; a two-stage detector's RoI graphs are not quantized.

``--quantizer nncf``: OpenVINO's own quantizer (NNCF, default preset) on the same
calibration images instead, written as an OpenVINO IR (``.xml`` and ``.bin``) that only
OpenVINO runs (``tools/test.py CONFIG MODEL.int8.xml --backend openvino --static-shapes``).
NNCF chooses what to quantize (one scale per activation tensor, so the graph runs at any
size); ``--float-depthwise`` keeps the depthwise convolutions float there too.
"""
import argparse
import os.path as osp
import sys

from mmengine.config import DictAction

from mmlinattn.engine.runner import build_config_model
from mmlinattn.deployment.quantize import (KEEP_FLOAT, calibration_inputs, quantize_nncf,
                                           quantize_static)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='int8 post-training quantization')
    parser.add_argument('config', help='config the graph was exported from')
    parser.add_argument('model', help='float32 .onnx from tools/deployment/pytorch2onnx.py')
    parser.add_argument('--out', required=True,
                        help='path of the int8 .onnx (.xml with --quantizer nncf) to write')
    parser.add_argument('--calib-images', type=int, default=200,
                        help='calibration images (default 200)')
    parser.add_argument('--split', default='train', choices=('train', 'val', 'test'),
                        help='dataloader whose images calibrate (default train)')
    parser.add_argument('--keep-float', nargs='+', default=None, metavar='REGEX',
                        help="node names kept in float32 (default: the family's rule)")
    parser.add_argument('--quantizer', default='onnxruntime', choices=('onnxruntime', 'nncf'),
                        help="onnxruntime: a QDQ .onnx by this project's rule (default); "
                             "nncf: OpenVINO's NNCF, an OpenVINO IR .xml")
    parser.add_argument('--float-depthwise', action='store_true',
                        help='keep the depthwise convolutions in float32 (faster for '
                             'NaLaFormer and InfViT in OpenVINO, slower in ONNX Runtime)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    for path in (args.config, args.model):
        if not osp.isfile(path):
            raise SystemExit(f'{path!r} does not exist')
    if args.calib_images < 1:
        raise SystemExit('--calib-images must be at least 1')
    nncf = args.quantizer == 'nncf'
    if nncf and (args.keep_float is not None or not args.out.endswith('.xml')):
        raise SystemExit('--quantizer nncf chooses what stays float itself and writes an '
                         'OpenVINO IR: give --out MODEL.xml, without --keep-float')
    model, cfg = build_config_model(args.config, args.cfg_options)
    inputs = calibration_inputs(cfg, model, args.calib_images, args.split)
    if nncf:
        counts = quantize_nncf(args.model, args.out, inputs, args.float_depthwise)
        print(f'{args.out}: {counts["fake_quantize"]} FakeQuantize nodes (NNCF)')
        return 0
    family = type(getattr(model, 'backbone', model)).__name__
    keep = args.keep_float if args.keep_float is not None else KEEP_FLOAT.get(family, ())
    counts = quantize_static(args.model, args.out, inputs, keep_float=keep,
                             float_depthwise=args.float_depthwise)
    print(f'{args.out}: {counts["quantized"]} Conv/MatMul/Gemm nodes in int8, '
          f'{counts["kept_float"]} kept in float32 ({family}: {list(keep)})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
