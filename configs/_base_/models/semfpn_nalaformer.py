# Semantic FPN on a NaLaFormer backbone; a config sets its arch (see docs/usage.md).
_base_ = './semfpn.py'
model = dict(backbone=dict(type='mmlinattn.NaLaFormer'))
