_base_ = [
    './_base_/models/retinanet_soft_norm.py',
    './_base_/datasets/coco_detection.py',
    './_base_/schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
    './_base_/runtime.py',
]

# Recipe: SOFT++ paper §4.2 (AdamW, lr 1e-4, weight decay 0.01, batch 16, single scale
# 1333x800; the authors publish no SOFT-Norm dense configs); LR steps and warm-up: mmdet
# standard (the paper gives none).
model = dict(
    backbone=dict(arch='large-norm', drop_path_rate=0.3,
                  init_cfg=dict(checkpoint='checkpoints/soft_large-norm_in1k.pth')),
    neck=dict(in_channels=[128, 320, 512]))
train_dataloader = dict(batch_size=2)  # 8 GPUs x 2
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={'pos_embed': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(type='MultiStepLR', begin=0, end=12, by_epoch=True, milestones=[8, 11], gamma=0.1),
]
train_cfg = dict(max_epochs=12)
