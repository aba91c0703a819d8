# RetinaNet on a InfViT backbone; a config sets its arch (see docs/user_guides/configs.md).
# Weights: the configs fine-tune ImageNet-1k weights from the checkpoints/infvit_<arch>_in1k.pth
# each names; none are released. To make it, pretrain timm's infvit_<arch> and convert it:
# python tools/model_converters/convert_checkpoint.py model_best.pth.tar
# checkpoints/infvit_<arch>_in1k.pth (docs/user_guides/weights.md). Without the file,
# tools/train.py stops at the start and says so; from scratch instead: --cfg-options
# model.backbone.init_cfg=None with model.backbone.stem='conv' (the stem that learns from
# scratch, docs/user_guides/photos.md).
_base_ = './retinanet.py'
model = dict(backbone=dict(type='mmlinattn.InfViT', init_cfg=dict(type='Pretrained')))
