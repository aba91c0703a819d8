# The nut label maps' schedule (datasets/nuts_seg.py): 400 iterations, warm-up 30, then poly
# decay; a checkpoint at the end.
_base_ = './adamw_iters.py'
train_cfg = dict(type='IterBasedTrainLoop', max_iters=400, val_interval=400)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=30),
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=30, end=400, by_epoch=False),
]
default_hooks = dict(checkpoint=dict(by_epoch=False, interval=400), logger=dict(interval=10))
