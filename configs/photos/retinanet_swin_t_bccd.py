_base_ = ['./retinanet_soft_pico_bccd.py']

# The full-width Swin-T peer of the pico RetinaNets on the blood-smear photos: mmdet's Swin-T
# as its RetinaNet config sets it (96 channels, 2-2-6-2 blocks, 3-6-12-24 heads, window 7,
# drop path 0.2; 28 M parameters), from scratch (no ImageNet weights offline), with the same
# FPN, head, learning rate and schedule as the pico backbones:
#   bash tools/demo.sh configs/photos/retinanet_swin_t_bccd.py
model = dict(
    backbone=dict(
        _delete_=True, type='mmdet.SwinTransformer', embed_dims=96, depths=(2, 2, 6, 2),
        num_heads=(3, 6, 12, 24), window_size=7, mlp_ratio=4, strides=(4, 2, 2, 2),
        out_indices=(1, 2, 3), qkv_bias=True, qk_scale=None, drop_rate=0.0,
        attn_drop_rate=0.0, drop_path_rate=0.2, patch_norm=True, with_cp=False,
        convert_weights=False, init_cfg=None),
    neck=dict(in_channels=[192, 384, 768]))
