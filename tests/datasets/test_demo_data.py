"""Demo datasets: determinism, idempotence, label consistency, and loading with the stock
mmdet / mmseg dataset classes and CocoMetric."""
import json
import os
import os.path as osp

import numpy as np
import pytest

from make_demo_data import (CITYSCAPES_TRAIN_IDS, IGNORE_INDEX, generate_sample, layout_root,
                            make_demo_data)
from mmlinattn.datasets import DEMO_CLASSES, DEMO_PALETTE

NUM_TRAIN, NUM_VAL, SEED = 3, 3, 0


def _tree(root):
    """{relative path: bytes} of every file under root."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = osp.join(d, f)
            with open(p, 'rb') as fh:
                out[osp.relpath(p, root)] = fh.read()
    return out


@pytest.fixture(scope='module')
def demo_out(tmp_path_factory):
    out = str(tmp_path_factory.mktemp('demo'))
    make_demo_data(out, num_train=NUM_TRAIN, num_val=NUM_VAL, seed=SEED, logger='silent')
    return out


def _visible(sample, i):
    return sample.instance_map == i + 1


def _smooth(img):
    import cv2
    return cv2.GaussianBlur(img.astype(np.float32), (5, 5), 1.5)


def _mask_box(mask):
    ys, xs = np.nonzero(mask)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float32)


def test_same_args_give_identical_bytes(tmp_path, demo_out):
    a = _tree(demo_out)
    make_demo_data(str(tmp_path / 'b'), num_train=NUM_TRAIN, num_val=NUM_VAL, seed=SEED,
                   logger='silent')
    b = _tree(str(tmp_path / 'b'))
    assert sorted(a) == sorted(b)
    assert all(a[k] == b[k] for k in a)
    # COCO: image per sample + 2 json; ADE, Cityscapes: image + label per sample; manifest
    assert len(a) == 5 * (NUM_TRAIN + NUM_VAL) + 3
    make_demo_data(str(tmp_path / 'c'), num_train=NUM_TRAIN, num_val=NUM_VAL, seed=SEED + 1,
                   layouts=['coco'], logger='silent')
    c = _tree(str(tmp_path / 'c'))
    key = osp.join('coco', 'annotations', 'instances_train2017.json')
    assert c[key] != a[key]


def test_file_counts(demo_out):
    files = _tree(demo_out)
    n = NUM_TRAIN + NUM_VAL

    def count(prefix, suffix):
        return sum(k.startswith(prefix) and k.endswith(suffix) for k in files)

    assert count(osp.join('coco', 'train2017'), '.jpg') == NUM_TRAIN
    assert count(osp.join('coco', 'val2017'), '.jpg') == NUM_VAL
    assert count(osp.join('ade', 'ADEChallengeData2016', 'images'), '.jpg') == n
    assert count(osp.join('ade', 'ADEChallengeData2016', 'annotations'), '.png') == n
    assert count(osp.join('cityscapes', 'leftImg8bit'), '_leftImg8bit.png') == n
    assert count(osp.join('cityscapes', 'gtFine'), '_gtFine_labelTrainIds.png') == n


def test_idempotent_and_safe(tmp_path):
    out = str(tmp_path / 'd')
    first = make_demo_data(out, num_train=2, num_val=1, layouts=['ade'], logger='silent')
    assert not first['ade']['skipped']
    png = osp.join(layout_root(out, 'ade'), 'annotations', 'training', 'ADE_train_00000001.png')
    stamp = os.stat(png).st_mtime_ns
    again = make_demo_data(out, num_train=2, num_val=1, layouts=['ade'], logger='silent')
    assert again['ade']['skipped'] and os.stat(png).st_mtime_ns == stamp
    changed = make_demo_data(out, num_train=1, num_val=1, layouts=['ade'], logger='silent')
    assert not changed['ade']['skipped'] and not osp.exists(png.replace('01.png', '02.png'))
    forced = make_demo_data(out, num_train=1, num_val=1, layouts=['ade'], force=True,
                            logger='silent')
    assert not forced['ade']['skipped']
    # a directory the generator did not write is never replaced silently
    os.makedirs(osp.join(out, 'coco'))
    with pytest.raises(FileExistsError, match='coco'):
        make_demo_data(out, num_train=1, num_val=1, layouts=['coco'], logger='silent')


@pytest.mark.parametrize('kwargs, name', [(dict(num_train=0), 'num_train'),
                                          (dict(num_val=1.5), 'num_val'),
                                          (dict(seed=-1), 'seed'),
                                          (dict(layouts=['voc']), 'layouts'),
                                          (dict(layouts='coco'), 'layouts')])
def test_bad_arguments(tmp_path, kwargs, name):
    with pytest.raises(ValueError, match=name):
        make_demo_data(str(tmp_path), logger='silent', **kwargs)


def test_generator_content():
    samples = [generate_sample(SEED, 'train', i) for i in range(12)]
    sizes = np.array([s.image.shape[:2] for s in samples])
    assert sizes.min() >= 160 and sizes.max() <= 320
    assert (sizes[:, 0] != sizes[:, 1]).any()
    occluded, small, outlined = 0, 0, 0
    for s in samples:
        assert s.image.dtype == np.uint8 and s.image.shape[:2] == s.instance_map.shape
        assert 3 <= len(s.labels) <= 8
        assert set(np.unique(s.instance_map)) == set(range(len(s.labels) + 1))
        for i, drawn in enumerate(s.drawn_areas):
            vis = int(_visible(s, i).sum())
            assert 0.5 * drawn <= vis <= drawn
            occluded += vis < drawn
            small += vis < 150
        outlined += s.filled.count(False)
    assert occluded and small and outlined
    # each object is painted in its class colour (up to jitter, shading and grain)
    s = samples[0]
    for i, label in enumerate(s.labels):
        mean = s.image[_visible(s, i)].reshape(-1, 3).mean(0)
        assert np.abs(mean - DEMO_PALETTE[label]).max() < 40


def test_coco_json_matches_generator(demo_out):
    with open(osp.join(layout_root(demo_out, 'coco'), 'annotations',
                       'instances_val2017.json')) as f:
        data = json.load(f)
    assert set(data) >= {'info', 'images', 'annotations', 'categories'}
    assert [c['name'] for c in data['categories']] == list(DEMO_CLASSES)
    ann_ids = [a['id'] for a in data['annotations']]
    assert len(set(ann_ids)) == len(ann_ids)
    for index, img in enumerate(data['images']):
        s = generate_sample(SEED, 'val', index)
        assert (img['height'], img['width']) == s.instance_map.shape
        anns = [a for a in data['annotations'] if a['image_id'] == img['id']]
        kept = [i for i in range(len(s.labels)) if _visible(s, i).sum() >= 16]
        assert len(anns) == len(kept)
        for a, i in zip(anns, kept):
            mask = _visible(s, i)
            x0, y0, x1, y1 = _mask_box(mask)
            assert a['bbox'] == [int(x0), int(y0), int(x1 - x0), int(y1 - y0)]
            assert a['area'] == mask.sum() and a['iscrowd'] == 0
            assert a['category_id'] == s.labels[i] + 1


def test_coco_loads_in_mmdet_and_gt_scores_map_1(demo_out):
    import torch
    from mmcv.transforms import LoadImageFromFile
    from mmdet.datasets import CocoDataset
    from mmdet.datasets.transforms import LoadAnnotations
    from mmdet.evaluation import CocoMetric

    root = layout_root(demo_out, 'coco')
    ann_file = 'annotations/instances_val2017.json'
    ds = CocoDataset(data_root=root, ann_file=ann_file, data_prefix=dict(img='val2017/'),
                     metainfo=dict(classes=DEMO_CLASSES, palette=DEMO_PALETTE),
                     pipeline=[LoadImageFromFile(),
                               LoadAnnotations(with_bbox=True, with_mask=True)])
    assert len(ds) == NUM_VAL
    gts = []
    for idx in range(len(ds)):
        r = ds[idx]
        index = int(osp.basename(r['img_path']).split('.')[0]) - 1_000_001
        s = generate_sample(SEED, 'val', index)
        # BGR as loaded; JPEG drops the pixel grain, so compare smoothed images
        assert np.abs(_smooth(r['img'][..., ::-1]) - _smooth(s.image)).mean() < 2.5
        masks = r['gt_masks'].to_ndarray().astype(bool)
        boxes = r['gt_bboxes'].tensor.numpy()
        labels = r['gt_bboxes_labels']
        assert len(masks) == len(boxes) == len(labels) > 0
        for mask, box, label in zip(masks, boxes, labels):
            ious = [(mask & _visible(s, i)).sum() / (mask | _visible(s, i)).sum()
                    for i in range(len(s.labels))]
            i = int(np.argmax(ious))
            assert label == s.labels[i]
            # polygons and RLE both decode to exactly the visible pixels
            np.testing.assert_array_equal(mask, _visible(s, i))
            np.testing.assert_array_equal(box, _mask_box(mask))
        gts.append(r)

    def score(shift):
        metric = CocoMetric(ann_file=osp.join(root, ann_file), metric=['bbox', 'segm'])
        metric.dataset_meta = ds.metainfo
        for r in gts:
            boxes = r['gt_bboxes'].tensor
            masks = torch.from_numpy(r['gt_masks'].to_ndarray().astype(bool))
            if shift:
                boxes = boxes + 0.5 * (boxes[:, 2:] - boxes[:, :2]).repeat(1, 2)
                masks = torch.roll(masks, shifts=(9, 9), dims=(1, 2))
            metric.process({}, [dict(img_id=r['img_id'], ori_shape=r['ori_shape'],
                                     pred_instances=dict(
                                         bboxes=boxes, scores=torch.ones(len(boxes)),
                                         labels=torch.as_tensor(r['gt_bboxes_labels']),
                                         masks=masks))])
        return metric.compute_metrics(metric.results)

    exact = score(shift=False)
    assert exact['bbox_mAP'] == 1.0 and exact['segm_mAP'] == 1.0
    shifted = score(shift=True)
    assert shifted['bbox_mAP'] < 0.5 and shifted['segm_mAP'] < 1.0


def test_ade20k_loads_in_mmseg(demo_out):
    from mmcv.transforms import LoadImageFromFile
    from mmseg.datasets import ADE20KDataset
    from mmseg.datasets.transforms import LoadAnnotations

    ds = ADE20KDataset(data_root=layout_root(demo_out, 'ade'),
                       data_prefix=dict(img_path='images/validation',
                                        seg_map_path='annotations/validation'),
                       pipeline=[LoadImageFromFile(), LoadAnnotations()])
    assert len(ds) == NUM_VAL and ds.reduce_zero_label
    for idx in range(len(ds)):
        r = ds[idx]
        index = int(osp.basename(r['img_path'])[len('ADE_val_'):-4]) - 1
        s = generate_sample(SEED, 'val', index)
        assert r['img'].shape[:2] == s.instance_map.shape
        labels = np.array((IGNORE_INDEX, ) + s.labels)
        np.testing.assert_array_equal(r['gt_seg_map'], labels[s.instance_map])
        assert 0 < (r['gt_seg_map'] != IGNORE_INDEX).mean() < 1


def test_cityscapes_loads_in_mmseg(demo_out):
    from mmcv.transforms import LoadImageFromFile
    from mmseg.datasets import CityscapesDataset
    from mmseg.datasets.transforms import LoadAnnotations

    ds = CityscapesDataset(data_root=layout_root(demo_out, 'cityscapes'),
                           data_prefix=dict(img_path='leftImg8bit/val',
                                            seg_map_path='gtFine/val'),
                           pipeline=[LoadImageFromFile(), LoadAnnotations()])
    assert len(ds) == NUM_VAL and len(ds.metainfo['classes']) == 19
    samples = [generate_sample(SEED, 'val', i) for i in range(NUM_VAL)]
    for idx in range(len(ds)):
        r = ds[idx]
        # lossless PNG: the loaded image identifies its sample exactly
        match = [s for s in samples
                 if s.image.shape == r['img'].shape and (s.image == r['img'][..., ::-1]).all()]
        assert len(match) == 1
        s, gt = match[0], r['gt_seg_map']
        assert (gt[s.instance_map == 0] == 0).all()
        for i, label in enumerate(s.labels):
            values = gt[_visible(s, i)]
            assert set(np.unique(values)) <= {CITYSCAPES_TRAIN_IDS[label], IGNORE_INDEX}
            assert (values == CITYSCAPES_TRAIN_IDS[label]).any()
        ignore = (gt == IGNORE_INDEX).mean()
        assert 0 < ignore < 0.15
