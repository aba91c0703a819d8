_base_ = [
    './_base_/models/maskrcnn_ldn.py',
    './_base_/datasets/coco_instance.py',
    './_base_/schedules/adamw_1x.py',
    'mmdet::_base_/default_runtime.py',
    './_base_/runtime.py',
]

# Recipe: standard mmdet Swin recipe; the paper gives none (AdamW, lr 1e-4, weight decay 0.05,
# warm-up 1000 iterations, batch 16, single scale 1333x800).
model = dict(
    backbone=dict(arch='small', drop_path_rate=0.2,
                  init_cfg=dict(checkpoint='checkpoints/ldn_small_in1k.pth')),
    neck=dict(in_channels=[64, 128, 320, 512]))
train_dataloader = dict(batch_size=2)  # 8 GPUs x 2
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.05),
    paramwise_cfg=dict(custom_keys={'tap_logits': dict(decay_mult=0.0),
                                    'step_logit': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=1000),
    dict(type='MultiStepLR', begin=0, end=12, by_epoch=True, milestones=[8, 11], gamma=0.1),
]
train_cfg = dict(max_epochs=12)
