_base_ = [
    '../_base_/models/retinanet_ldn_pico.py',
    '../_base_/datasets/bccd.py',
    '../_base_/schedules/bccd_8e.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# The pico RetinaNet of configs/demo/retinanet_ldn_pico_demo.py (same backbone, FPN, head
# and from-scratch learning rate) on the blood-smear photos (configs/_base_/datasets/bccd.py):
#   bash tools/demo.sh configs/photos/retinanet_ldn_pico_bccd.py
# From scratch, LDN's patchify stem and 2x2 down-samplers barely learn a detector in a short
# schedule; the early-convolution stem and 3x3 down-samplers do (docs/user_guides/photos.md).
model = dict(backbone=dict(stem='conv', overlap_downsample=True),
             bbox_head=dict(num_classes=3))
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
    paramwise_cfg=dict(custom_keys={'tap_logits': dict(decay_mult=0.0),
                                    'step_logit': dict(decay_mult=0.0)}))
default_hooks = dict(checkpoint=dict(interval=8), logger=dict(interval=10))
