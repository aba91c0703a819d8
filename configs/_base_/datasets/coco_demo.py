# The demo COCO set written by `python tools/dataset_converters/make_demo_data.py` (64 training
# images, the seven shape classes of mmlinattn/datasets/demo.py), 320x320 images, batch 4.  Its
# schedule is ../schedules/coco_demo_25e.py; these are the settings
# `tools/misc/demo_overrides.py CONFIG --iters 400` gives any RetinaNet config.
_base_ = './coco_detection.py'
train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root='data/demo/coco/',
        metainfo=dict(classes=('triangle', 'square', 'pentagon', 'circle', 'ellipse', 'star',
                               'cross')),
        filter_cfg=dict(min_size=4),
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations', with_bbox=True),
            dict(type='Resize', scale=(320, 320), keep_ratio=True),
            dict(type='RandomFlip', prob=0.5),
            dict(type='PackDetInputs'),
        ]))
val_dataloader = dict(
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root='data/demo/coco/',
        metainfo=dict(classes=('triangle', 'square', 'pentagon', 'circle', 'ellipse', 'star',
                               'cross')),
        pipeline=[
            dict(type='LoadImageFromFile', backend_args=None),
            dict(type='Resize', scale=(320, 320), keep_ratio=True),
            dict(type='LoadAnnotations', with_bbox=True),
            dict(type='PackDetInputs',
                 meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
        ]))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='data/demo/coco/annotations/instances_val2017.json')
test_evaluator = val_evaluator
