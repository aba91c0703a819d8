"""Print the ``--cfg-options`` that point any detection / segmentation config at the demo
datasets (tools/dataset_converters/make_demo_data.py); see
:mod:`mmlinattn.datasets.demo_overrides` for what changes.

    python tools/misc/demo_overrides.py CONFIG [--iters N]
    python tools/train.py CONFIG --cfg-options $(python tools/misc/demo_overrides.py CONFIG)
"""
import argparse
import sys

from mmengine.config import Config

from mmlinattn.datasets.demo_overrides import (DEMO_ROOT, NUM_TRAIN, cfg_option_words,
                                               demo_options)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='print --cfg-options for the demo data')
    parser.add_argument('config')
    parser.add_argument('--iters', type=int, default=300,
                        help='approximate number of training iterations')
    parser.add_argument('--data-root', default=DEMO_ROOT)
    parser.add_argument('--num-train', type=int, default=NUM_TRAIN,
                        help='training images in the demo data (make_demo_data --num-train)')
    args = parser.parse_args(argv)
    from mmlinattn.utils.external_configs import prepare_external_configs
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    cfg = Config.fromfile(args.config)
    options = demo_options(cfg, args.iters, data_root=args.data_root,
                           num_train=args.num_train)
    print(' '.join(cfg_option_words(options)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
