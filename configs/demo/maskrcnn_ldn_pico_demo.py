_base_ = [
    '../_base_/models/maskrcnn_ldn_pico.py',
    '../_base_/datasets/coco_demo_instance.py',
    '../_base_/schedules/coco_demo_25e.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# Mask R-CNN on the demo data (boxes and masks of the seven shape classes): the LDN pico
# backbone of configs/demo/retinanet_ldn_pico_demo.py, a 128-channel FPN, RPN and RoI heads
# narrowed to match (a two-conv, 64-channel mask head), and the same from-scratch learning
# rate and 400-iteration schedule.
#   bash tools/demo.sh configs/demo/maskrcnn_ldn_pico_demo.py
model = dict(
    roi_head=dict(bbox_head=dict(num_classes=7), mask_head=dict(num_classes=7)))
# the optimiser of ../maskrcnn_ldn_tiny_1x.py at the demos' from-scratch learning rate
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
    paramwise_cfg=dict(custom_keys={'tap_logits': dict(decay_mult=0.0),
                                    'step_logit': dict(decay_mult=0.0)}))
# A checkpoint at the end of the 400 iterations, a log line every 10.
default_hooks = dict(checkpoint=dict(interval=25), logger=dict(interval=10))
