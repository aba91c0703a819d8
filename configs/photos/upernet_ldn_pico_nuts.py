_base_ = [
    '../_base_/models/upernet_ldn.py',
    '../_base_/datasets/nuts_seg.py',
    '../_base_/schedules/nuts_seg_400i.py',
    'mmseg::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# UperNet on the nut photos (configs/_base_/datasets/nuts_seg.py): the pico backbone of
# semfpn_ldn_pico_nuts.py, a 64-channel pyramid-pooling head, a 32-channel auxiliary head and
# the Semantic FPN's from-scratch learning rate:
#   bash tools/demo.sh configs/photos/upernet_ldn_pico_nuts.py
data_preprocessor = dict(size=(256, 256))  # the training crop
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        arch=dict(embed_dims=(32, 64, 160, 256),
                  depths=(1, 1, 2, 1), num_heads=(2, 4, 10, 16)),
        stem='conv', overlap_downsample=True, drop_path_rate=0.0,
        init_cfg=None),  # from scratch
    decode_head=dict(in_channels=[32, 64, 160, 256], channels=64,
                     num_classes=4),
    auxiliary_head=dict(in_channels=160, channels=32,
                        num_classes=4))
# the optimiser of ../upernet_ldn_tiny_ade20k_160k.py at the demos' from-scratch learning rate
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={'tap_logits': dict(decay_mult=0.0),
                                    'step_logit': dict(decay_mult=0.0)}))
