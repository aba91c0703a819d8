"""The reduced photo sets in data/photos/: the converter (on small stand-in sources with the
sources' layouts) and the shipped copies (complete, consistent with their records, and read
by mmdet's CocoDataset and mmseg's segmentation dataset)."""
import json
import os.path as osp

import cv2
import numpy as np
import pytest
from make_photo_data import convert_photo_set, read_voc
from repo_paths import ROOT

from mmlinattn.datasets.photos import PHOTO_SETS

SHIPPED = osp.join(ROOT, 'data', 'photos')


def _voc(path, filename, w, h, objects):
    body = ''.join(
        f'<object><name>{n}</name><bndbox><xmin>{a}</xmin><ymin>{b}</ymin><xmax>{c}</xmax>'
        f'<ymax>{d}</ymax></bndbox></object>' for n, a, b, c, d in objects)
    path.write_text(f'<annotation><filename>{filename}</filename><size><width>{w}</width>'
                    f'<height>{h}</height></size>{body}</annotation>')


def _photo(path, h, w, seed=0):
    img = np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)
    assert cv2.imwrite(str(path), img)


def test_cards_layout_scales_boxes_and_keeps_the_split(tmp_path):
    src = tmp_path / 'src'
    for split, n in (('train', 2), ('test', 1)):
        (src / 'images' / split).mkdir(parents=True)
        for i in range(n):
            _photo(src / 'images' / split / f'IMG_{i}.JPG', 400, 300, i)
            _voc(src / 'images' / split / f'IMG_{i}.xml', f'IMG_{i}.JPG', 300, 400,
                 [('king', 40, 80, 120, 200), ('ten', 290, 390, 330, 420)])
    rec = convert_photo_set('cards', str(src), str(tmp_path / 'out'), long_side=200)
    assert rec['splits']['train'] == dict(images=2, boxes=4, dropped_boxes=0)
    assert rec['splits']['test']['images'] == 1
    coco = json.load(open(tmp_path / 'out' / 'cards' / 'annotations' / 'instances_train.json'))
    assert [c['name'] for c in coco['categories']] == list(PHOTO_SETS['cards']['classes'])
    assert coco['images'][0] == dict(id=1, file_name='IMG_0.jpg', height=200, width=150)
    king, ten = coco['annotations'][:2]
    # half size: (40, 80, 120, 200) -> x 20, y 40, w 40, h 60
    assert king['bbox'] == [20.0, 40.0, 40.0, 60.0] and king['category_id'] == 3
    # (290, 390, 330, 420) / 2 = (145, 195, 165, 210), clipped to the 150 x 200 image
    assert ten['bbox'] == [145.0, 195.0, 5.0, 5.0] and ten['area'] == 25.0
    img = cv2.imread(str(tmp_path / 'out' / 'cards' / 'images' / 'train' / 'IMG_0.jpg'))
    assert img.shape == (200, 150, 3)


def test_bccd_layout_drops_boxes_empty_after_clipping(tmp_path):
    base = tmp_path / 'src' / 'BCCD'
    for sub in ('JPEGImages', 'Annotations', 'ImageSets/Main'):
        (base / sub).mkdir(parents=True)
    for split, stems in (('train', ['a', 'b']), ('val', ['c']), ('test', ['d'])):
        (base / 'ImageSets' / 'Main' / f'{split}.txt').write_text('\n'.join(stems) + '\n')
        for s in stems:
            _photo(base / 'JPEGImages' / f'{s}.jpg', 48, 64)
            _voc(base / 'Annotations' / f'{s}.xml', f'{s}.jpg', 64, 48,
                 [('RBC', 1, 1, 20, 20), ('Platelets', 70, 10, 90, 20)])  # 2nd: outside
    rec = convert_photo_set('bccd', str(tmp_path / 'src'), str(tmp_path / 'out'))
    assert rec['splits']['train'] == dict(images=2, boxes=2, dropped_boxes=2)
    assert set(rec['splits']) == {'train', 'val', 'test'}


def test_nuts_masks_become_scaled_polygons_and_label_maps(tmp_path):
    src = tmp_path / 'src' / 'data'
    (src / 'images').mkdir(parents=True)
    images, anns = [], []
    for i in range(4):  # id 3 is held out (every fourth)
        _photo(src / 'images' / f'{i}.jpg', 100, 200, i)
        images.append(dict(id=i, file_name=f'{i}.jpg', height=100, width=200))
        anns.append(dict(id=i + 1, image_id=i, category_id=2, iscrowd=0, area=1600.0,
                         bbox=[20, 20, 40, 40],
                         segmentation=[[20, 20, 60, 20, 60, 60, 20, 60]]))
    cats = [dict(id=k + 1, name=n) for k, n in enumerate(('date', 'fig', 'hazelnut'))]
    (src / 'trainval.json').write_text(json.dumps(dict(images=images, annotations=anns,
                                                       categories=cats)))
    rec = convert_photo_set('nuts', str(tmp_path / 'src'), str(tmp_path / 'out'), long_side=100)
    assert rec['splits']['train']['images'] == 3 and rec['splits']['val']['images'] == 1
    root = tmp_path / 'out' / 'nuts'
    val = json.load(open(root / 'annotations' / 'instances_val.json'))
    assert val['images'][0]['file_name'] == '3.jpg'
    ann = val['annotations'][0]
    assert ann['segmentation'] == [[10.0, 10.0, 30.0, 10.0, 30.0, 30.0, 10.0, 30.0]]
    assert ann['bbox'] == [10.0, 10.0, 20.0, 20.0] and ann['area'] == 400.0
    label = cv2.imread(str(root / 'labels' / 'val' / '3.png'), cv2.IMREAD_UNCHANGED)
    assert label.shape == (50, 100) and label.dtype == np.uint8
    assert label[20, 20] == 2 and label[5, 5] == 0 and label[40, 80] == 0
    assert set(np.unique(label)) == {0, 2}


def test_unknown_set_and_missing_source_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match='unknown photo set'):
        convert_photo_set('dogs', str(tmp_path))
    with pytest.raises(FileNotFoundError, match='clone https://github.com/Shenggan'):
        convert_photo_set('bccd', str(tmp_path / 'nowhere'))


def test_read_voc_reads_name_and_corners(tmp_path):
    _voc(tmp_path / 'a.xml', 'a.JPG', 10, 10, [(' ace ', 1, 2, 3, 4)])
    assert read_voc(str(tmp_path / 'a.xml')) == ('a.JPG', [('ace', 1.0, 2.0, 3.0, 4.0)])


@pytest.mark.parametrize('name', sorted(PHOTO_SETS))
def test_shipped_copy_is_complete_and_matches_its_record(name):
    root = osp.join(SHIPPED, name)
    spec = PHOTO_SETS[name]
    record = json.load(open(osp.join(root, 'source.json')))
    assert record['licence'] == spec['licence'] and record['source'] == spec['url']
    assert osp.getsize(osp.join(root, 'LICENSE')) > 500
    assert set(record['splits']) == set(spec['splits'])
    for split, counts in record['splits'].items():
        coco = json.load(open(osp.join(root, 'annotations', f'instances_{split}.json')))
        assert [c['name'] for c in coco['categories']] == list(spec['classes'])
        assert len(coco['images']) == counts['images'] and counts['images'] > 0
        assert len(coco['annotations']) == counts['boxes']
        sizes = {}
        for info in coco['images']:
            img = cv2.imread(osp.join(root, 'images', split, info['file_name']))
            assert img is not None, info['file_name']
            assert img.shape[:2] == (info['height'], info['width'])
            assert max(img.shape[:2]) <= spec['long_side']
            sizes[info['id']] = (info['width'], info['height'])
            if spec['semantic']:
                stem = osp.splitext(info['file_name'])[0]
                label = cv2.imread(osp.join(root, 'labels', split, stem + '.png'),
                                   cv2.IMREAD_UNCHANGED)
                assert label.shape == img.shape[:2]
                assert label.max() <= len(spec['classes']) and label.max() > 0
        for ann in coco['annotations']:
            x, y, w, h = ann['bbox']
            width, height = sizes[ann['image_id']]
            assert w >= 1 and h >= 1 and x >= 0 and y >= 0
            assert x + w <= width + 1e-6 and y + h <= height + 1e-6
            assert 1 <= ann['category_id'] <= len(spec['classes'])


def test_shipped_sets_load_in_mmdet_and_mmseg():
    from mmdet.datasets import CocoDataset
    from mmseg.datasets import BaseSegDataset
    cards = CocoDataset(data_root=osp.join(SHIPPED, 'cards') + '/',
                        ann_file='annotations/instances_test.json',
                        data_prefix=dict(img='images/test/'),
                        metainfo=dict(classes=PHOTO_SETS['cards']['classes']),
                        test_mode=True, pipeline=[])
    assert len(cards) == 67
    info = cards[0]
    assert osp.isfile(info['img_path']) and info['instances']
    seg = BaseSegDataset(data_root=osp.join(SHIPPED, 'nuts'),
                         data_prefix=dict(img_path='images/val', seg_map_path='labels/val'),
                         img_suffix='.jpg', seg_map_suffix='.png',
                         metainfo=dict(classes=('background', ) + PHOTO_SETS['nuts']['classes']),
                         pipeline=[])
    assert len(seg) == 4 and all(osp.isfile(seg[i]['seg_map_path']) for i in range(4))
