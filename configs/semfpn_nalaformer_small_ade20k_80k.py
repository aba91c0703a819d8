_base_ = './semfpn_nalaformer_small_ade20k_40k.py'

# Recipe: NaLaFormer paper App. A.2 (Semantic FPN, AdamW, lr 1e-4, weight decay 1e-3, 80k
# iterations where the paper trains 40k); 512x512 crops, batch 16, poly 0.9 decay: the PVT
# Semantic FPN recipe (the paper gives none).
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_cfg = dict(max_iters=80000, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))
