_base_ = ['./retinanet_soft_pico_bccd.py']

# The peer of the pico RetinaNets on the blood-smear photos: mmdet's ResNet-18 from scratch
# (batch statistics trained, nothing frozen: there are no ImageNet weights offline) with the
# same FPN, head, learning rate and schedule:
#   bash tools/demo.sh configs/photos/retinanet_r18_bccd.py
model = dict(
    backbone=dict(
        _delete_=True, type='mmdet.ResNet', depth=18, num_stages=4, out_indices=(1, 2, 3),
        frozen_stages=-1, norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
        style='pytorch', init_cfg=None),
    neck=dict(in_channels=[128, 256, 512]))
