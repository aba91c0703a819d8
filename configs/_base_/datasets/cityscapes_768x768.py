# mmseg's Cityscapes set with the SOFT++ paper's 768x768 training crops (§4.3); images are
# resized as in mmseg's 512x1024 recipe (long side 2048, ratio 0.5-2.0).  A model trained on
# these crops tests with a 768x768 sliding window (set in the configs' model.test_cfg).
_base_ = 'mmseg::_base_/datasets/cityscapes.py'
crop_size = (768, 768)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='RandomResize', scale=(2048, 1024), ratio_range=(0.5, 2.0), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
