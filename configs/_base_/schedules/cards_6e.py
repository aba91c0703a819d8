# The playing-card photos' schedule (datasets/cards.py): 6 epochs (444 iterations; warm-up 30
# iterations, LR steps at epochs 4 and 5.5 -> 4, 6).  A config on it also sets
# default_hooks = dict(checkpoint=dict(interval=6), logger=dict(interval=10)).
_base_ = './adamw_1x.py'
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=6, val_interval=6)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=30),
    dict(type='MultiStepLR', begin=0, end=6, by_epoch=True, milestones=[4, 6], gamma=0.1),
]
