# Semantic FPN on a SOFT++ backbone; a config sets its arch (see docs/usage.md).
_base_ = './semfpn.py'
model = dict(backbone=dict(type='mmlinattn.SOFT'))
