# mmseg's Semantic FPN (FPN, 256 channels, + FPNHead on strides 4-32) with its ResNet-50
# replaced by an mmlinattn backbone: semfpn_<family>.py sets the backbone type, a config the
# arch, drop-path rate, the FPN's in_channels and classes.  Nothing downloads (pretrained=None).
_base_ = ['../forked_stacks.py', 'mmseg::_base_/models/fpn_r50.py']
model = dict(
    pretrained=None,
    backbone=dict(
        _delete_=True,  # none of the ResNet's arguments apply
        out_indices=(0, 1, 2, 3)))
