# mmdet's Mask R-CNN (FPN P2-P6) with its ResNet-50 replaced by an mmlinattn backbone:
# maskrcnn_<family>.py sets the backbone type, a config the arch, drop-path rate and the FPN's
# in_channels.  All four stages (strides 4-32) feed the FPN.
_base_ = 'mmdet::_base_/models/mask-rcnn_r50_fpn.py'
model = dict(
    backbone=dict(
        _delete_=True,  # none of the ResNet's arguments apply
        out_indices=(0, 1, 2, 3)))
