# The demo set's schedule (datasets/coco_demo.py): 25 epochs of 16 iterations (400), warm-up
# capped at 30 iterations, LR steps at 2/3 and 11/12.  A config on it also sets
# default_hooks = dict(checkpoint=dict(interval=25), logger=dict(interval=10)).
_base_ = './adamw_1x.py'
train_cfg = dict(max_epochs=25, val_interval=25)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=30),
    dict(type='MultiStepLR', begin=0, end=25, by_epoch=True, milestones=[17, 23], gamma=0.1),
]
