_base_ = './upernet_nalaformer_tiny_cityscapes_40k.py'

# Recipe: standard mmseg Swin UperNet recipe; the paper gives none (AdamW, lr 6e-5, weight decay
# 0.01, warm-up 1500 iterations then linear decay, 512x1024 crops).
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=80000, by_epoch=False),
]
train_cfg = dict(max_iters=80000, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))
