# Semantic FPN on a InfViT backbone; a config sets its arch (see docs/usage.md).
# Weights: the configs start from scratch (init_cfg=None) under a fine-tuning recipe for
# ImageNet-1k weights, and none are released. To fine-tune, pretrain timm's infvit_<arch>,
# convert it to the checkpoints/infvit_<arch>_in1k.pth a config names
# (tools/model_converters/convert_checkpoint.py, docs/user_guides/weights.md) and add
# init_cfg=dict(type='Pretrained', checkpoint='checkpoints/infvit_<arch>_in1k.pth') to the
# backbone. Without them, stem='conv' is the stem that learns from scratch
# (docs/user_guides/photos.md).
_base_ = './semfpn.py'
model = dict(backbone=dict(type='mmlinattn.InfViT'))
