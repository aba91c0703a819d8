# The playing-card photos in data/photos/cards/ (296 train, 67 test phone photos, six classes;
# tools/dataset_converters/make_photo_data.py), 320-pixel long side, batch 4, and a schedule
# of 6 epochs (444 iterations; warm-up 30 iterations, LR steps at epochs 4 and 5.5 -> 4, 6).
# A photo config inherits this file next to its model config and picks the entries of
# `cards` (as configs/demo/_base_/coco_demo.py does for the drawn shapes).
cards = dict(
    classes=('ace', 'jack', 'king', 'nine', 'queen', 'ten'),
    num_classes=6,
    data_root='data/photos/cards/')
cards.update(
    train_dataloader=dict(
        batch_size=4,
        num_workers=0,
        persistent_workers=False,
        sampler=dict(type='DefaultSampler', shuffle=True),
        dataset=dict(
            type='CocoDataset',
            data_root=cards['data_root'],
            ann_file='annotations/instances_train.json',
            data_prefix=dict(img='images/train/'),
            metainfo=dict(classes=cards['classes']),
            filter_cfg=dict(filter_empty_gt=True, min_size=4),
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations', with_bbox=True),
                dict(type='Resize', scale=(320, 320), keep_ratio=True),
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
            data_root=cards['data_root'],
            ann_file='annotations/instances_test.json',
            data_prefix=dict(img='images/test/'),
            metainfo=dict(classes=cards['classes']),
            test_mode=True,
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='Resize', scale=(320, 320), keep_ratio=True),
                dict(type='LoadAnnotations', with_bbox=True),
                dict(type='PackDetInputs',
                     meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                'scale_factor')),
            ])),
    evaluator=dict(type='CocoMetric', ann_file=cards['data_root']
                   + 'annotations/instances_test.json', metric='bbox', format_only=False),
    train_cfg=dict(type='EpochBasedTrainLoop', max_epochs=6, val_interval=6),
    param_scheduler=[
        dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=30),
        dict(type='MultiStepLR', begin=0, end=6, by_epoch=True, milestones=[4, 6],
             gamma=0.1),
    ],
    default_hooks=dict(checkpoint=dict(interval=6), logger=dict(interval=10)))
