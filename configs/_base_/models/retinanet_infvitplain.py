# RetinaNet on the isotropic InfViT (InfViTPlain, one stride-16 map): a config resamples the last
# block's map ViTDet-style to strides 8/16/32 (mmlinattn.SimpleFeaturePyramid) ahead of the usual
# RetinaNet FPN (P3-P7), and sets the arch and both necks' in_channels.
_base_ = './retinanet.py'
model = dict(backbone=dict(type='mmlinattn.InfViTPlain', out_indices=(3, )))
