# Mask R-CNN on a InfViT backbone; a config sets its arch (see docs/usage.md).
_base_ = './maskrcnn.py'
model = dict(backbone=dict(type='mmlinattn.InfViT'))
