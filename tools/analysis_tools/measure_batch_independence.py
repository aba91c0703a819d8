"""Measure how much one image's detections change when it is batched with a larger image.

    python tools/analysis_tools/measure_batch_independence.py [--families SOFT NaLaFormer ...]
        [--json OUT]

(The measurement is :mod:`benchlib.batch_independence`.)

For every family a real mmdet RetinaNet (the family's ``retinanet_*`` config, random init with
a fixed seed, ``score_thr=0``) runs ``test_step`` on one image alone and on the same image
batched with a larger one (mmdet pads to the largest image, then to a multiple of 32), once
without and once with the valid-region masking of ``mmlinattn.ValidRegionHook``
(``docs/advanced/batch_independence.md``).  mmdet's own ResNet-18 in the same detector is the
reference for what a convolutional backbone gives.  Reported per run (image 0 only):

* ``backbone``: max |difference| of the backbone maps inside the image's valid region,
  relative to the largest |value| there;
* ``head``: max |difference| of the RetinaNet classification logits over the anchors inside
  the valid region; ``head_interior``: the same more than ``--band`` cells away from the
  valid region's bottom / right edge (mmdet's FPN and head convolutions see the padding
  within that band, whatever the backbone);
* ``score``: max |difference| of the sorted top-100 detection scores, ``boxes``: fraction
  of the alone detections found in the batched ones (same label, every coordinate within
  0.01 px).
"""
import argparse
import json
import sys

import torch

from benchlib.batch_independence import CONFIGS, build_detector, detector_cfg, measure


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--families', nargs='+', default=list(CONFIGS))
    parser.add_argument('--size', type=int, nargs=2, default=(200, 264),
                        help='H W of the measured image (not multiples of 32)')
    parser.add_argument('--other', type=int, nargs=2, default=(320, 384),
                        help='H W of the larger image it is batched with')
    parser.add_argument('--band', type=int, default=6)
    parser.add_argument('--json', help='write the numbers here')
    args = parser.parse_args(argv)
    from mmlinattn.engine.valid_region_hook import enable_valid_region
    g = torch.Generator().manual_seed(0)
    img = torch.randint(0, 256, (3, *args.size), generator=g, dtype=torch.uint8)
    other = torch.randint(0, 256, (3, *args.other), generator=g, dtype=torch.uint8)
    results = {}
    for family in args.families:
        model = build_detector(detector_cfg(family))
        before = measure(model, img, other, args.band)
        enable_valid_region(model)
        after = measure(model, img, other, args.band)
        results[family] = dict(before=before, after=after)
        for name, r in (('before', before), ('after', after)):
            print(f'{family:12s} {name:6s} ' + '  '.join(f'{k} {v:.2e}' for k, v in r.items()),
                  flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
