# The nut photos of data/photos/nuts/ with their instance masks (14 train, 4 val photos,
# 512x384, three classes; tools/dataset_converters/make_photo_data.py), batch 2, 58 epochs
# (406 iterations; warm-up 30 iterations, LR steps at epochs 39 and 53), box and mask AP.
# A photo config inherits this file next to its model config and picks the entries of
# `nuts_instance` (as configs/demo/_base_/coco_demo.py does for the drawn shapes).
nuts_instance = dict(
    classes=('date', 'fig', 'hazelnut'),
    num_classes=3,
    data_root='data/photos/nuts/')
nuts_instance.update(
    train_dataloader=dict(
        batch_size=2,
        num_workers=0,
        persistent_workers=False,
        sampler=dict(type='DefaultSampler', shuffle=True),
        dataset=dict(
            type='CocoDataset',
            data_root=nuts_instance['data_root'],
            ann_file='annotations/instances_train.json',
            data_prefix=dict(img='images/train/'),
            metainfo=dict(classes=nuts_instance['classes']),
            filter_cfg=dict(filter_empty_gt=True, min_size=4),
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                dict(type='Resize', scale=(512, 384), keep_ratio=True),
                dict(type='RandomFlip', prob=0.5),
                dict(type='PackDetInputs'),
            ])),
    test_dataloader=dict(
        batch_size=1,
        num_workers=0,
        persistent_workers=False,
        drop_last=False,
        sampler=dict(type='DefaultSampler', shuffle=False),
        dataset=dict(
            type='CocoDataset',
            data_root=nuts_instance['data_root'],
            ann_file='annotations/instances_val.json',
            data_prefix=dict(img='images/val/'),
            metainfo=dict(classes=nuts_instance['classes']),
            test_mode=True,
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='Resize', scale=(512, 384), keep_ratio=True),
                dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                dict(type='PackDetInputs',
                     meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                'scale_factor')),
            ])),
    evaluator=dict(type='CocoMetric', ann_file=nuts_instance['data_root']
                   + 'annotations/instances_val.json', metric=['bbox', 'segm'],
                   format_only=False),
    train_cfg=dict(type='EpochBasedTrainLoop', max_epochs=58, val_interval=58),
    param_scheduler=[
        dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=30),
        dict(type='MultiStepLR', begin=0, end=58, by_epoch=True, milestones=[39, 53],
             gamma=0.1),
    ],
    default_hooks=dict(checkpoint=dict(interval=58), logger=dict(interval=7)))
