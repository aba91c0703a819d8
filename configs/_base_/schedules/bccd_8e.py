# The blood-smear photos' schedule (datasets/bccd.py): 8 epochs (416 iterations; warm-up 30
# iterations, LR steps at epochs 6 and 8).  A config on it also sets
# default_hooks = dict(checkpoint=dict(interval=8), logger=dict(interval=10)).
_base_ = './adamw_1x.py'
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=8, val_interval=8)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=30),
    dict(type='MultiStepLR', begin=0, end=8, by_epoch=True, milestones=[6, 8], gamma=0.1),
]
