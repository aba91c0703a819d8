# The nut photos of data/photos/nuts/ with their instance masks (14 train, 4 val photos,
# 512x384, three classes; tools/dataset_converters/make_photo_data.py), batch 2, box and mask
# AP.  Its schedule: ../schedules/nuts_instance_58e.py.
_base_ = './coco_instance.py'
train_dataloader = dict(
    batch_size=2,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(
        type='CocoDataset',
        data_root='data/photos/nuts/',
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='images/train/'),
        metainfo=dict(classes=('date', 'fig', 'hazelnut')),
        filter_cfg=dict(filter_empty_gt=True, min_size=4),
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
            dict(type='Resize', scale=(512, 384), keep_ratio=True),
            dict(type='RandomFlip', prob=0.5),
            dict(type='PackDetInputs'),
        ]))
val_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='CocoDataset',
        data_root='data/photos/nuts/',
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='images/val/'),
        metainfo=dict(classes=('date', 'fig', 'hazelnut')),
        test_mode=True,
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='Resize', scale=(512, 384), keep_ratio=True),
            dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
            dict(type='PackDetInputs',
                 meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
        ]))
test_dataloader = val_dataloader
val_evaluator = dict(type='CocoMetric', ann_file='data/photos/nuts/annotations/instances_val.json',
                     metric=['bbox', 'segm'], format_only=False)
test_evaluator = val_evaluator
