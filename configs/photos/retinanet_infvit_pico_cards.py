_base_ = [
    '../_base_/models/retinanet_infvit_pico.py',
    '../_base_/datasets/cards.py',
    '../_base_/schedules/cards_6e.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# The pico RetinaNet of configs/demo/retinanet_infvit_pico_demo.py (same backbone, FPN, head
# and from-scratch learning rate) on the playing-card photos (configs/_base_/datasets/cards.py):
#   bash tools/demo.sh configs/photos/retinanet_infvit_pico_cards.py
# From scratch, InfViT's 7x7 patch stem barely learns a detector in a short schedule; the
# early-convolution stem does (docs/user_guides/photos.md).
model = dict(backbone=dict(stem='conv'), bbox_head=dict(num_classes=6))
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05))
default_hooks = dict(checkpoint=dict(interval=6), logger=dict(interval=10))
