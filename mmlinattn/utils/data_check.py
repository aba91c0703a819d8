"""Check that the datasets a config points at exist, before a run starts.

A run pointed at a missing dataset should stop at once with the layout the dataset class
expects and the command that makes a demo copy, not with a stack trace from deep inside a
data loader minutes later.  Beyond the paths, a JSON annotation file is parsed and a sample
of the images it lists is looked up (for segmentation: a sample of the images and their
label maps), so a broken file or missing images fail in seconds, not at iteration N.
Works on the config alone: no mmdet / mmseg import.
"""
import json
import os
import os.path as osp
from typing import Iterable, List, Optional

from ..datasets.photos import PHOTO_ROOT, is_photo_root

DEMO_ROOT = 'data/demo/'
DEMO_HINT = ('No download is needed to try things out: '
             '`python tools/dataset_converters/make_demo_data.py` writes '
             f'small demo datasets in these layouts under {DEMO_ROOT}, and the configs in '
             'configs/demo/ run on them as they are.')

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


#: images looked up per dataset
SAMPLE_SIZE = 20
#: larger annotation files are not parsed here (mmdet parses them at start-up anyway)
MAX_PARSE_BYTES = 256 * 2**20
#: (image suffix, label-map suffix) of the segmentation datasets, as in mmseg
SEG_SUFFIXES = {'ADE20KDataset': ('.jpg', '.png'),
                'CityscapesDataset': ('_leftImg8bit.png', '_gtFine_labelTrainIds.png')}


def _sample(items: list) -> list:
    return items[::max(1, len(items) // SAMPLE_SIZE)][:SAMPLE_SIZE]


def _missing_files(paths: List[str], what: str) -> Optional[str]:
    missing = [p for p in paths if not osp.isfile(p)]
    if not missing:
        return None
    return (f'{len(missing)} of {len(paths)} sampled {what} do not exist, e.g. '
            f'{missing[:3]}')


def _check_json_ann(ann: str, img_dir: str) -> Optional[str]:
    """A COCO-style annotation file parses and the sampled images it lists exist."""
    if osp.getsize(ann) > MAX_PARSE_BYTES:
        return None
    try:
        with open(ann, encoding='utf-8') as f:
            data = json.load(f)
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        return f'ann_file {ann!r} is not valid JSON: {err}'
    images = data.get('images') if isinstance(data, dict) else None
    if not isinstance(images, list) or not images:
        return f"ann_file {ann!r} lists no images (no non-empty 'images' list)"
    names = [im.get('file_name', '') if isinstance(im, dict) else '' for im in images]
    return _missing_files([osp.join(img_dir, n) for n in _sample(names)],
                          f'images listed in {ann!r}')


def _check_seg_dirs(suffixes, img_dir: str, seg_dir: str) -> Optional[str]:
    """The image folder holds images, and the sampled ones have their label maps."""
    img_suffix, seg_suffix = suffixes
    images = sorted(osp.relpath(osp.join(d, f), img_dir) for d, _, files in os.walk(img_dir)
                    for f in files if f.endswith(img_suffix))
    if not images:
        return f'no *{img_suffix} images under {img_dir!r}'
    return _missing_files([osp.join(seg_dir, i[:-len(img_suffix)] + seg_suffix)
                           for i in _sample(images)], f'label maps (*{seg_suffix})')


def _check_contents(ds: dict, root: str) -> Optional[str]:
    ann = _join(root, ds.get('ann_file', '') or '')
    prefix = {k: _join(root, v) for k, v in (ds.get('data_prefix') or {}).items() if v}
    if ann.endswith('.json') and osp.isfile(ann):
        return _check_json_ann(ann, prefix.get('img', root))
    suffixes = SEG_SUFFIXES.get(ds.get('type'))
    if ds.get('img_suffix') and ds.get('seg_map_suffix'):  # stated in the config
        suffixes = (ds['img_suffix'], ds['seg_map_suffix'])
    if suffixes and 'img_path' in prefix and 'seg_map_path' in prefix:
        return _check_seg_dirs(suffixes, prefix['img_path'], prefix['seg_map_path'])
    return None


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


def _demo_hint(root: str, demo_command: Optional[str]) -> str:
    if is_photo_root(root):
        return (f'This config reads a photo set that ships with the repository in '
                f'{PHOTO_ROOT}/: run it from the repository root (or point data_root at that '
                'folder); `python tools/dataset_converters/make_photo_data.py` re-creates it '
                'from its source.')
    if (root.rstrip('/') + '/').startswith(DEMO_ROOT):
        return ('This config runs on the demo data: make it with '
                '`python tools/dataset_converters/make_demo_data.py`.')
    if demo_command is None:
        return DEMO_HINT
    return f'{DEMO_HINT} To run this config on them:\n  {demo_command}'


def check_datasets(cfg, split_keys=('train_dataloader', 'val_dataloader'),
                   demo_command: Optional[str] = None) -> List[str]:
    """Messages for every dataloader in ``split_keys`` whose files are missing or broken.

    ``demo_command``: the command that runs this config on the demo data, shown in the
    message of a missing COCO / ADE20K / Cityscapes dataset."""
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
            broken = None if missing else _check_contents(ds, root)
            if broken:
                problems.append(f'{key}: dataset {ds.get("type", "?")} under {root!r} is '
                                f'incomplete: {broken}')
            if missing:
                kind = ds.get('type', '?')
                layout = LAYOUTS.get(kind, f'the layout that {kind} expects')
                problems.append(f'{key}: dataset {kind} not found: missing '
                                f'{", ".join(missing)}.\nExpected {layout}\n'
                                f'Point data_root at your copy (e.g. --cfg-options '
                                f'{key}.dataset.data_root=/path/) or link it into data/.\n'
                                + _demo_hint(root, demo_command if kind in LAYOUTS else None))
    return problems
