# The demo COCO set of coco_demo.py with its masks: boxes and masks of the seven shape classes
# for training, box and mask AP (coco_instance.py's metrics) for evaluation.
_base_ = './coco_instance.py'
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
            dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
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
