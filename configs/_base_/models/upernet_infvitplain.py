# UperNet on the isotropic InfViT (InfViTPlain, stride 16): each block's map resampled BEiT-style
# to strides 4/8/16/32 by mmlinattn.SimpleFeaturePyramid; a config sets the arch and in_channels.
# Weights: the configs fine-tune ImageNet-1k weights from the
# checkpoints/infvitplain_<arch>_in1k.pth each names; none are released. To make it, pretrain
# timm's infvit_plain_linear_<arch> and convert it: python
# tools/model_converters/convert_checkpoint.py model_best.pth.tar
# checkpoints/infvitplain_<arch>_in1k.pth (docs/user_guides/weights.md). Without the file,
# tools/train.py stops at the start and says so; from scratch instead: --cfg-options
# model.backbone.init_cfg=None.
_base_ = './upernet.py'
model = dict(
    backbone=dict(type='mmlinattn.InfViTPlain', init_cfg=dict(type='Pretrained')),
    neck=dict(type='mmlinattn.SimpleFeaturePyramid', scale_factors=(4.0, 2.0, 1.0, 0.5),
              in_index=None))
