_base_ = [
    '../_base_/models/maskrcnn_ldn_pico.py',
    '../_base_/datasets/nuts_instance.py',
    '../_base_/schedules/nuts_instance_58e.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# The pico Mask R-CNN of configs/demo/maskrcnn_ldn_pico_demo.py (LDN backbone, 128-channel
# FPN, narrowed RoI heads, from-scratch learning rate) on the nut photos' instance masks
# (configs/_base_/datasets/nuts_instance.py):
#   bash tools/demo.sh configs/photos/maskrcnn_ldn_pico_nuts.py
model = dict(
    # the early-convolution stem and 3x3 down-samplers, with which LDN learns from scratch
    # in a short schedule (docs/user_guides/photos.md)
    backbone=dict(stem='conv', overlap_downsample=True),
    roi_head=dict(bbox_head=dict(num_classes=3), mask_head=dict(num_classes=3)))
# the optimiser of ../maskrcnn_ldn_tiny_1x.py at the demos' from-scratch learning rate
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
    paramwise_cfg=dict(custom_keys={'tap_logits': dict(decay_mult=0.0),
                                    'step_logit': dict(decay_mult=0.0)}))
default_hooks = dict(checkpoint=dict(interval=58), logger=dict(interval=7))
