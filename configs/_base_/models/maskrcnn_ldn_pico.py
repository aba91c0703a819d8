# The pico Mask R-CNN on an LDN backbone: the LDN pico arch, a 128-channel FPN, RPN and RoI
# heads narrowed to match (a two-conv, 64-channel mask head); a config sets the classes.
_base_ = './maskrcnn_ldn.py'
model = dict(
    backbone=dict(
        arch=dict(embed_dims=(32, 64, 160, 256), depths=(1, 1, 2, 1),
                  num_heads=(2, 4, 10, 16)),
        drop_path_rate=0.0,
        init_cfg=None),  # from scratch
    neck=dict(in_channels=[32, 64, 160, 256], out_channels=128),
    rpn_head=dict(in_channels=128, feat_channels=128),
    # mmcv's RoIAlign runs on one core and was half of a training step: two samples per
    # bin side (as Detectron2) instead of mmdet's adaptive count, and 128 sampled RoIs (of
    # mmdet's 512) per image for a few shapes each, make a training step about 1.5x faster.
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=128, roi_layer=dict(sampling_ratio=2)),
        bbox_head=dict(in_channels=128, fc_out_channels=256),
        mask_roi_extractor=dict(out_channels=128, roi_layer=dict(sampling_ratio=2)),
        mask_head=dict(num_convs=2, in_channels=128, conv_out_channels=64)),
    train_cfg=dict(rcnn=dict(sampler=dict(num=128))))
