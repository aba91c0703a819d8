_base_ = ['../demo/retinanet_ldn_pico_demo.py', './_base_/cards.py']

# The pico RetinaNet of configs/demo/retinanet_ldn_pico_demo.py (same backbone, FPN, head
# and from-scratch learning rate) on the playing-card photos (configs/photos/_base_/cards.py):
#   bash tools/demo.sh configs/photos/retinanet_ldn_pico_cards.py
# From scratch, LDN's patchify stem and 2x2 down-samplers barely learn a detector in a short
# schedule; the early-convolution stem and 3x3 down-samplers do (docs/user_guides/photos.md).
model = dict(backbone=dict(stem='conv', overlap_downsample=True),
             bbox_head=dict(num_classes=_base_.cards.num_classes))
train_dataloader = _base_.cards.train_dataloader
val_dataloader = _base_.cards.test_dataloader
test_dataloader = _base_.cards.test_dataloader
val_evaluator = _base_.cards.evaluator
test_evaluator = _base_.cards.evaluator
train_cfg = _base_.cards.train_cfg
param_scheduler = _base_.cards.param_scheduler
default_hooks = _base_.cards.default_hooks
