"""Run a trained checkpoint on one image with mmdet's ``DetInferencer`` or mmseg's
``MMSegInferencer`` (picked by the config's ``default_scope``), save the picture of its
predictions and print the Python lines that do the same.

    python demo/image_demo.py CONFIG CHECKPOINT [IMAGE] [--out-dir DIR] [--score-thr T]

Without IMAGE, the first image of the config's test set is used.  The checkpoint must carry
the class names in ``meta['dataset_meta']``; mmengine's runner stores them when it saves.
"""
import argparse
import contextlib
import glob
import logging
import os.path as osp
import warnings

from mmengine.config import Config

from mmlinattn.engine.runner import library_of
from mmlinattn.utils.checkpoint_schemes import install_safe_checkpoint_loading
from mmlinattn.utils.external_configs import prepare_external_configs

INFERENCERS = {'mmdet': ('mmdet.apis', 'DetInferencer'),
               'mmseg': ('mmseg.apis', 'MMSegInferencer')}


def first_test_image(cfg: Config) -> str:
    from mmengine.registry import DATASETS, init_default_scope
    init_default_scope(cfg.default_scope)
    dataset = DATASETS.build(cfg.test_dataloader.dataset)
    return dataset.get_data_info(0)['img_path']


def _not_registry_fallback(record: logging.LogRecord) -> bool:
    """mmdet and mmseg define no "function" registry, so mmengine's inferencer warns that it
    falls back to its own when it looks up the collate function; that fallback is the
    intended one (``pseudo_collate``)."""
    msg = str(record.msg)
    return not (msg.startswith('Failed to search registry with scope')
                and '"function" registry' in msg)


@contextlib.contextmanager
def without_inferencer_notices():
    """Build an inferencer without two notices every mmdet / mmseg inferencer prints and a
    user cannot act on: the registry fallback above, and the config's ``LocalVisBackend``
    having no ``save_dir`` (the inferencer writes its pictures to ``out_dir`` itself)."""
    from mmengine.logging import MMLogger
    logger, notice = MMLogger.get_current_instance(), _not_registry_fallback
    logger.addFilter(notice)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message=r'Failed to add .*LocalVisBackend')
            yield
    finally:
        logger.removeFilter(notice)


def usage_lines(scope: str, config: str, checkpoint: str, out_dir: str) -> str:
    module, name = INFERENCERS[scope]
    return (f'from {module} import {name}\n'
            f"inferencer = {name}(model='{config}', weights='{checkpoint}', device='cpu')\n"
            f"inferencer('your_image.jpg', out_dir='{out_dir}')")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config')
    parser.add_argument('checkpoint')
    parser.add_argument('image', nargs='?')
    parser.add_argument('--out-dir', default=None,
                        help='where the picture goes (default: next to the checkpoint)')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detection: lowest score of a drawn box')
    parser.add_argument('--device', default='cpu')
    args = parser.parse_args()
    install_safe_checkpoint_loading()
    prepare_external_configs()  # mmdet:: / mmseg:: bases on either stack, each index read once
    cfg = Config.fromfile(args.config)
    scope = library_of(cfg)
    image = args.image or first_test_image(cfg)
    out_dir = args.out_dir or osp.join(osp.dirname(args.checkpoint), 'inference')

    module, name = INFERENCERS[scope]
    inferencer_cls = getattr(__import__(module, fromlist=[name]), name)
    with without_inferencer_notices():
        inferencer = inferencer_cls(model=args.config, weights=args.checkpoint,
                                    device=args.device)
    kwargs = dict(pred_score_thr=args.score_thr) if scope == 'mmdet' else {}
    inferencer(image, out_dir=out_dir, **kwargs)

    stem = osp.splitext(osp.basename(image))[0]
    pictures = sorted(glob.glob(osp.join(out_dir, 'vis', stem + '.*')))
    if not pictures:
        raise SystemExit(f'{name} wrote no picture under {out_dir}/vis')
    classes = inferencer.model.dataset_meta.get('classes')
    print(f'classes from the checkpoint: {", ".join(classes)}')
    print(f'predictions on {image}: {pictures[0]}')
    print('Use the trained model from Python:\n')
    print(usage_lines(scope, args.config, args.checkpoint, out_dir))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
