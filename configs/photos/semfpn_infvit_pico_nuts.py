_base_ = ['../semfpn_infvit_tiny_ade20k_40k.py', './_base_/nuts_seg.py']

# Semantic FPN on the nut photos (configs/photos/_base_/nuts_seg.py): the pico backbone of
# configs/demo/retinanet_infvit_pico_demo.py, a 64-channel FPN and head, and the RetinaNet
# demo's from-scratch learning rate, with the early-convolution stem (docs/user_guides/photos.md):
#   bash tools/demo.sh configs/photos/semfpn_infvit_pico_nuts.py
model = dict(
    data_preprocessor=dict(size=_base_.nuts_seg.crop_size),
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=(32, 64, 160, 256),
                  depths=(1, 1, 2, 1), mlp_ratios=(8, 8, 4, 4)),
        stem='conv', drop_path_rate=0.0),
    neck=dict(in_channels=[32, 64, 160, 256], out_channels=64),
    decode_head=dict(in_channels=[64, 64, 64, 64], channels=64,
                     num_classes=_base_.nuts_seg.num_classes))
optim_wrapper = dict(optimizer=dict(lr=1e-3))
train_dataloader = _base_.nuts_seg.train_dataloader
val_dataloader = _base_.nuts_seg.test_dataloader
test_dataloader = _base_.nuts_seg.test_dataloader
val_evaluator = _base_.nuts_seg.evaluator
test_evaluator = _base_.nuts_seg.evaluator
train_cfg = _base_.nuts_seg.train_cfg
param_scheduler = _base_.nuts_seg.param_scheduler
default_hooks = _base_.nuts_seg.default_hooks
