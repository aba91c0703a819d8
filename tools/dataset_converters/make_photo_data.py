"""Re-create the reduced photo sets in ``data/photos/`` from their source repositories.

    git clone https://github.com/EdjeElectronics/TensorFlow-Object-Detection-API-Tutorial-Train-Multiple-Objects-Windows-10 /tmp/cards
    git clone https://github.com/Shenggan/BCCD_Dataset /tmp/bccd
    git clone https://github.com/Tony607/mmdetection_instance_segmentation_demo /tmp/nuts
    python tools/dataset_converters/make_photo_data.py cards=/tmp/cards bccd=/tmp/bccd \
        nuts=/tmp/nuts [--out data/photos] [--long-side N]

Each ``NAME=PATH`` names a set (cards, bccd, nuts) and a checkout of its source; the set is
rewritten under ``<out>/NAME/`` with a ``source.json`` record (source, commit, licence,
counts).  The copies in the repository were written by this command (see data/photos/README.md).

The sets (openly licensed; each copy ships with its source's licence), in the layouts
OpenMMLab reads:

- ``cards``: phone photos of playing cards, 6 classes (ace, jack, king, nine, queen, ten),
  Pascal VOC boxes, the source's own train/test split.  Apache-2.0.
  https://github.com/EdjeElectronics/TensorFlow-Object-Detection-API-Tutorial-Train-Multiple-Objects-Windows-10
  (folder ``images/``).
- ``bccd``: blood-smear microscope images, 3 classes (RBC, WBC, Platelets), many small dense
  boxes, the source's train/val/test split.  MIT.  https://github.com/Shenggan/BCCD_Dataset
  (folder ``BCCD/``).
- ``nuts``: photos of dates, figs and hazelnuts with COCO polygons (instance masks), plus the
  same masks as semantic label maps (0 = background, ``k`` = category ``k``).  MIT.
  https://github.com/Tony607/mmdetection_instance_segmentation_demo (folder ``data/``).

Every image is resized so that its long side is ``long_side`` pixels (area interpolation,
never enlarged) and re-encoded as JPEG; boxes and polygons are scaled by the same factor.
VOC corner coordinates are taken as pixel-edge coordinates (``[xmin, ymin, xmax - xmin,
ymax - ymin]``), clipped to the image; a box that is empty after clipping is dropped and
counted.  Layout of one set under ``out/<name>/``::

    images/<split>/<stem>.jpg
    annotations/instances_<split>.json      COCO (category ids 1..K in class order)
    labels/<split>/<stem>.png               semantic label maps (nuts only)

The conversion needs numpy and OpenCV.  The tests import it from this folder (pyproject's
pytest ``pythonpath``).
"""  # noqa: E501
import argparse
import json
import os
import os.path as osp
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from typing import Dict, List, Sequence, Tuple

import cv2
import numpy as np
from mmengine.logging import MMLogger, print_log

from mmlinattn.datasets.photos import PHOTO_ROOT, PHOTO_SETS

JPEG_QUALITY = 80
#: nuts has one annotation file for all 18 photos: every fourth (id % 4 == 3) is held out.
NUTS_VAL_EVERY = 4


def read_voc(path: str) -> Tuple[str, List[Tuple[str, float, float, float, float]]]:
    """``(filename, [(class, xmin, ymin, xmax, ymax), ...])`` of one Pascal VOC XML file."""
    root = ET.parse(path).getroot()
    objects = []
    for obj in root.iter('object'):
        box = obj.find('bndbox')
        coords = [float(box.find(k).text) for k in ('xmin', 'ymin', 'xmax', 'ymax')]
        objects.append((obj.find('name').text.strip(), *coords))
    return root.find('filename').text.strip(), objects


def resize_photo(path: str, long_side: int) -> Tuple[np.ndarray, float]:
    """The image at ``path`` (BGR) with its long side at most ``long_side``, and the scale."""
    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(f'cannot decode the image {path}')
    h, w = img.shape[:2]
    scale = min(1.0, long_side / max(h, w))
    if scale < 1.0:
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        img = cv2.resize(img, size, interpolation=cv2.INTER_AREA)
    return img, scale


def _write_jpeg(path: str, img: np.ndarray) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    if not cv2.imwrite(path, img, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]):
        raise OSError(f'could not write {path}')


class _CocoWriter:
    """Collects the images and annotations of one split and writes its COCO file."""

    def __init__(self, classes: Sequence[str]):
        self.classes = tuple(classes)
        self.images: List[dict] = []
        self.annotations: List[dict] = []
        self.dropped = 0

    def add_image(self, file_name: str, img: np.ndarray) -> int:
        image_id = len(self.images) + 1
        self.images.append(dict(id=image_id, file_name=file_name, height=int(img.shape[0]),
                                width=int(img.shape[1])))
        return image_id

    def add_box(self, image_id: int, label: str, box: Sequence[float], scale: float,
                segmentation=None, area=None) -> None:
        info = self.images[image_id - 1]
        limits = (info['width'], info['height']) * 2
        x1, y1, x2, y2 = (float(np.clip(v * scale, 0, lim)) for v, lim in zip(box, limits))
        if x2 - x1 < 1 or y2 - y1 < 1:
            self.dropped += 1
            return
        ann = dict(id=len(self.annotations) + 1, image_id=image_id,
                   category_id=self.classes.index(label) + 1,
                   bbox=[round(x1, 2), round(y1, 2), round(x2 - x1, 2), round(y2 - y1, 2)],
                   area=round(area if area is not None else (x2 - x1) * (y2 - y1), 2),
                   iscrowd=0)
        if segmentation is not None:
            ann['segmentation'] = segmentation
        self.annotations.append(ann)

    def write(self, path: str) -> dict:
        os.makedirs(osp.dirname(path), exist_ok=True)
        cats = [dict(id=i + 1, name=c, supercategory=c) for i, c in enumerate(self.classes)]
        with open(path, 'w') as f:
            json.dump(dict(images=self.images, annotations=self.annotations, categories=cats),
                      f, separators=(',', ':'))
        return dict(images=len(self.images), boxes=len(self.annotations),
                    dropped_boxes=self.dropped)


def _voc_split(classes, out: str, split: str, items: List[Tuple[str, str]],
               long_side: int) -> dict:
    """Convert ``items`` = [(image path, xml path)] into ``out/images/<split>`` + COCO."""
    coco = _CocoWriter(classes)
    for img_path, xml_path in items:
        _, objects = read_voc(xml_path)
        img, scale = resize_photo(img_path, long_side)
        stem = osp.splitext(osp.basename(img_path))[0]
        name = f'{stem}.jpg'
        _write_jpeg(osp.join(out, 'images', split, name), img)
        image_id = coco.add_image(name, img)
        for label, *box in objects:
            if label not in classes:
                raise ValueError(f'{xml_path}: unknown class {label!r} (known: {classes})')
            coco.add_box(image_id, label, box, scale)
    return coco.write(osp.join(out, 'annotations', f'instances_{split}.json'))


def _find_image(folder: str, stem: str) -> str:
    for ext in ('.jpg', '.JPG', '.jpeg', '.JPEG', '.png'):
        if osp.isfile(osp.join(folder, stem + ext)):
            return osp.join(folder, stem + ext)
    raise FileNotFoundError(f'no image for {stem} in {folder}')


def _cards(src: str, out: str, spec: dict, long_side: int) -> Dict[str, dict]:
    stats = {}
    for split in spec['splits']:
        folder = osp.join(src, 'images', split)
        xmls = sorted(f for f in os.listdir(folder) if f.endswith('.xml'))
        items = [(_find_image(folder, osp.splitext(x)[0]), osp.join(folder, x)) for x in xmls]
        stats[split] = _voc_split(spec['classes'], out, split, items, long_side)
    return stats


def _bccd(src: str, out: str, spec: dict, long_side: int) -> Dict[str, dict]:
    stats = {}
    base = osp.join(src, 'BCCD')
    for split in spec['splits']:
        with open(osp.join(base, 'ImageSets', 'Main', f'{split}.txt')) as f:
            stems = [s.strip() for s in f if s.strip()]
        items = [(_find_image(osp.join(base, 'JPEGImages'), s),
                  osp.join(base, 'Annotations', f'{s}.xml')) for s in stems]
        stats[split] = _voc_split(spec['classes'], out, split, items, long_side)
    return stats


def _nuts(src: str, out: str, spec: dict, long_side: int) -> Dict[str, dict]:
    with open(osp.join(src, 'data', 'trainval.json')) as f:
        source = json.load(f)
    names = {c['id']: c['name'] for c in source['categories']}
    by_image: Dict[int, List[dict]] = {}
    for ann in source['annotations']:
        by_image.setdefault(ann['image_id'], []).append(ann)
    writers = {s: _CocoWriter(spec['classes']) for s in spec['splits']}
    for info in sorted(source['images'], key=lambda i: i['id']):
        split = 'val' if info['id'] % NUTS_VAL_EVERY == NUTS_VAL_EVERY - 1 else 'train'
        img, scale = resize_photo(osp.join(src, 'data', 'images', info['file_name']),
                                  long_side)
        name = osp.splitext(info['file_name'])[0] + '.jpg'
        _write_jpeg(osp.join(out, 'images', split, name), img)
        coco = writers[split]
        image_id = coco.add_image(name, img)
        label_map = np.zeros(img.shape[:2], np.uint8)
        for ann in sorted(by_image.get(info['id'], []), key=lambda a: a['id']):
            polys = [np.asarray(p, np.float64).reshape(-1, 2) * scale
                     for p in ann['segmentation']]
            label = names[ann['category_id']]
            x, y, w, h = ann['bbox']
            coco.add_box(image_id, label, (x, y, x + w, y + h), scale,
                         segmentation=[[round(float(v), 2) for v in p.ravel()] for p in polys],
                         area=float(ann['area']) * scale * scale)
            # later annotations paint over earlier ones, as in COCO's own rendering
            cv2.fillPoly(label_map, [np.round(p).astype(np.int32) for p in polys],
                         spec['classes'].index(label) + 1)
        path = osp.join(out, 'labels', split, osp.splitext(name)[0] + '.png')
        os.makedirs(osp.dirname(path), exist_ok=True)
        cv2.imwrite(path, label_map)
    return {s: w.write(osp.join(out, 'annotations', f'instances_{s}.json'))
            for s, w in writers.items()}


_CONVERTERS = {'cards': _cards, 'bccd': _bccd, 'nuts': _nuts}


def convert_photo_set(name: str, src: str, out: str = PHOTO_ROOT, long_side: int = None,
                      commit: str = None) -> dict:
    """Write the reduced copy of photo set ``name`` from the source checkout ``src`` to
    ``out/<name>/`` (replacing what is there) and return its record (counts per split, the
    source, its licence and ``commit`` when given), which is also written to
    ``out/<name>/source.json``."""
    if name not in PHOTO_SETS:
        raise ValueError(f'unknown photo set {name!r}; known: {sorted(PHOTO_SETS)}')
    if not osp.isdir(src):
        raise FileNotFoundError(
            f'{src} is not a directory: clone {PHOTO_SETS[name]["url"]} and pass its path')
    spec = PHOTO_SETS[name]
    long_side = int(long_side or spec['long_side'])
    root = osp.join(out, name)
    for sub in ('images', 'annotations', 'labels'):
        if osp.isdir(osp.join(root, sub)):
            shutil.rmtree(osp.join(root, sub))
    splits = _CONVERTERS[name](src, root, spec, long_side)
    record = dict(name=name, source=spec['url'], commit=commit, licence=spec['licence'],
                  classes=list(spec['classes']), long_side=long_side,
                  jpeg_quality=JPEG_QUALITY, splits=splits)
    with open(osp.join(root, 'source.json'), 'w') as f:
        json.dump(record, f, indent=1)
    return record


def _commit(src: str):
    """The checked-out commit of ``src`` when it is a git checkout, else None."""
    try:
        return subprocess.run(['git', '-C', src, 'rev-parse', 'HEAD'], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('sources', nargs='+', metavar='NAME=PATH',
                        help=f'a set ({", ".join(PHOTO_SETS)}) and its source checkout')
    parser.add_argument('--out', default=PHOTO_ROOT, help='output directory')
    parser.add_argument('--long-side', type=int, default=None,
                        help='long side of the written images (default: per set, '
                             + ', '.join(f'{k} {v["long_side"]}' for k, v in PHOTO_SETS.items())
                             + ')')
    args = parser.parse_args(argv)
    jobs = []
    for word in args.sources:
        name, sep, path = word.partition('=')
        if not sep or name not in PHOTO_SETS:
            parser.error(f'{word!r}: expected NAME=PATH with NAME one of {sorted(PHOTO_SETS)}')
        if not osp.isdir(path):
            parser.error(f'{path} is not a directory: clone {PHOTO_SETS[name]["url"]} there')
        jobs.append((name, path))
    logger = MMLogger.get_instance('mmlinattn_photo_data', log_level='INFO')
    records = {}
    for name, path in jobs:
        start = time.perf_counter()
        records[name] = convert_photo_set(name, path, args.out, args.long_side, _commit(path))
        counts = ', '.join(f'{s}: {v["images"]} images / {v["boxes"]} boxes'
                           + (f' ({v["dropped_boxes"]} empty after clipping, dropped)'
                              if v['dropped_boxes'] else '')
                           for s, v in records[name]['splits'].items())
        print_log(f'{name}: {counts} -> {osp.join(args.out, name)} '
                  f'({time.perf_counter() - start:.1f}s)', logger)
    return records


if __name__ == '__main__':
    main()
