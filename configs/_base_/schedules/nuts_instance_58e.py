# The nut instance masks' schedule (datasets/nuts_instance.py): 58 epochs (406 iterations;
# warm-up 30 iterations, LR steps at epochs 39 and 53).  A config on it also sets
# default_hooks = dict(checkpoint=dict(interval=58), logger=dict(interval=7)).
_base_ = './adamw_1x.py'
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=58, val_interval=58)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=30),
    dict(type='MultiStepLR', begin=0, end=58, by_epoch=True, milestones=[39, 53], gamma=0.1),
]
