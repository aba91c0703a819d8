# Semantic FPN on a LDN backbone; a config sets its arch (see docs/user_guides/configs.md).
# Weights: the configs fine-tune ImageNet-1k weights from the checkpoints/ldn_<arch>_in1k.pth
# each names; none are released. To make it, pretrain timm's ldn_<arch> and convert it: python
# tools/model_converters/convert_checkpoint.py model_best.pth.tar
# checkpoints/ldn_<arch>_in1k.pth (docs/user_guides/weights.md). Without the file,
# tools/train.py stops at the start and says so; from scratch instead: --cfg-options
# model.backbone.init_cfg=None with model.backbone.stem='conv'
# model.backbone.overlap_downsample=True (the stem that learns from scratch,
# docs/user_guides/photos.md).
_base_ = './semfpn.py'
model = dict(backbone=dict(type='mmlinattn.LDN', init_cfg=dict(type='Pretrained')))
