"""Check that the datasets a config points at exist, before a run starts.

A run pointed at a missing dataset should stop at once with the layout the dataset class
expects and the command that makes a demo copy, not with a stack trace from deep inside a
data loader minutes later.  Beyond the paths, a JSON annotation file is parsed and a sample
of the images it lists is looked up (for segmentation: a sample of the images and their
label maps), so a broken file or missing images fail in seconds, not at iteration N.  Every
listed file's size is read (one stat each: an empty file stops OpenCV with "!buf.empty()",
naming no file), and the sampled ones' first bytes (a non-image file, e.g. a saved error
page).  A detection train set that its ``filter_cfg`` would empty is named too (mmengine
stops on it with "need at least one array to concatenate").
Works on the config alone: no mmdet / mmseg import.
"""
import json
import math
import os
import os.path as osp
from typing import Iterable, List, Optional, Tuple

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
#: first bytes of the formats OpenCV / Pillow read (JPEG, PNG, BMP, TIFF, GIF, JPEG 2000,
#: PNM, OpenEXR, Radiance HDR); WebP is RIFF....WEBP.  Anything else is reported.
IMAGE_MAGIC = (b'\xff\xd8\xff', b'\x89PNG\r\n\x1a\n', b'BM', b'II*\x00', b'MM\x00*',
               b'GIF8', b'\x00\x00\x00\x0cjP  ', b'\xffO\xffQ', b'P1', b'P2', b'P3', b'P4',
               b'P5', b'P6', b'P7', b'v/1\x01', b'#?')
BAD_FILE_FIX = ('Re-download or re-convert these files, or remove them (from the annotation '
                'file too, where the dataset has one).')


def _sample(items: list) -> list:
    return items[::max(1, len(items) // SAMPLE_SIZE)][:SAMPLE_SIZE]


def _missing_files(paths: List[str], what: str) -> Optional[str]:
    missing = [p for p in paths if not osp.isfile(p)]
    if not missing:
        return None
    return (f'{len(missing)} of {len(paths)} sampled {what} do not exist, e.g. '
            f'{missing[:3]}')


def _empty_files(paths: List[str], what: str) -> Optional[str]:
    """One stat per file: cheap enough for every file of a large dataset."""
    empty = []
    for p in paths:
        try:
            if os.stat(p).st_size == 0:
                empty.append(p)
        except OSError:  # missing: reported from the sample
            pass
    if not empty:
        return None
    return f'{len(empty)} of {len(paths)} {what} are empty (0 bytes), e.g. {empty[:3]}'


def _non_images(paths: List[str], what: str) -> Optional[str]:
    """Files whose first bytes are no image format's: read for the sample only (an open per
    file is slow on network storage, and mmcv names such a file when it fails to load it)."""
    bad = []
    for p in paths:
        try:
            with open(p, 'rb') as f:
                head = f.read(16)
        except OSError:
            continue
        webp = head[:4] == b'RIFF' and head[8:12] == b'WEBP'
        if head and not webp and not head.startswith(IMAGE_MAGIC):
            bad.append(f'{p!r} (starts with {head[:12]!r})')
    if not bad:
        return None
    return (f'{len(bad)} of {len(paths)} sampled {what} are not images (no JPEG / PNG / BMP '
            f'/ TIFF / WebP / GIF header), e.g. [{", ".join(bad[:3])}]')


def _file_problems(paths: List[str], what: str) -> List[str]:
    """Missing (sampled), empty (all) and non-image (sampled) files among ``paths``."""
    sample = _sample(paths)
    found = [_missing_files(sample, what), _empty_files(paths, what)]
    if not found[1]:  # an empty file would be counted again as a non-image
        found.append(_non_images(sample, what))
    found = [f for f in found if f]
    if any('are empty' in f or 'not images' in f for f in found):
        found.append(BAD_FILE_FIX)
    return found


def _load_json_ann(ann: str):
    """(parsed dict, None) or (None, the problem); (None, None) when too large to parse."""
    if osp.getsize(ann) > MAX_PARSE_BYTES:
        return None, None
    try:
        with open(ann, encoding='utf-8') as f:
            data = json.load(f)
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        return None, f'ann_file {ann!r} is not valid JSON: {err}'
    images = data.get('images') if isinstance(data, dict) else None
    if not isinstance(images, list) or not images:
        return None, f"ann_file {ann!r} lists no images (no non-empty 'images' list)"
    return data, None


def _check_json_images(data: dict, ann: str, img_dir: str) -> List[str]:
    """The images a COCO-style annotation file lists exist and are non-empty images."""
    names = [im.get('file_name', '') if isinstance(im, dict) else '' for im in data['images']]
    return _file_problems([osp.join(img_dir, n) for n in names], f'images listed in {ann!r}')


def _check_box_filter(data: dict, ann: str, ds: dict) -> Optional[str]:
    """mmdet's ``CocoDataset.filter_data`` on the parsed file: a train set it would empty.
    Without ``metainfo.classes`` every category counts (mmdet's default classes may count
    fewer), so this never reports a set that mmdet keeps."""
    fcfg = ds.get('filter_cfg') or {}
    if ds.get('test_mode') or not fcfg:
        return None
    empty_gt = bool(fcfg.get('filter_empty_gt', False))
    min_size = fcfg.get('min_size', 0) or 0
    images = [im for im in data['images'] if isinstance(im, dict)]
    anns = [a for a in data.get('annotations') or [] if isinstance(a, dict)]
    classes = (ds.get('metainfo') or {}).get('classes')
    cats = [c for c in data.get('categories') or [] if isinstance(c, dict)]
    cat_ids = {c.get('id') for c in cats if classes is None or c.get('name') in classes}
    with_box = {a.get('image_id') for a in anns if a.get('category_id') in cat_ids}
    kept = [im for im in images if not empty_gt or im.get('id') in with_box]

    def side(im):  # a missing size fails in mmdet itself, not here
        return min(im.get('width', math.inf), im.get('height', math.inf))

    if any(side(im) >= min_size for im in kept):
        return None
    n = len(images)
    listed = f'ann_file {ann!r} lists {n} images and {len(anns)} annotations'
    if not kept:
        if not anns:
            why = f'{listed}, so filter_cfg filter_empty_gt=True removes all {n}'
        elif classes is not None and not any(c.get('name') in classes for c in cats):
            why = (f'{listed}, but none of its categories {[c.get("name") for c in cats][:10]} '
                   f'is in metainfo classes {list(classes)[:10]}, so filter_cfg '
                   f'filter_empty_gt=True removes all {n}')
        else:
            why = (f'{listed}, but no annotation has the image_id of a listed image and a '
                   f'category of the dataset, so filter_cfg filter_empty_gt=True removes all '
                   f'{n}')
        fix = ('Point ann_file at the annotation file with the boxes, or set '
               'filter_cfg.filter_empty_gt=False to train on images without boxes.')
    else:
        big = max(kept, key=side)
        what = (f'filter_cfg filter_empty_gt=True keeps {len(kept)} '
                f'image{"s" * (len(kept) > 1)} with a box' if empty_gt
                else f'{listed}; filter_cfg keeps {len(kept)}')
        why = (f'{what}, and min_size={min_size} removes {"them" if len(kept) > 1 else "it"} '
               f'(the largest image{" with a box" * empty_gt} is {big.get("width")} x '
               f'{big.get("height")})')
        fix = f'Lower filter_cfg.min_size to at most {side(big)}.'
    return (f'no image is left: {why} (mmengine then stops with "need at least one array '
            f'to concatenate"). {fix}')


def _check_seg_dirs(suffixes, img_dir: str, seg_dir: str) -> List[str]:
    """The image folder holds images, and they have their label maps."""
    img_suffix, seg_suffix = suffixes
    images = sorted(osp.relpath(osp.join(d, f), img_dir) for d, _, files in os.walk(img_dir)
                    for f in files if f.endswith(img_suffix))
    if not images:
        return [f'no *{img_suffix} images under {img_dir!r}']
    found = _file_problems([osp.join(img_dir, i) for i in images], f'images (*{img_suffix})')
    seg_maps = [osp.join(seg_dir, i[:-len(img_suffix)] + seg_suffix) for i in images]
    found += _file_problems(seg_maps, f'label maps (*{seg_suffix})')
    if found.count(BAD_FILE_FIX) > 1:
        found.remove(BAD_FILE_FIX)
    return found


def _check_contents(ds: dict, root: str) -> Tuple[List[str], Optional[str]]:
    """(problems with the files, a train set that its filter_cfg empties)."""
    ann = _join(root, ds.get('ann_file', '') or '')
    prefix = {k: _join(root, v) for k, v in (ds.get('data_prefix') or {}).items() if v}
    if ann.endswith('.json') and osp.isfile(ann):
        data, problem = _load_json_ann(ann)
        if data is None:
            return [problem] if problem else [], None
        return (_check_json_images(data, ann, prefix.get('img', root)),
                _check_box_filter(data, ann, ds))
    suffixes = SEG_SUFFIXES.get(ds.get('type'))
    if ds.get('img_suffix') and ds.get('seg_map_suffix'):  # stated in the config
        suffixes = (ds['img_suffix'], ds['seg_map_suffix'])
    if suffixes and 'img_path' in prefix and 'seg_map_path' in prefix:
        return _check_seg_dirs(suffixes, prefix['img_path'], prefix['seg_map_path']), None
    return [], None


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
            broken, emptied = ([], None) if missing else _check_contents(ds, root)
            if broken:
                problems.append(f'{key}: dataset {ds.get("type", "?")} under {root!r} is '
                                f'incomplete: ' + '\n'.join(broken))
            if emptied:
                problems.append(f'{key}: dataset {ds.get("type", "?")} under {root!r}: '
                                f'{emptied}')
            if missing:
                kind = ds.get('type', '?')
                layout = LAYOUTS.get(kind, f'the layout that {kind} expects')
                problems.append(f'{key}: dataset {kind} not found: missing '
                                f'{", ".join(missing)}.\nExpected {layout}\n'
                                f'Point data_root at your copy (e.g. --cfg-options '
                                f'{key}.dataset.data_root=/path/) or link it into data/.\n'
                                + _demo_hint(root, demo_command if kind in LAYOUTS else None))
    return problems
