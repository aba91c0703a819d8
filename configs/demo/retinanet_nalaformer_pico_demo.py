_base_ = ['../retinanet_nalaformer_tiny_1x.py']

# The SOFT++ demo's recipe (configs/demo/retinanet_soft_pico_demo.py) with a NaLaFormer
# backbone: the paper's attention (Eqs. 8-17), the authors' stem, CPE, LePE and gate, at the
# same reduced width/depth (head dim 32), a 128-channel FPN + RetinaNet head, and the same
# from-scratch learning rate.  Run it on the demo data as the SOFT++ demo is run:
#   bash tools/demo.sh configs/demo/retinanet_nalaformer_pico_demo.py
model = dict(
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=(32, 64, 160, 256), num_heads=(1, 2, 5, 8),
                  depths=(1, 1, 2, 1)),
        drop_path_rate=0.0),
    neck=dict(in_channels=[64, 160, 256], out_channels=128),
    bbox_head=dict(in_channels=128, feat_channels=128, stacked_convs=2))
# From scratch on 64 images: a higher learning rate than the ImageNet-initialised recipe.
optim_wrapper = dict(optimizer=dict(lr=1e-3))
