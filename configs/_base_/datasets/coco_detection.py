# mmdet's COCO detection set; the training pipeline is stated because its image scale is part of
# each paper's recipe (single scale 1333x800; the 3x configs swap the Resize for multi-scale).
_base_ = 'mmdet::_base_/datasets/coco_detection.py'
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
