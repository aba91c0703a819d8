_base_ = ['../maskrcnn_ldn_tiny_1x.py', './_base_/coco_demo.py']

# Mask R-CNN on the demo data (boxes and masks of the seven shape classes): the LDN pico
# backbone of configs/demo/retinanet_ldn_pico_demo.py, a 128-channel FPN, RPN and RoI heads
# narrowed to match (a two-conv, 64-channel mask head), and the same from-scratch learning
# rate and 400-iteration schedule.
#   bash tools/demo.sh configs/demo/maskrcnn_ldn_pico_demo.py
model = dict(
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=(32, 64, 160, 256), depths=(1, 1, 2, 1),
                  num_heads=(2, 4, 10, 16)),
        drop_path_rate=0.0),
    neck=dict(in_channels=[32, 64, 160, 256], out_channels=128),
    rpn_head=dict(in_channels=128, feat_channels=128),
    # mmcv's RoIAlign runs on one core and was half of a training step: two samples per
    # bin side (as Detectron2) instead of mmdet's adaptive count, and 128 sampled RoIs (of
    # mmdet's 512) per image for a few shapes each, make a training step about 1.5x faster.
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=128, roi_layer=dict(sampling_ratio=2)),
        bbox_head=dict(in_channels=128, fc_out_channels=256,
                       num_classes=_base_.demo.num_classes),
        mask_roi_extractor=dict(out_channels=128, roi_layer=dict(sampling_ratio=2)),
        mask_head=dict(num_convs=2, in_channels=128, conv_out_channels=64,
                       num_classes=_base_.demo.num_classes)),
    train_cfg=dict(rcnn=dict(sampler=dict(num=128))))
optim_wrapper = dict(optimizer=dict(lr=1e-3))

# The demo data and schedule of configs/demo/_base_/coco_demo.py, with masks loaded for
# training (the evaluator keeps the base config's bbox and segm metrics).
train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root='data/demo/coco/',
        metainfo=dict(classes=_base_.demo.classes),
        filter_cfg=dict(min_size=4),
        pipeline=[
            dict(type='LoadImageFromFile'),
            dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
            dict(type='Resize', scale=(320, 320), keep_ratio=True),
            dict(type='RandomFlip', prob=0.5),
            dict(type='PackDetInputs'),
        ]))
val_dataloader = _base_.demo.test_dataloader
test_dataloader = _base_.demo.test_dataloader
val_evaluator = _base_.demo.evaluator
test_evaluator = _base_.demo.evaluator
train_cfg = _base_.demo.train_cfg
param_scheduler = _base_.demo.param_scheduler
default_hooks = _base_.demo.default_hooks
