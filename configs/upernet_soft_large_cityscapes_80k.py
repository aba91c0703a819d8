_base_ = './upernet_soft_large_cityscapes_40k.py'

# Recipe: SOFT++ paper §4.3 (UperNet, AdamW, lr 6e-4, 768x768 crops, 80k iterations where the
# paper trains 40k); weight decay, batch, warm-up and poly decay: mmseg Swin UperNet recipe (the
# paper gives none).
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=80000, by_epoch=False),
]
train_cfg = dict(max_iters=80000, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))
