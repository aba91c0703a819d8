_base_ = [
    '../_base_/models/retinanet_soft_pico.py',
    '../_base_/datasets/cards.py',
    '../_base_/schedules/cards_6e.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# The pico RetinaNet of configs/demo/retinanet_soft_pico_demo.py (same backbone, FPN, head
# and from-scratch learning rate) on the playing-card photos (configs/_base_/datasets/cards.py):
#   bash tools/demo.sh configs/photos/retinanet_soft_pico_cards.py
model = dict(bbox_head=dict(num_classes=6))
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={'pos_embed': dict(decay_mult=0.0)}))
default_hooks = dict(checkpoint=dict(interval=6), logger=dict(interval=10))
