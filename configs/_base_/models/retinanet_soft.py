# RetinaNet on a SOFT++ backbone; a config sets its arch (see docs/usage.md).
_base_ = './retinanet.py'
model = dict(backbone=dict(type='mmlinattn.SOFT'))
