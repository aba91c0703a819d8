# UperNet on the isotropic InfViT (InfViTPlain, stride 16): each block's map resampled BEiT-style
# to strides 4/8/16/32 by mmlinattn.SimpleFeaturePyramid; a config sets the arch and in_channels.
# Weights: the configs start from scratch (init_cfg=None) under a fine-tuning recipe for
# ImageNet-1k weights, and none are released. To fine-tune, pretrain timm's
# infvit_plain_linear_<arch>, convert it to the checkpoints/infvitplain_<arch>_in1k.pth a config
# names (tools/model_converters/convert_checkpoint.py, docs/user_guides/weights.md) and add
# init_cfg=dict(type='Pretrained', checkpoint='checkpoints/infvitplain_<arch>_in1k.pth') to the
# backbone.
_base_ = './upernet.py'
model = dict(
    backbone=dict(type='mmlinattn.InfViTPlain'),
    neck=dict(type='mmlinattn.SimpleFeaturePyramid', scale_factors=(4.0, 2.0, 1.0, 0.5),
              in_index=None))
