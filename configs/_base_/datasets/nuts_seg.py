# The nut photos of data/photos/nuts/ as a semantic-segmentation set (14 train, 4 val photos,
# 512x384; label maps 0 = background, 1 date, 2 fig, 3 hazelnut; written by
# tools/dataset_converters/make_photo_data.py): random rescale (0.5-1.5) and 256x256 crops for
# training, whole images for evaluation, batch 4.  Its schedule: ../schedules/nuts_seg_400i.py;
# a model on it sets its data_preprocessor's size to the crop, (256, 256).
_base_ = 'mmseg::_base_/datasets/ade20k.py'
train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type='BaseSegDataset',
        data_root='data/photos/nuts/',
        data_prefix=dict(img_path='images/train', seg_map_path='labels/train'),
        img_suffix='.jpg',
        seg_map_suffix='.png',
        reduce_zero_label=False,
        metainfo=dict(classes=('background', 'date', 'fig', 'hazelnut'),
                      palette=[(0, 0, 0), (150, 40, 40), (90, 110, 60), (200, 160, 90)]),
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations'),
            dict(type='RandomResize', scale=(512, 384), ratio_range=(0.5, 1.5), keep_ratio=True),
            dict(type='RandomCrop', crop_size=(256, 256), cat_max_ratio=0.75),
            dict(type='RandomFlip', prob=0.5),
            dict(type='PackSegInputs'),
        ]))
val_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='BaseSegDataset',
        data_root='data/photos/nuts/',
        data_prefix=dict(img_path='images/val', seg_map_path='labels/val'),
        img_suffix='.jpg',
        seg_map_suffix='.png',
        reduce_zero_label=False,
        metainfo=dict(classes=('background', 'date', 'fig', 'hazelnut'),
                      palette=[(0, 0, 0), (150, 40, 40), (90, 110, 60), (200, 160, 90)]),
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='Resize', scale=(512, 384), keep_ratio=True),
            dict(type='LoadAnnotations'),
            dict(type='PackSegInputs'),
        ]))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
