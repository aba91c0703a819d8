# The playing-card photos in data/photos/cards/ (296 train, 67 test phone photos, six classes;
# tools/dataset_converters/make_photo_data.py), 320-pixel long side, batch 4.  Its schedule:
# ../schedules/cards_6e.py.
_base_ = './coco_detection.py'
train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(
        type='CocoDataset',
        data_root='data/photos/cards/',
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='images/train/'),
        metainfo=dict(classes=('ace', 'jack', 'king', 'nine', 'queen', 'ten')),
        filter_cfg=dict(filter_empty_gt=True, min_size=4),
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations', with_bbox=True),
            dict(type='Resize', scale=(320, 320), keep_ratio=True),
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
        data_root='data/photos/cards/',
        ann_file='annotations/instances_test.json',
        data_prefix=dict(img='images/test/'),
        metainfo=dict(classes=('ace', 'jack', 'king', 'nine', 'queen', 'ten')),
        test_mode=True,
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='Resize', scale=(320, 320), keep_ratio=True),
            dict(type='LoadAnnotations', with_bbox=True),
            dict(type='PackDetInputs',
                 meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
        ]))
test_dataloader = val_dataloader
val_evaluator = dict(type='CocoMetric', ann_file='data/photos/cards/annotations/instances_test.json',
                     metric='bbox', format_only=False)
test_evaluator = val_evaluator
