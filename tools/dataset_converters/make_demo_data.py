"""Write small, deterministic demo datasets in the COCO, ADE20K and Cityscapes layouts.

    python tools/dataset_converters/make_demo_data.py [--out data/demo] [--num-train 64]
        [--num-val 16] [--seed 0] [--layouts coco ade cityscapes] [--force]

Roots for configs: ``<out>/coco/``, ``<out>/ade/ADEChallengeData2016/``, ``<out>/cityscapes/``.
Class names: ``mmlinattn.datasets.DEMO_CLASSES``.  A second run with the same arguments only
checks ``<out>/demo_manifest.json`` and returns.

Every image is drawn from its own random generator keyed by ``(seed, split, index)``, so the
same arguments give byte-identical files (within one numpy / OpenCV / libjpeg build), and
asking for more images keeps the first ones unchanged.  One image holds 3-8 shapes of the
classes in :data:`DEMO_CLASSES` (filled or outlined, three size ranges including small
objects, each class with its own hue) on a textured, low-saturation background.  Later
shapes occlude earlier ones; a placement is rejected when it would leave an earlier shape
less than half visible, so every annotated object stays recognisable.

All annotations come from one per-pixel instance-id map made while drawing (no
anti-aliasing, so image and labels agree exactly):

- COCO: boxes, areas and masks of the *visible* pixels.  A hole-free visible mask is stored
  as polygons along its pixel edges (``cv2.findContours``; they rasterise back to exactly
  the mask); a mask with holes (outlined shapes, or a shape with a smaller one on top) as
  uncompressed RLE, which polygons cannot represent.
- ADE20K: ``0`` = background ("other", ignored with ``reduce_zero_label=True``), ``k + 1``
  = class ``k``.
- Cityscapes: background = train id 0 ('road'), class ``k`` = train id
  ``CITYSCAPES_TRAIN_IDS[k]``, and the one-pixel inner rim of every object = 255 (ignore).

This script needs numpy, OpenCV and mmengine's logging; it never imports mmdet or mmseg.  The
tests import it from this folder (pyproject's pytest ``pythonpath``).
"""
import argparse
import json
import os
import os.path as osp
import shutil
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import cv2
import numpy as np
from mmengine.logging import MMLogger, print_log

from mmlinattn.datasets.demo import DEMO_CLASSES, DEMO_PALETTE

#: Cityscapes train id of each class (background is 0 = 'road', object rims are 255).
CITYSCAPES_TRAIN_IDS = (11, 12, 13, 14, 15, 16, 17)
CITYSCAPES_BACKGROUND_ID = 0
IGNORE_INDEX = 255
LAYOUTS = ('coco', 'ade', 'cityscapes')
SPLITS = ('train', 'val')
MANIFEST_NAME = 'demo_manifest.json'
#: Bump when the drawn content changes, so existing outputs are regenerated.
GENERATOR_VERSION = 1

_CITIES = {'train': ('shapeville', 'polygonia'), 'val': ('circleton', )}
_SPLIT_CODE = {'train': 0, 'val': 1}
_SUB = 16  # sub-pixel factor for cv2 drawing (shift=4)


@dataclass(frozen=True)
class DemoSample:
    """One generated image and its labels.

    Attributes:
        image: ``(H, W, 3)`` uint8 RGB image.
        instance_map: ``(H, W)`` int32; 0 = background, ``i`` = the object ``labels[i - 1]``.
        labels: class index (into :data:`DEMO_CLASSES`) of each object, in drawing order.
        filled: whether each object was drawn filled (False = outline only).
        drawn_areas: pixels each object covered when drawn, before later objects hid part.
    """
    image: np.ndarray
    instance_map: np.ndarray
    labels: Tuple[int, ...]
    filled: Tuple[bool, ...]
    drawn_areas: Tuple[int, ...]

    def visible_mask(self, instance: int) -> np.ndarray:
        """Boolean mask of the visible pixels of object ``instance`` (0-based)."""
        return self.instance_map == instance + 1


def sample_rng(seed: int, split: str, index: int) -> np.random.Generator:
    """The generator of image ``index`` of ``split``: independent of every other image."""
    return np.random.default_rng([seed, _SPLIT_CODE[split], index])


# --------------------------------------------------------------------------- drawing
def _muted_colour(rng: np.random.Generator) -> np.ndarray:
    """A low-saturation colour, so the saturated class hues stand out."""
    return rng.uniform(60, 190) + rng.uniform(-18, 18, 3)


def _projection(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Pixel coordinates projected on a random direction."""
    theta = rng.uniform(0, np.pi)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    return xs * np.float32(np.cos(theta)) + ys * np.float32(np.sin(theta))


def draw_background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A ``(h, w, 3)`` float32 texture: gradient, stripes or smooth noise, plus grain."""
    kind = rng.integers(3)
    c0 = _muted_colour(rng)
    if kind == 0:  # linear gradient between two muted colours
        c1 = _muted_colour(rng)
        t = _projection(rng, h, w)
        t = (t - t.min()) / max(float(t.max() - t.min()), 1.0)
        bg = c0 + t[..., None] * (c1 - c0)
    elif kind == 1:  # soft stripes of moderate contrast
        period = rng.uniform(6, 28)
        delta = rng.uniform(15, 40) * rng.choice([-1.0, 1.0]) + rng.uniform(-6, 6, 3)
        s = 0.5 + 0.5 * np.sin(2 * np.pi * _projection(rng, h, w) / period)
        bg = c0 + s[..., None] * delta
    else:  # smooth value noise, mostly grey so that it does not mimic the class hues
        cell = int(rng.integers(8, 33))
        gh, gw = h // cell + 2, w // cell + 2
        grid = c0 + rng.uniform(-35, 35, (gh, gw, 1)) + rng.uniform(-8, 8, (gh, gw, 3))
        bg = cv2.resize(grid.astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
    grain = rng.normal(0, rng.uniform(2, 8), (h, w, 3))
    return (bg + grain).astype(np.float32)


def _regular(n: int, radius: float, angle: float, ratio: float = 1.0) -> np.ndarray:
    """Vertices of a regular n-gon (or a star when ``ratio < 1`` alternates radii)."""
    k = np.arange(n)
    r = np.where(k % 2 == 0, radius, radius * ratio) if ratio != 1.0 else np.full(n, radius)
    a = angle + 2 * np.pi * k / n
    return np.stack([r * np.cos(a), r * np.sin(a)], axis=1)


def shape_outline(label: int, radius: float, rng: np.random.Generator) -> np.ndarray:
    """The ``(N, 2)`` float (x, y) outline of class ``label`` centred at the origin."""
    name = DEMO_CLASSES[label]
    angle = rng.uniform(0, 2 * np.pi)
    if name == 'triangle':
        pts = _regular(3, radius, angle)
        pts = pts + rng.uniform(-0.1, 0.1, pts.shape) * radius
    elif name == 'square':
        pts = _regular(4, radius, angle)
    elif name == 'pentagon':
        pts = _regular(5, radius, angle)
    elif name in ('circle', 'ellipse'):
        minor = 1.0 if name == 'circle' else rng.uniform(0.4, 0.65)
        a = np.linspace(0, 2 * np.pi, 48, endpoint=False)
        x, y = radius * np.cos(a), minor * radius * np.sin(a)
        c, s = np.cos(angle), np.sin(angle)
        pts = np.stack([c * x - s * y, s * x + c * y], axis=1)
    elif name == 'star':
        pts = _regular(10, radius, angle, ratio=rng.uniform(0.38, 0.5))
    else:  # cross: a plus sign of arm half-width t
        t = radius * rng.uniform(0.3, 0.42)
        r = radius
        xy = np.array([(-t, -r), (t, -r), (t, -t), (r, -t), (r, t), (t, t), (t, r), (-t, r),
                       (-t, t), (-r, t), (-r, -t), (-t, -t)])
        c, s = np.cos(angle), np.sin(angle)
        pts = xy @ np.array([[c, s], [-s, c]])
    return pts


def _rasterize(pts: np.ndarray, h: int, w: int, thickness: int) -> np.ndarray:
    """Boolean mask of a closed outline: filled when ``thickness <= 0``."""
    mask = np.zeros((h, w), np.uint8)
    ipts = [np.round(pts * _SUB).astype(np.int32)]
    if thickness <= 0:
        cv2.fillPoly(mask, ipts, 1, lineType=cv2.LINE_8, shift=4)
    else:
        cv2.polylines(mask, ipts, True, 1, thickness, lineType=cv2.LINE_8, shift=4)
    return mask.astype(bool)


def _sample_radius(rng: np.random.Generator, h: int, w: int) -> float:
    """Circumradius from three size ranges: small (20 %), medium (50 %), large (30 %)."""
    u = rng.uniform()
    if u < 0.2:
        return rng.uniform(5, 10)
    if u < 0.7:
        return rng.uniform(10, 25)
    return rng.uniform(25, max(26.0, 0.3 * min(h, w)))


def generate_sample(seed: int, split: str, index: int, min_area: int = 20,
                    min_visible: float = 0.5) -> DemoSample:
    """Draw image ``index`` of ``split``.

    Args:
        seed: base seed of the dataset.
        split: 'train' or 'val'.
        index: image index within the split.
        min_area: smallest number of pixels an object may be drawn with or keep visible.
        min_visible: smallest visible fraction an earlier object may keep when a later one
            is placed over it.
    """
    if split not in _SPLIT_CODE:
        raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
    rng = sample_rng(seed, split, index)
    h, w = (int(v) for v in rng.integers(160, 321, 2))
    image = draw_background(rng, h, w)
    ids = np.zeros((h, w), np.int32)
    drawn: List[int] = []  # pixels each object was drawn with
    labels: List[int] = []
    filled: List[bool] = []
    target = int(rng.integers(3, 9))
    for _ in range(4 * target):
        if len(labels) == target:
            break
        label = int(rng.integers(len(DEMO_CLASSES)))
        radius = _sample_radius(rng, h, w)
        pts = shape_outline(label, radius, rng)
        pts = pts + rng.uniform([0.5 * radius, 0.5 * radius],
                                [w - 0.5 * radius, h - 0.5 * radius])
        is_filled = bool(radius < 12 or rng.uniform() >= 0.3)
        thickness = 0 if is_filled else max(2, int(round(radius / 7)))
        colour = np.clip(np.asarray(DEMO_PALETTE[label]) + rng.integers(-20, 21, 3), 0, 255)
        shade = rng.uniform(-18, 18) * (_projection(rng, h, w) / max(h, w) - 0.5)
        mask = _rasterize(pts, h, w, thickness)
        area = int(mask.sum())
        if area < min_area:
            continue
        n = len(labels)
        lost = np.bincount(ids[mask], minlength=n + 1)[1:]
        visible = np.bincount(ids.ravel(), minlength=n + 1)[1:] - lost
        if n and np.any((visible < min_visible * np.asarray(drawn)) | (visible < min_area)):
            continue
        ids[mask] = n + 1
        image[mask] = colour + shade[mask][:, None]
        drawn.append(area)
        labels.append(label)
        filled.append(is_filled)
    image += rng.normal(0, 2.0, image.shape)
    image = np.clip(np.round(image), 0, 255).astype(np.uint8)
    return DemoSample(image, ids, tuple(labels), tuple(filled), tuple(drawn))


# --------------------------------------------------------------------------- annotations
def mask_to_rle(mask: np.ndarray) -> Dict[str, list]:
    """Uncompressed COCO RLE (column-major runs, starting with a run of zeros)."""
    flat = np.asarray(mask, bool).T.reshape(-1)
    bounds = np.concatenate([[0], np.flatnonzero(flat[1:] != flat[:-1]) + 1, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat[0]:
        runs = [0] + runs
    return {'size': [int(mask.shape[0]), int(mask.shape[1])], 'counts': runs}


def mask_to_segmentation(mask: np.ndarray) -> Union[List[List[float]], Dict[str, list]]:
    """COCO segmentation of a boolean mask: polygons if it has no holes, else RLE.

    Polygons follow the pixel edges: ``cv2.findContours`` on the mask upsampled 2x traces
    the boundary a quarter pixel inside the outer pixel edges (pixel ``i`` spans
    ``[i, i + 1]`` in COCO coordinates), so pycocotools' rasterisation, which takes the
    pixels whose centres lie inside, gives back exactly the mask.  Contours of the mask as
    it is would run through the boundary pixels' centres and lose about half of them.
    """
    m = np.ascontiguousarray(mask, np.uint8)
    _, hierarchy = cv2.findContours(m, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
    if hierarchy is None or np.any(hierarchy[0][:, 3] >= 0):
        return mask_to_rle(mask)
    up = np.repeat(np.repeat(m, 2, axis=0), 2, axis=1)
    contours, _ = cv2.findContours(up, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    return [((c.reshape(-1) + 0.5) / 2).tolist() for c in contours if len(c) >= 3]


def instance_annotations(sample: DemoSample, min_area: int = 16) -> List[dict]:
    """Per visible object: 0-based ``label``, ``bbox`` [x, y, w, h], ``area``, ``segmentation``.

    Objects with fewer than ``min_area`` visible pixels are dropped.
    """
    anns = []
    for i, label in enumerate(sample.labels):
        mask = sample.visible_mask(i)
        area = int(mask.sum())
        if area < min_area:
            continue
        ys, xs = np.nonzero(mask)
        x0, y0 = int(xs.min()), int(ys.min())
        bbox = [x0, y0, int(xs.max()) + 1 - x0, int(ys.max()) + 1 - y0]
        anns.append(dict(label=label, bbox=bbox, area=area,
                         segmentation=mask_to_segmentation(mask)))
    return anns


def ade_label_map(sample: DemoSample) -> np.ndarray:
    """ADE20K-style uint8 map: 0 = background ("other"), ``k + 1`` = class ``k``."""
    lut = np.array((0, ) + tuple(l + 1 for l in sample.labels), np.uint8)
    return lut[sample.instance_map]


def cityscapes_label_map(sample: DemoSample) -> np.ndarray:
    """Cityscapes labelTrainIds uint8 map; the one-pixel inner rim of each object is 255."""
    lut = np.array((CITYSCAPES_BACKGROUND_ID, ) +
                   tuple(CITYSCAPES_TRAIN_IDS[l] for l in sample.labels), np.uint8)
    out = lut[sample.instance_map]
    ids = sample.instance_map
    edge = np.zeros(ids.shape, bool)
    dx = ids[:, 1:] != ids[:, :-1]
    dy = ids[1:, :] != ids[:-1, :]
    edge[:, 1:] |= dx
    edge[:, :-1] |= dx
    edge[1:, :] |= dy
    edge[:-1, :] |= dy
    out[edge & (ids > 0)] = IGNORE_INDEX
    return out


# --------------------------------------------------------------------------- writers
def _write_image(path: str, rgb: np.ndarray) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    params = [cv2.IMWRITE_JPEG_QUALITY, 90] if path.endswith('.jpg') else []
    if not cv2.imwrite(path, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), params):
        raise OSError(f'could not write {path}')


def _write_label(path: str, label: np.ndarray) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    if not cv2.imwrite(path, label):
        raise OSError(f'could not write {path}')


def coco_image_id(split: str, index: int) -> int:
    """COCO image id: train 1, 2, ...; val 1000001, 1000002, ... (unique over both)."""
    return index + 1 + (1_000_000 if split == 'val' else 0)


def write_coco(root: str, samples: Dict[str, Sequence[DemoSample]]) -> Dict[str, int]:
    """Write ``{train,val}2017/*.jpg`` and ``annotations/instances_{split}2017.json``."""
    stats = {}
    categories = [dict(id=k + 1, name=n, supercategory='shape') for k, n in enumerate(DEMO_CLASSES)]
    for split, split_samples in samples.items():
        images, annotations = [], []
        for index, sample in enumerate(split_samples):
            img_id = coco_image_id(split, index)
            name = f'{img_id:012d}.jpg'
            _write_image(osp.join(root, f'{split}2017', name), sample.image)
            h, w = sample.instance_map.shape
            images.append(dict(id=img_id, file_name=name, height=h, width=w))
            for ann in instance_annotations(sample):
                annotations.append(dict(id=len(annotations) + 1, image_id=img_id,
                                        category_id=ann['label'] + 1, bbox=ann['bbox'],
                                        area=ann['area'], iscrowd=0,
                                        segmentation=ann['segmentation']))
        data = dict(info=dict(description=f'mmlinattn demo shapes ({split})', version='1.0',
                              year=2017, contributor='mmlinattn tools/make_demo_data.py'),
                    licenses=[], images=images, annotations=annotations, categories=categories)
        path = osp.join(root, 'annotations', f'instances_{split}2017.json')
        os.makedirs(osp.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            json.dump(data, f, separators=(',', ':'))
        stats[f'{split}_images'] = len(images)
        stats[f'{split}_instances'] = len(annotations)
    return stats


def write_ade(root: str, samples: Dict[str, Sequence[DemoSample]]) -> Dict[str, int]:
    """Write ``images/{training,validation}/*.jpg`` and ``annotations/.../*.png``."""
    stats = {}
    for split, split_samples in samples.items():
        folder = 'training' if split == 'train' else 'validation'
        for index, sample in enumerate(split_samples):
            stem = f'ADE_{split}_{index + 1:08d}'
            _write_image(osp.join(root, 'images', folder, stem + '.jpg'), sample.image)
            _write_label(osp.join(root, 'annotations', folder, stem + '.png'),
                         ade_label_map(sample))
        stats[f'{split}_images'] = len(split_samples)
    return stats


def write_cityscapes(root: str, samples: Dict[str, Sequence[DemoSample]]) -> Dict[str, int]:
    """Write ``leftImg8bit/{split}/<city>/*.png`` and ``gtFine/.../*_labelTrainIds.png``."""
    stats = {}
    for split, split_samples in samples.items():
        cities = _CITIES[split]
        for index, sample in enumerate(split_samples):
            city = cities[index % len(cities)]
            stem = f'{city}_{index // len(cities):06d}_000019'
            _write_image(osp.join(root, 'leftImg8bit', split, city, stem + '_leftImg8bit.png'),
                         sample.image)
            _write_label(
                osp.join(root, 'gtFine', split, city, stem + '_gtFine_labelTrainIds.png'),
                cityscapes_label_map(sample))
        stats[f'{split}_images'] = len(split_samples)
    return stats


#: Layout name -> (sub-directory of ``out``, writer).
_WRITERS = {
    'coco': ('coco', write_coco),
    'ade': (osp.join('ade', 'ADEChallengeData2016'), write_ade),
    'cityscapes': ('cityscapes', write_cityscapes),
}


def layout_root(out: str, layout: str) -> str:
    """Data root of ``layout`` under ``out`` (what a config's ``data_root`` should be)."""
    return osp.join(out, _WRITERS[layout][0])


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f'{name} must be an integer >= {low}, got {value!r}')
    return int(value)


def make_demo_data(out: str = 'data/demo', num_train: int = 64, num_val: int = 16,
                   seed: int = 0, layouts: Sequence[str] = LAYOUTS, force: bool = False,
                   logger: Optional[str] = 'current') -> Dict[str, dict]:
    """Write the demo datasets of ``layouts`` under ``out``; idempotent.

    ``out/demo_manifest.json`` records the arguments each layout was written with; a layout
    whose record matches is skipped unless ``force``.  A layout directory that exists but was
    not written by this function is never overwritten unless ``force``.

    Args:
        out: output directory.
        num_train: images in the training split.
        num_val: images in the validation split.
        seed: base seed.
        layouts: any of ``'coco'``, ``'ade'``, ``'cityscapes'``.
        force: rewrite layouts even when the manifest says they are up to date.
        logger: passed to ``mmengine.logging.print_log``.

    Returns:
        ``{layout: {'root': ..., 'skipped': bool, **counts}}``.
    """
    num_train = _check_int('num_train', num_train, 1)
    num_val = _check_int('num_val', num_val, 1)
    seed = _check_int('seed', seed, 0)
    if isinstance(layouts, str) or not layouts or any(l not in LAYOUTS for l in layouts):
        raise ValueError(f'layouts must be a non-empty list from {LAYOUTS}, got {layouts!r}')
    manifest_path = osp.join(out, MANIFEST_NAME)
    manifest = {'generator_version': GENERATOR_VERSION, 'layouts': {}}
    if osp.isfile(manifest_path):
        with open(manifest_path) as f:
            old = json.load(f)
        if old.get('generator_version') == GENERATOR_VERSION:
            manifest = old
    record = dict(seed=seed, num_train=num_train, num_val=num_val)
    counts = {'train': num_train, 'val': num_val}
    samples: Dict[str, List[DemoSample]] = {}  # drawn once, shared by the layouts
    result = {}
    for layout in dict.fromkeys(layouts):
        root = layout_root(out, layout)
        if not force and manifest['layouts'].get(layout) == record and osp.isdir(root):
            print_log(f'demo {layout}: up to date in {root} (use --force to rewrite)', logger)
            result[layout] = dict(root=root, skipped=True, **manifest['layouts'][layout])
            continue
        if osp.exists(root):
            if layout not in manifest['layouts'] and not force:
                raise FileExistsError(f'{root} exists and was not written by make_demo_data; '
                                      'move it away or pass force=True (--force)')
            shutil.rmtree(root)
        manifest['layouts'].pop(layout, None)
        _write_manifest(manifest_path, manifest)
        if not samples:
            samples = {split: [generate_sample(seed, split, i) for i in range(num)]
                       for split, num in counts.items()}
        stats = _WRITERS[layout][1](root, samples)
        manifest['layouts'][layout] = record
        _write_manifest(manifest_path, manifest)
        print_log(f'demo {layout}: wrote {stats} to {root}', logger)
        result[layout] = dict(root=root, skipped=False, **record, **stats)
    return result


def _write_manifest(path: str, manifest: dict) -> None:
    os.makedirs(osp.dirname(path) or '.', exist_ok=True)
    with open(path, 'w') as f:
        json.dump(manifest, f, indent=2, sort_keys=True)


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
