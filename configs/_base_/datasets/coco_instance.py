# mmdet's COCO instance set (boxes and masks); the training pipeline is stated as in
# coco_detection.py (single scale 1333x800; the 3x configs swap the Resize for multi-scale).
_base_ = 'mmdet::_base_/datasets/coco_instance.py'
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
