_base_ = ['../upernet_ldn_tiny_ade20k_160k.py', './_base_/nuts_seg.py']

# UperNet on the nut photos (configs/photos/_base_/nuts_seg.py): the pico backbone of
# semfpn_ldn_pico_nuts.py, a 64-channel pyramid-pooling head, a 32-channel auxiliary head and
# the Semantic FPN's from-scratch learning rate:
#   bash tools/demo.sh configs/photos/upernet_ldn_pico_nuts.py
model = dict(
    data_preprocessor=dict(size=_base_.nuts_seg.crop_size),
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=(32, 64, 160, 256),
                  depths=(1, 1, 2, 1), num_heads=(2, 4, 10, 16)),
        stem='conv', overlap_downsample=True,
        drop_path_rate=0.0),
    decode_head=dict(in_channels=[32, 64, 160, 256], channels=64,
                     num_classes=_base_.nuts_seg.num_classes),
    auxiliary_head=dict(in_channels=160, channels=32,
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
