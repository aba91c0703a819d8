"""Write small, deterministic demo datasets in the COCO, ADE20K and Cityscapes layouts.

    python tools/dataset_converters/make_demo_data.py [--out data/demo] [--num-train 64]
        [--num-val 16] [--seed 0] [--layouts coco ade cityscapes] [--force]

Roots for configs: ``<out>/coco/``, ``<out>/ade/ADEChallengeData2016/``, ``<out>/cityscapes/``.
Class names: ``mmlinattn.datasets.DEMO_CLASSES``.  A second run with the same arguments only
checks ``<out>/demo_manifest.json`` and returns.
"""
import argparse
import time

from mmengine.logging import MMLogger, print_log

from mmlinattn.datasets.demo import DEMO_CLASSES, LAYOUTS, make_demo_data


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', default='data/demo', help='output directory')
    parser.add_argument('--num-train', type=int, default=64, help='training images')
    parser.add_argument('--num-val', type=int, default=16, help='validation images')
    parser.add_argument('--seed', type=int, default=0, help='base random seed')
    parser.add_argument('--layouts', nargs='+', choices=LAYOUTS, default=list(LAYOUTS),
                        help='dataset layouts to write')
    parser.add_argument('--force', action='store_true',
                        help='rewrite even if the manifest says the data is up to date')
    return parser


def main(argv=None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    logger = MMLogger.get_instance('mmlinattn_demo_data', log_level='INFO')
    start = time.perf_counter()
    try:
        result = make_demo_data(args.out, num_train=args.num_train, num_val=args.num_val,
                                seed=args.seed, layouts=args.layouts, force=args.force,
                                logger=logger)
    except (ValueError, FileExistsError) as e:
        parser.error(str(e))  # exits with status 2 and the usage line
    print_log(f'demo data ready in {time.perf_counter() - start:.1f}s under {args.out} '
              f'(classes: {", ".join(DEMO_CLASSES)})', logger)
    return result


if __name__ == '__main__':
    main()
