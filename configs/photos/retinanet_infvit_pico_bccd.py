_base_ = ['../demo/retinanet_infvit_pico_demo.py', './_base_/bccd.py']

# The pico RetinaNet of configs/demo/retinanet_infvit_pico_demo.py (same backbone, FPN, head
# and from-scratch learning rate) on the blood-smear photos (configs/photos/_base_/bccd.py):
#   bash tools/demo.sh configs/photos/retinanet_infvit_pico_bccd.py
# From scratch, InfViT's 7x7 patch stem barely learns a detector in a short schedule; the
# early-convolution stem does (docs/user_guides/photos.md).
model = dict(backbone=dict(stem='conv'), bbox_head=dict(num_classes=_base_.bccd.num_classes))
train_dataloader = _base_.bccd.train_dataloader
val_dataloader = _base_.bccd.test_dataloader
test_dataloader = _base_.bccd.test_dataloader
val_evaluator = _base_.bccd.evaluator
test_evaluator = _base_.bccd.evaluator
train_cfg = _base_.bccd.train_cfg
param_scheduler = _base_.bccd.param_scheduler
default_hooks = _base_.bccd.default_hooks
