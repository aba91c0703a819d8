"""Parameters and FLOPs of a whole detector or segmentor built from a config.

    python tools/analysis_tools/get_flops.py CONFIG [--shape H [W]] [--real] [--timeout S]
                                             [--json OUT]

What is counted: the inference forward of backbone + neck + heads on one dummy image of
``H x W`` (default: 800x1280 for COCO, 512x512 for ADE20K, 1024x2048 for Cityscapes) -- for
a segmentor the backbone, neck and decode head (the auxiliary head only trains); for a
single-stage detector backbone, neck and bbox head; for a two-stage detector also the RPN
head and the RoI heads on ``test_cfg.rpn.max_per_img`` proposals (mmdet's ``_forward`` feeds
the first 100 to the mask head).  No data preprocessing, no post-processing (NMS).

How: ``torch.utils.flop_counter.FlopCounterMode`` counts every matmul / einsum / convolution
(2 FLOPs per multiply-add; norms, softmax and element-wise ops are not counted); the part
spent in SOFT++'s Newton-Schulz iterations is also reported on its own.  We print
**MACs** (that count / 2), which is what papers, mmcv and fvcore call "FLOPs".  By default the
forward runs on fake tensors (``torch._subclasses.FakeTensorMode``): every operator runs its
shape logic but computes nothing, so a Cityscapes-size count takes seconds and no memory;
the count equals a real run's (tests/tools/test_get_flops.py checks it).  ``--real`` runs the
real forward (on ``--device``), under a time limit.  The RoI heads always run for real on
small feature maps (mmcv's RoIAlign has no fake-tensor kernel; their cost does not depend
on the image size, only on the number of proposals).

Needs no weights and downloads nothing (``init_cfg`` / ``pretrained`` are never loaded).
The measuring code is :mod:`benchlib.model_flops`.
"""
import argparse
import json
import math
import sys
from typing import Optional, Sequence, Tuple

from benchlib.model_flops import MeasureError, format_report, measure_model, standard_shape
from mmlinattn.engine.runner import build_config_model


def parse_shape(values: Optional[Sequence[int]], cfg) -> Tuple[int, int]:
    if not values:
        return standard_shape(cfg)
    if len(values) == 1:
        return values[0], values[0]
    if len(values) == 2:
        return values[0], values[1]
    raise ValueError(f'--shape takes H or H W, got {list(values)}')


def main(argv=None) -> int:
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description='params and FLOPs of a detector / segmentor')
    parser.add_argument('config')
    parser.add_argument('--shape', type=int, nargs='+', metavar='H W',
                        help='input height and width (one value: square); default: the '
                        "dataset's standard size (COCO 800x1280, ADE20K 512x512, Cityscapes "
                        '1024x2048)')
    parser.add_argument('--real', action='store_true',
                        help='run the real forward instead of fake tensors')
    parser.add_argument('--device', default='cpu', help='device for --real')
    parser.add_argument('--timeout', type=float, default=None,
                        help='give up after this many seconds (reported, not a crash)')
    parser.add_argument('--json', help='also write the numbers to this JSON file')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    args = parser.parse_args(argv)
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    model, cfg = build_config_model(args.config, args.cfg_options)
    shape = parse_shape(args.shape, cfg)
    if min(shape) < 32 or any(not math.isfinite(s) for s in shape):
        parser.error(f'--shape must be at least 32x32, got {shape}')
    try:
        result = measure_model(model, shape, real=args.real, device=args.device,
                               timeout=args.timeout)
    except MeasureError as err:
        print(f'{args.config}: {err}', file=sys.stderr)
        if args.json:
            with open(args.json, 'w') as f:
                json.dump(dict(config=args.config, height=shape[0], width=shape[1],
                               error=str(err)), f, indent=1)
        return 2
    print(format_report(args.config, result))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(config=args.config, **result), f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
