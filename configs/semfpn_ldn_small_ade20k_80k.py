_base_ = './semfpn_ldn_small_ade20k_40k.py'

# Recipe: the PVT Semantic FPN recipe; the paper gives none (AdamW, lr 1e-4, weight decay 1e-4,
# poly 0.9 decay, 512x512 crops).
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_cfg = dict(max_iters=80000, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))
