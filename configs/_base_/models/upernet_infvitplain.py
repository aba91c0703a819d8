# UperNet on the isotropic InfViT (InfViTPlain, stride 16): each block's map resampled BEiT-style
# to strides 4/8/16/32 by mmlinattn.SimpleFeaturePyramid; a config sets the arch and in_channels.
_base_ = './upernet.py'
model = dict(
    backbone=dict(type='mmlinattn.InfViTPlain'),
    neck=dict(type='mmlinattn.SimpleFeaturePyramid', scale_factors=(4.0, 2.0, 1.0, 0.5),
              in_index=None))
