_base_ = ['../demo/maskrcnn_ldn_pico_demo.py', './_base_/nuts_instance.py']

# The pico Mask R-CNN of configs/demo/maskrcnn_ldn_pico_demo.py (LDN backbone, 128-channel
# FPN, narrowed RoI heads, from-scratch learning rate) on the nut photos' instance masks
# (configs/photos/_base_/nuts_instance.py):
#   bash tools/demo.sh configs/photos/maskrcnn_ldn_pico_nuts.py
model = dict(
    # the early-convolution stem and 3x3 down-samplers, with which LDN learns from scratch
    # in a short schedule (docs/user_guides/photos.md)
    backbone=dict(stem='conv', overlap_downsample=True),
    roi_head=dict(bbox_head=dict(num_classes=_base_.nuts_instance.num_classes),
                  mask_head=dict(num_classes=_base_.nuts_instance.num_classes)))
train_dataloader = _base_.nuts_instance.train_dataloader
val_dataloader = _base_.nuts_instance.test_dataloader
test_dataloader = _base_.nuts_instance.test_dataloader
val_evaluator = _base_.nuts_instance.evaluator
test_evaluator = _base_.nuts_instance.evaluator
train_cfg = _base_.nuts_instance.train_cfg
param_scheduler = _base_.nuts_instance.param_scheduler
default_hooks = _base_.nuts_instance.default_hooks
