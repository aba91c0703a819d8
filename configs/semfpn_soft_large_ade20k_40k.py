_base_ = [
    './_base_/models/semfpn_soft.py',
    'mmseg::_base_/datasets/ade20k.py',
    './_base_/schedules/adamw_iters.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/runtime.py',
]

# Recipe: the PVT Semantic FPN recipe; the paper gives none (AdamW, lr 1e-4, weight decay 1e-4,
# poly 0.9 decay, 512x512 crops).
data_preprocessor = dict(size=_base_.crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(arch='large', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='checkpoints/soft_large_in1k.pth')),
    neck=dict(in_channels=[128, 256, 512, 1024]),
    decode_head=dict(num_classes=150))
train_dataloader = dict(batch_size=4)  # 4 GPUs x 4
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    paramwise_cfg=dict(custom_keys={'pos_embed': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000, by_epoch=False),
]
train_cfg = dict(max_iters=40000, val_interval=4000)
default_hooks = dict(checkpoint=dict(interval=4000))
