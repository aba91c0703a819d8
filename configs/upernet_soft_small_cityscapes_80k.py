_base_ = './upernet_soft_small_cityscapes_40k.py'

# Weights: from scratch as shipped (init_cfg=None); the recipe below fine-tunes ImageNet-1k
# weights, and none are released for the paper's 'small' (the authors release their '*-norm'
# archs): pretrain timm's soft_small, convert it to checkpoints/soft_small_in1k.pth
# (tools/model_converters/convert_checkpoint.py, docs/user_guides/weights.md) and add
# init_cfg=dict(type='Pretrained', checkpoint='checkpoints/soft_small_in1k.pth') to the
# backbone.
# Recipe: SOFT++ paper §4.3 (UperNet, AdamW, lr 6e-4, 768x768 crops, 80k iterations where the
# paper trains 40k); weight decay, batch, warm-up and poly decay: mmseg Swin UperNet recipe (the
# paper gives none).
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=80000, by_epoch=False),
]
train_cfg = dict(max_iters=80000, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))
