# UperNet on a NaLaFormer backbone; a config sets its arch (see docs/usage.md).
# Weights: the configs start from scratch (init_cfg=None) under a fine-tuning recipe for
# ImageNet-1k weights, and the authors' NALAFORMER_{T,S,B}.pth fit only their OFFICIAL_PRESET
# kernel, not the paper's used here. To fine-tune, pretrain timm's nalaformer_<arch>, convert it
# to the checkpoints/nalaformer_<arch>_in1k.pth a config names
# (tools/model_converters/convert_checkpoint.py, docs/user_guides/weights.md) and add
# init_cfg=dict(type='Pretrained', checkpoint='checkpoints/nalaformer_<arch>_in1k.pth') to the
# backbone.
_base_ = './upernet.py'
model = dict(backbone=dict(type='mmlinattn.NaLaFormer'))
