_base_ = ['./retinanet_soft_pico_bccd.py']

# A Swin Transformer peer of the pico RetinaNets on the blood-smear photos: mmdet's Swin with
# the pico backbones' depths (1-1-2-1 blocks; Swin doubles its width per stage, 32-256),
# window 7, from scratch, with the same FPN, head, learning rate and schedule:
#   bash tools/demo.sh configs/photos/retinanet_swin_pico_bccd.py
model = dict(
    backbone=dict(
        _delete_=True, type='mmdet.SwinTransformer', embed_dims=32, depths=(1, 1, 2, 1),
        num_heads=(1, 2, 4, 8), window_size=7, mlp_ratio=4, strides=(4, 2, 2, 2),
        out_indices=(1, 2, 3), qkv_bias=True, drop_path_rate=0.0, patch_norm=True,
        init_cfg=None),
    neck=dict(in_channels=[64, 128, 256]))
