_base_ = ['./semfpn_soft_pico_nuts.py']

# The peer of the pico Semantic FPNs on the nut photos: mmseg's ResNet-18 (V1c stem) from
# scratch (batch statistics trained, nothing frozen: there are no ImageNet weights offline)
# with the same 64-channel FPN and head, learning rate and schedule:
#   bash tools/demo.sh configs/photos/semfpn_r18_nuts.py
model = dict(
    backbone=dict(
        _delete_=True, type='mmseg.ResNetV1c', depth=18, num_stages=4,
        out_indices=(0, 1, 2, 3), dilations=(1, 1, 1, 1), strides=(1, 2, 2, 2),
        norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False, style='pytorch',
        contract_dilation=True, init_cfg=None),
    neck=dict(in_channels=[64, 128, 256, 512]))
