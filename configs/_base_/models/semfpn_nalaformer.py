# Semantic FPN on a NaLaFormer backbone; a config sets its arch (see docs/user_guides/configs.md).
# Weights: the configs fine-tune ImageNet-1k weights from the
# checkpoints/nalaformer_<arch>_in1k.pth each names; the authors' NALAFORMER_{T,S,B}.pth fit
# their OFFICIAL_PRESET kernel, not the paper's one these configs run. To make it, pretrain
# timm's nalaformer_<arch> and convert it: python tools/model_converters/convert_checkpoint.py
# model_best.pth.tar checkpoints/nalaformer_<arch>_in1k.pth (docs/user_guides/weights.md).
# Without the file, tools/train.py stops at the start and says so; from scratch instead:
# --cfg-options model.backbone.init_cfg=None.
_base_ = './semfpn.py'
model = dict(backbone=dict(type='mmlinattn.NaLaFormer', init_cfg=dict(type='Pretrained')))
