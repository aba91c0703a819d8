# mmdet's RetinaNet (FPN P3-P7, 256 channels) with its ResNet-50 replaced by an mmlinattn
# backbone: retinanet_<family>.py sets the backbone type, a config the arch, drop-path rate and
# the FPN's in_channels.  Strides 8/16/32 feed the FPN from its first level; P6/P7 come from C5.
_base_ = 'mmdet::_base_/models/retinanet_r50_fpn.py'
model = dict(
    backbone=dict(
        _delete_=True,  # none of the ResNet's arguments apply
        out_indices=(1, 2, 3)),
    neck=dict(start_level=0, num_outs=5))
