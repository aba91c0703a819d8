# mmseg's UperNet (UPerHead on strides 4-32 + an FCN auxiliary head on stride 16, as in its Swin
# configs) with the Swin backbone replaced by an mmlinattn backbone: upernet_<family>.py sets the
# backbone type, a config the arch, drop-path rate, head in_channels and classes.
_base_ = ['../forked_stacks.py', 'mmseg::_base_/models/upernet_swin.py']
model = dict(
    pretrained=None,
    backbone=dict(
        _delete_=True,  # none of the Swin's arguments apply
        out_indices=(0, 1, 2, 3)))
