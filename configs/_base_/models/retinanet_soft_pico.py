# The pico RetinaNet on a SOFT++ backbone: the tiny arch reduced in width and depth, a
# 128-channel FPN and a two-conv RetinaNet head, small enough to train from scratch on 2
# CPU cores in minutes (configs/demo/, configs/photos/); a config sets the classes.
_base_ = './retinanet_soft.py'
model = dict(
    backbone=dict(
        arch=dict(embed_dims=(32, 64, 160, 256), num_heads=(1, 2, 5, 8),
                  depths=(1, 1, 2, 1)),
        drop_path_rate=0.0,
        pinv='newton',  # the paper's Newton-Schulz A^+, as this recipe was measured
        init_cfg=None),  # from scratch
    neck=dict(in_channels=[64, 160, 256], out_channels=128),
    bbox_head=dict(in_channels=128, feat_channels=128, stacked_convs=2))
