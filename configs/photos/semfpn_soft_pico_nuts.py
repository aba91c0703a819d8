_base_ = [
    '../_base_/models/semfpn_soft.py',
    '../_base_/datasets/nuts_seg.py',
    '../_base_/schedules/nuts_seg_400i.py',
    'mmseg::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# Semantic FPN on the nut photos (configs/_base_/datasets/nuts_seg.py): the pico backbone of
# configs/demo/retinanet_soft_pico_demo.py, a 64-channel FPN and head, and the RetinaNet
# demo's from-scratch learning rate:
#   bash tools/demo.sh configs/photos/semfpn_soft_pico_nuts.py
data_preprocessor = dict(size=(256, 256))  # the training crop
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        arch=dict(embed_dims=(32, 64, 160, 256),
                  num_heads=(1, 2, 5, 8), depths=(1, 1, 2, 1)),
        drop_path_rate=0.0,
        pinv='newton',  # the paper's Newton-Schulz A^+, as this recipe was measured
        init_cfg=None),  # from scratch
    neck=dict(in_channels=[32, 64, 160, 256], out_channels=64),
    decode_head=dict(in_channels=[64, 64, 64, 64], channels=64,
                     num_classes=4))
# the optimiser of ../semfpn_soft_tiny_ade20k_40k.py at the demos' from-scratch learning rate
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=1e-4),
    paramwise_cfg=dict(custom_keys={'pos_embed': dict(decay_mult=0.0)}))
