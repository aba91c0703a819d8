"""The dataset pre-flight check reads what it can cheaply: a broken
annotation JSON, images missing from the sampled list, or segmentation images without their
label maps fail before the run starts."""
import json

from mmengine.config import Config

from mmlinattn.utils.data_check import check_datasets


def _coco_cfg(root):
    ds = dict(type='CocoDataset', data_root=str(root) + '/',
              ann_file='annotations/val.json', data_prefix=dict(img='val2017/'))
    return Config(dict(val_dataloader=dict(dataset=ds)))


def _coco(root, num_images=30, write_images=True):
    (root / 'annotations').mkdir(parents=True)
    (root / 'val2017').mkdir()
    images = [dict(id=i, file_name=f'{i:04d}.jpg', height=8, width=8)
              for i in range(num_images)]
    with open(root / 'annotations' / 'val.json', 'w') as f:
        json.dump(dict(images=images, annotations=[], categories=[]), f)
    if write_images:
        for im in images:
            (root / 'val2017' / im['file_name']).write_bytes(b'jpg')
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


def test_segmentation_images_without_label_maps(tmp_path):
    for split in ('images', 'annotations'):
        (tmp_path / split / 'validation').mkdir(parents=True)
    for i in range(5):
        (tmp_path / 'images' / 'validation' / f'{i}.jpg').write_bytes(b'jpg')
        if i != 3:
            (tmp_path / 'annotations' / 'validation' / f'{i}.png').write_bytes(b'png')
    ds = dict(type='ADE20KDataset', data_root=str(tmp_path),
              data_prefix=dict(img_path='images/validation',
                               seg_map_path='annotations/validation'))
    problems = check_datasets(Config(dict(val_dataloader=dict(dataset=ds))))
    assert len(problems) == 1 and 'label maps (*.png)' in problems[0] and '3.png' in problems[0]
    (tmp_path / 'annotations' / 'validation' / '3.png').write_bytes(b'png')
    assert check_datasets(Config(dict(val_dataloader=dict(dataset=ds)))) == []
