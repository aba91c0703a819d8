# RetinaNet on the isotropic InfViT (InfViTPlain, one stride-16 map): a config resamples the last
# block's map ViTDet-style to strides 8/16/32 (mmlinattn.SimpleFeaturePyramid) ahead of the usual
# RetinaNet FPN (P3-P7), and sets the arch and both necks' in_channels.
# Weights: the configs start from scratch (init_cfg=None) under a fine-tuning recipe for
# ImageNet-1k weights, and none are released. To fine-tune, pretrain timm's
# infvit_plain_linear_<arch>, convert it to the checkpoints/infvitplain_<arch>_in1k.pth a config
# names (tools/model_converters/convert_checkpoint.py, docs/user_guides/weights.md) and add
# init_cfg=dict(type='Pretrained', checkpoint='checkpoints/infvitplain_<arch>_in1k.pth') to the
# backbone.
_base_ = './retinanet.py'
model = dict(backbone=dict(type='mmlinattn.InfViTPlain', out_indices=(3, )))
