# The nut photos of data/photos/nuts/ as a semantic-segmentation set (14 train, 4 val photos,
# 512x384; label maps 0 = background, 1 date, 2 fig, 3 hazelnut; written by
# tools/dataset_converters/make_photo_data.py): random rescale (0.5-1.5) and 256x256 crops for
# training, whole images for evaluation, batch 4, 400 iterations (warm-up 30, then poly decay).
# A photo config inherits this file next to its model config and picks the entries of
# `nuts_seg` (as configs/demo/_base_/coco_demo.py does for the drawn shapes).
nuts_seg = dict(
    classes=('background', 'date', 'fig', 'hazelnut'),
    palette=[(0, 0, 0), (150, 40, 40), (90, 110, 60), (200, 160, 90)],
    num_classes=4,
    crop_size=(256, 256),
    data_root='data/photos/nuts/')
nuts_seg.update(
    train_dataloader=dict(
        batch_size=4,
        num_workers=0,
        persistent_workers=False,
        sampler=dict(type='InfiniteSampler', shuffle=True),
        dataset=dict(
            type='BaseSegDataset',
            data_root=nuts_seg['data_root'],
            data_prefix=dict(img_path='images/train', seg_map_path='labels/train'),
            img_suffix='.jpg',
            seg_map_suffix='.png',
            reduce_zero_label=False,
            metainfo=dict(classes=nuts_seg['classes'], palette=nuts_seg['palette']),
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations'),
                dict(type='RandomResize', scale=(512, 384), ratio_range=(0.5, 1.5),
                     keep_ratio=True),
                dict(type='RandomCrop', crop_size=nuts_seg['crop_size'], cat_max_ratio=0.75),
                dict(type='RandomFlip', prob=0.5),
                dict(type='PackSegInputs'),
            ])),
    test_dataloader=dict(
        batch_size=1,
        num_workers=0,
        persistent_workers=False,
        sampler=dict(type='DefaultSampler', shuffle=False),
        dataset=dict(
            type='BaseSegDataset',
            data_root=nuts_seg['data_root'],
            data_prefix=dict(img_path='images/val', seg_map_path='labels/val'),
            img_suffix='.jpg',
            seg_map_suffix='.png',
            reduce_zero_label=False,
            metainfo=dict(classes=nuts_seg['classes'], palette=nuts_seg['palette']),
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='Resize', scale=(512, 384), keep_ratio=True),
                dict(type='LoadAnnotations'),
                dict(type='PackSegInputs'),
            ])),
    evaluator=dict(type='IoUMetric', iou_metrics=['mIoU']),
    train_cfg=dict(type='IterBasedTrainLoop', max_iters=400, val_interval=400),
    param_scheduler=[
        dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=30),
        dict(type='PolyLR', eta_min=0.0, power=0.9, begin=30, end=400, by_epoch=False),
    ],
    default_hooks=dict(checkpoint=dict(by_epoch=False, interval=400),
                       logger=dict(interval=10)))
