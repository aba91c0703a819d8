_base_ = './semfpn_ldn_tiny_ade20k_40k.py'

# Weights: from scratch as shipped (init_cfg=None); the recipe below fine-tunes ImageNet-1k
# weights, and none are released: pretrain timm's ldn_tiny, convert it to
# checkpoints/ldn_tiny_in1k.pth (tools/model_converters/convert_checkpoint.py,
# docs/user_guides/weights.md) and add init_cfg=dict(type='Pretrained',
# checkpoint='checkpoints/ldn_tiny_in1k.pth') to the backbone. To train from scratch instead,
# add stem='conv', overlap_downsample=True to the backbone, the stem that learns without them.
# Recipe: the PVT Semantic FPN recipe; the paper gives none (AdamW, lr 1e-4, weight decay 1e-4,
# poly 0.9 decay, 512x512 crops).
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_cfg = dict(max_iters=80000, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))
