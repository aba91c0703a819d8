_base_ = [
    './_base_/models/upernet_ldn.py',
    'mmseg::_base_/datasets/cityscapes.py',
    './_base_/schedules/adamw_iters.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/runtime.py',
]

# Recipe: standard mmseg Swin UperNet recipe; the paper gives none (AdamW, lr 6e-5, weight decay
# 0.01, warm-up 1500 iterations then linear decay, 512x1024 crops).
data_preprocessor = dict(size=_base_.crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(arch='tiny', drop_path_rate=0.1,
                  init_cfg=dict(checkpoint='checkpoints/ldn_tiny_in1k.pth')),
    decode_head=dict(in_channels=[64, 128, 320, 512], num_classes=19),
    auxiliary_head=dict(in_channels=320, num_classes=19))
train_dataloader = dict(batch_size=2)  # 4 GPUs x 2
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=6e-5, weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={'tap_logits': dict(decay_mult=0.0),
                                    'step_logit': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=40000, by_epoch=False),
]
train_cfg = dict(max_iters=40000, val_interval=4000)
default_hooks = dict(checkpoint=dict(interval=4000))
