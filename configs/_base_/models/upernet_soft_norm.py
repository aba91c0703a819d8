# UperNet on the authors' released SOFT-Norm models: archs '<size>-norm' with
# their attention, OFFICIAL_PRESETS['norm'] (mmlinattn/models/backbones/soft.py); a config
# sets its arch. In place of A^+, the family's ridge-regularised Cholesky solve
# (pinv='cholesky', upernet_soft.py); the authors' model ran 20 Newton-Schulz steps (Eq. 10),
# which pinv='newton' runs (records/soft_pinv_float32_zen3.json, "official": tiny-norm in
# their layout, random weights, each against an exact A^+ on a photograph).
# Weights: the configs fine-tune the authors' ImageNet-1k file SOFT_<Size>_norm.pth, converted
# to the checkpoints/soft_<arch>_in1k.pth each names: python
# tools/model_converters/convert_checkpoint.py SOFT_<Size>_norm.pth
# checkpoints/soft_<arch>_in1k.pth --official --arch-check SOFT:<arch>
# (docs/user_guides/weights.md). Without the file, tools/train.py stops at the start and says
# so; from scratch instead: --cfg-options model.backbone.init_cfg=None.
_base_ = './upernet_soft.py'
model = dict(backbone=dict(newton_init='paper', landmark_grid='crop'))
