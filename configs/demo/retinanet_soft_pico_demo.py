_base_ = ['../retinanet_soft_tiny_1x.py', './_base_/coco_demo.py']

# The README demo (tools/demo.sh): a real SOFT++ backbone (paper's attention, stem and
# pyramid) at a reduced width/depth, and a 128-channel FPN + RetinaNet head, so that training
# from scratch on the demo data fits in a few minutes on 2 CPU cores.  It runs as it is on the
# demo data (after `python tools/dataset_converters/make_demo_data.py`).  Head dim stays 32 as
# in the paper.
model = dict(
    backbone=dict(
        arch=dict(_delete_=True, embed_dims=(32, 64, 160, 256), num_heads=(1, 2, 5, 8),
                  depths=(1, 1, 2, 1)),
        drop_path_rate=0.0),
    neck=dict(in_channels=[64, 160, 256], out_channels=128),
    bbox_head=dict(in_channels=128, feat_channels=128, stacked_convs=2,
                   num_classes=_base_.demo.num_classes))
# From scratch on 64 images: a higher learning rate than the ImageNet-initialised recipe.
optim_wrapper = dict(optimizer=dict(lr=1e-3))

# The demo data and its 400-iteration schedule (configs/demo/_base_/coco_demo.py).
train_dataloader = _base_.demo.train_dataloader
val_dataloader = _base_.demo.test_dataloader
test_dataloader = _base_.demo.test_dataloader
val_evaluator = _base_.demo.evaluator
test_evaluator = _base_.demo.evaluator
train_cfg = _base_.demo.train_cfg
param_scheduler = _base_.demo.param_scheduler
default_hooks = _base_.demo.default_hooks
