_base_ = ['./semfpn_soft_pico_nuts.py']

# A Swin Transformer peer of the pico Semantic FPNs on the nut photos: mmseg's Swin with
# the pico backbones' depths (1-1-2-1 blocks; Swin doubles its width per stage, 32-256),
# window 7, from scratch, with the same FPN, head, learning rate and schedule:
#   bash tools/demo.sh configs/photos/semfpn_swin_pico_nuts.py
model = dict(
    backbone=dict(
        _delete_=True, type='mmseg.SwinTransformer', embed_dims=32, depths=(1, 1, 2, 1),
        num_heads=(1, 2, 4, 8), window_size=7, mlp_ratio=4, strides=(4, 2, 2, 2),
        out_indices=(0, 1, 2, 3), qkv_bias=True, drop_path_rate=0.0, patch_norm=True,
        init_cfg=None),
    neck=dict(in_channels=[32, 64, 128, 256]))
