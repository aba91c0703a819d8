"""The dataset pre-flight check reads what it can cheaply: a broken
annotation JSON, images missing from the sampled list, empty (0-byte) or non-image files,
segmentation images without their label maps, or a detection train set whose filter_cfg
leaves no image fail before the run starts."""
import json

from mmengine.config import Config

from mmlinattn.utils.data_check import check_datasets

JPEG = b'\xff\xd8\xff\xe0' + bytes(12)  # the header bytes the check reads
PNG = b'\x89PNG\r\n\x1a\n' + bytes(8)


def _coco_cfg(root, key='val_dataloader', **kwargs):
    ds = dict(type='CocoDataset', data_root=str(root) + '/',
              ann_file='annotations/val.json', data_prefix=dict(img='val2017/'), **kwargs)
    return Config({key: dict(dataset=ds)})


def _coco(root, num_images=30, write_images=True, annotations=()):
    (root / 'annotations').mkdir(parents=True)
    (root / 'val2017').mkdir()
    images = [dict(id=i, file_name=f'{i:04d}.jpg', height=8, width=8)
              for i in range(num_images)]
    with open(root / 'annotations' / 'val.json', 'w') as f:
        json.dump(dict(images=images, annotations=list(annotations),
                       categories=[dict(id=1, name='cell')]), f)
    if write_images:
        for im in images:
            (root / 'val2017' / im['file_name']).write_bytes(JPEG)
    return images


def test_complete_coco_passes(tmp_path):
    _coco(tmp_path)
    assert check_datasets(_coco_cfg(tmp_path)) == []


def test_broken_annotation_json(tmp_path):
    _coco(tmp_path)
    ann = tmp_path / 'annotations' / 'val.json'
    ann.write_text(ann.read_text()[:-20])  # cut short, as by an interrupted copy
    problems = check_datasets(_coco_cfg(tmp_path))
    assert len(problems) == 1
    assert 'is not valid JSON' in problems[0] and str(ann) in problems[0]


def test_listed_images_missing(tmp_path):
    images = _coco(tmp_path)
    (tmp_path / 'val2017' / images[0]['file_name']).unlink()
    problems = check_datasets(_coco_cfg(tmp_path))
    assert len(problems) == 1
    assert '1 of 20 sampled images' in problems[0] and '0000.jpg' in problems[0]


def test_empty_image_file_named(tmp_path):
    # 0 bytes, as left by an interrupted download; outside the sample of 20: every listed
    # file's size is checked.  OpenCV would stop training with "!buf.empty()", naming no file
    _coco(tmp_path)
    (tmp_path / 'val2017' / '0025.jpg').write_bytes(b'')
    problems = check_datasets(_coco_cfg(tmp_path))
    assert len(problems) == 1
    assert ("1 of 30 images listed in" in problems[0] and "are empty (0 bytes), e.g. ['"
            + str(tmp_path / 'val2017' / '0025.jpg') + "']" in problems[0]
            and 'Re-download or re-convert these files' in problems[0]), problems[0]


def test_non_image_file_named(tmp_path):
    _coco(tmp_path)
    (tmp_path / 'val2017' / '0003.jpg').write_bytes(b'<html>404 Not Found</html>')
    problems = check_datasets(_coco_cfg(tmp_path))
    assert len(problems) == 1
    assert ("1 of 20 sampled images listed in" in problems[0]
            and "are not images (no JPEG / PNG / BMP / TIFF / WebP / GIF header), e.g. "
            f"['{tmp_path / 'val2017' / '0003.jpg'}' (starts with b'<html>404 No')]"
            in problems[0]), problems[0]


def test_train_set_without_boxes(tmp_path):
    # mmdet's filter_empty_gt would drop every image, and mmengine then fails with
    # "need at least one array to concatenate"
    _coco(tmp_path)
    cfg = _coco_cfg(tmp_path, 'train_dataloader', filter_cfg=dict(filter_empty_gt=True))
    problems = check_datasets(cfg)
    assert len(problems) == 1
    assert (f"no image is left: ann_file '{tmp_path / 'annotations' / 'val.json'}' lists 30 "
            "images and 0 annotations, so filter_cfg filter_empty_gt=True removes all 30"
            in problems[0]), problems[0]
    # test_mode (val / test sets) and no filter_cfg keep the images
    assert check_datasets(_coco_cfg(tmp_path, 'train_dataloader')) == []
    assert check_datasets(_coco_cfg(tmp_path, 'train_dataloader', test_mode=True,
                                    filter_cfg=dict(filter_empty_gt=True))) == []


def test_train_set_removed_by_min_size(tmp_path):
    _coco(tmp_path, annotations=[dict(id=1, image_id=0, category_id=1, bbox=[0, 0, 4, 4],
                                      area=16, iscrowd=0)])
    cfg = _coco_cfg(tmp_path, 'train_dataloader',
                    filter_cfg=dict(filter_empty_gt=True, min_size=32))
    problems = check_datasets(cfg)
    assert len(problems) == 1
    assert ('filter_empty_gt=True keeps 1 image with a box, and min_size=32 removes it '
            '(the largest image with a box is 8 x 8)' in problems[0]), problems[0]
    cfg.train_dataloader.dataset.filter_cfg.min_size = 8
    assert check_datasets(cfg) == []


def test_segmentation_images_without_label_maps(tmp_path):
    for split in ('images', 'annotations'):
        (tmp_path / split / 'validation').mkdir(parents=True)
    for i in range(5):
        (tmp_path / 'images' / 'validation' / f'{i}.jpg').write_bytes(JPEG)
        if i != 3:
            (tmp_path / 'annotations' / 'validation' / f'{i}.png').write_bytes(PNG)
    ds = dict(type='ADE20KDataset', data_root=str(tmp_path),
              data_prefix=dict(img_path='images/validation',
                               seg_map_path='annotations/validation'))
    problems = check_datasets(Config(dict(val_dataloader=dict(dataset=ds))))
    assert len(problems) == 1 and 'label maps (*.png)' in problems[0] and '3.png' in problems[0]
    (tmp_path / 'annotations' / 'validation' / '3.png').write_bytes(PNG)
    assert check_datasets(Config(dict(val_dataloader=dict(dataset=ds)))) == []
    (tmp_path / 'images' / 'validation' / '2.jpg').write_bytes(b'')  # as OpenCV can't read
    problems = check_datasets(Config(dict(val_dataloader=dict(dataset=ds))))
    assert len(problems) == 1 and ("1 of 5 images (*.jpg) are empty (0 bytes), e.g. ['"
                                   f"{tmp_path / 'images' / 'validation' / '2.jpg'}']"
                                   in problems[0]), problems[0]
