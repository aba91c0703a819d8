# Mask R-CNN on a SOFT++ backbone; a config sets its arch (docs/advanced/soft_landmarks.md).
# Landmarks: the paper's rule, m = tokens / r^2 per stage (about 1 050 per stage at 1333x800).
# In place of A^+ (Eq. 9, 17) a ridge-regularised solve, (A + 1e-6 tr(A)/m I)^-1 by Cholesky
# (pinv='cholesky'; the ridge raised, and logged, where a factorisation fails): in float64 on
# photographs closer to A^+ than the paper's 20 Newton-Schulz steps (Eq. 10), which do not
# converge at these m, and far cheaper (records/soft_pinv_decision_zen4.json; float32:
# records/soft_pinv_float32_zen3.json).
# SOFT++-small's backbone at 1333x800: 213 GMACs (pinv='newton': 6 023); max_landmarks=49
# pools the landmarks (93 GMACs; linear cost, not the paper's rule).
# Weights: the configs fine-tune ImageNet-1k weights from the checkpoints/soft_<arch>_in1k.pth
# each names; none are released for the SOFT++ archs (the authors release their '*-norm' archs).
# To make it, pretrain timm's soft_<arch> and convert it: python
# tools/model_converters/convert_checkpoint.py model_best.pth.tar
# checkpoints/soft_<arch>_in1k.pth (docs/user_guides/weights.md). Without the file,
# tools/train.py stops at the start and says so; from scratch instead: --cfg-options
# model.backbone.init_cfg=None.
_base_ = './maskrcnn.py'
model = dict(
    backbone=dict(type='mmlinattn.SOFT', pinv='cholesky', init_cfg=dict(type='Pretrained')))
