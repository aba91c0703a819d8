"""Check that the datasets a config points at exist, before a run starts.

A run pointed at a missing dataset should stop at once with the layout the dataset class
expects and the command that makes a demo copy, not with a stack trace from deep inside a
data loader minutes later.  Works on the config alone: no mmdet / mmseg import.
"""
import os.path as osp
from typing import Iterable, List

DEMO_HINT = ('No download is needed to try things out: `python tools/make_demo_data.py` writes '
             'small demo datasets in these layouts under data/demo/, and the `*_demo.py` '
             'configs (or --cfg-options with data_root=data/demo/...) use them.')

LAYOUTS = {
    'CocoDataset': ('COCO layout under data_root (default data/coco/):\n'
                    '  annotations/instances_train2017.json, annotations/instances_val2017.json\n'
                    '  train2017/*.jpg, val2017/*.jpg'),
    'ADE20KDataset': ('ADE20K layout under data_root (default data/ade/ADEChallengeData2016/):\n'
                      '  images/training/*.jpg, images/validation/*.jpg\n'
                      '  annotations/training/*.png, annotations/validation/*.png '
                      '(uint8, 0 = other, 1..150 = classes)'),
    'CityscapesDataset': ('Cityscapes layout under data_root (default data/cityscapes/):\n'
                          '  leftImg8bit/{train,val}/<city>/*_leftImg8bit.png\n'
                          '  gtFine/{train,val}/<city>/*_gtFine_labelTrainIds.png (make them with '
                          "mmseg's tools/dataset_converters/cityscapes.py)"),
}


def _leaf_datasets(ds) -> Iterable[dict]:
    """Unwrap RepeatDataset / ConcatDataset / MultiImageMixDataset style wrappers."""
    if not isinstance(ds, dict):
        return
    if 'datasets' in ds:
        for d in ds['datasets']:
            yield from _leaf_datasets(d)
    elif 'dataset' in ds:
        yield from _leaf_datasets(ds['dataset'])
    else:
        yield ds


def _join(root: str, path: str) -> str:
    return path if not root or osp.isabs(path) else osp.join(root, path)


def check_datasets(cfg, split_keys=('train_dataloader', 'val_dataloader')) -> List[str]:
    """Messages for every dataloader in ``split_keys`` whose files are missing."""
    problems = []
    for key in split_keys:
        loader = cfg.get(key)
        if not loader or 'dataset' not in loader:
            continue
        for ds in _leaf_datasets(loader['dataset']):
            root = ds.get('data_root', '') or ''
            missing = []
            if root and not osp.isdir(root):
                missing.append(f'data_root {root!r}')
            else:
                ann = ds.get('ann_file', '')
                if ann and not osp.exists(_join(root, ann)):
                    missing.append(f'ann_file {_join(root, ann)!r}')
                for name, path in (ds.get('data_prefix') or {}).items():
                    if path and not osp.isdir(_join(root, path)):
                        missing.append(f'data_prefix.{name} {_join(root, path)!r}')
            if missing:
                kind = ds.get('type', '?')
                layout = LAYOUTS.get(kind, f'the layout that {kind} expects')
                problems.append(f'{key}: dataset {kind} not found: missing '
                                f'{", ".join(missing)}.\nExpected {layout}\n'
                                f'Point data_root at your copy (e.g. --cfg-options '
                                f'{key}.dataset.data_root=/path/) or link it into data/.\n'
                                f'{DEMO_HINT}')
    return problems
