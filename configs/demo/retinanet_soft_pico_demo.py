_base_ = ['../retinanet_soft_tiny_1x.py']

# The README demo (tools/demo.sh): a real SOFT++ backbone (paper's attention, stem and
# pyramid) at a reduced width/depth, and a 128-channel FPN + RetinaNet head, so that training
# from scratch on the demo data fits in a few minutes on 2 CPU cores.  Point it at the demo
# data with tools/demo_overrides.py.  Head dim stays 32 as in the paper.
model = dict(
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=(32, 64, 160, 256), num_heads=(1, 2, 5, 8),
                  depths=(1, 1, 2, 1)),
        drop_path_rate=0.0),
    neck=dict(in_channels=[64, 160, 256], out_channels=128),
    bbox_head=dict(in_channels=128, feat_channels=128, stacked_convs=2))
# From scratch on 64 images: a higher learning rate than the ImageNet-initialised recipe.
optim_wrapper = dict(optimizer=dict(lr=1e-3))
