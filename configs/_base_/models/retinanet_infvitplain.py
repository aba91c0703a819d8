# RetinaNet on the isotropic InfViT (InfViTPlain, one stride-16 map): a config resamples the last
# block's map ViTDet-style to strides 8/16/32 (mmlinattn.SimpleFeaturePyramid) ahead of the usual
# RetinaNet FPN (P3-P7), and sets the arch and both necks' in_channels.
# Weights: the configs fine-tune ImageNet-1k weights from the
# checkpoints/infvitplain_<arch>_in1k.pth each names; none are released. To make it, pretrain
# timm's infvit_plain_linear_<arch> and convert it: python
# tools/model_converters/convert_checkpoint.py model_best.pth.tar
# checkpoints/infvitplain_<arch>_in1k.pth (docs/user_guides/weights.md). Without the file,
# tools/train.py stops at the start and says so; from scratch instead: --cfg-options
# model.backbone.init_cfg=None.
_base_ = './retinanet.py'
model = dict(
    backbone=dict(type='mmlinattn.InfViTPlain', out_indices=(3, ),
                  init_cfg=dict(type='Pretrained')))
