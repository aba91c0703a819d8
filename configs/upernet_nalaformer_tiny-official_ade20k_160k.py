_base_ = [
    './_base_/models/upernet_nalaformer_official.py',
    'mmseg::_base_/datasets/ade20k.py',
    './_base_/schedules/adamw_iters.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/runtime.py',
]

# Recipe: NaLaFormer paper App. A.2 (UperNet, AdamW, lr 1e-4, weight decay 1e-3, 160k
# iterations); 512x512 crops, batch 16, warm-up and poly decay: mmseg Swin UperNet recipe (the
# paper gives none).
data_preprocessor = dict(size=_base_.crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(arch='tiny', drop_path_rate=0.2,
                  init_cfg=dict(checkpoint='checkpoints/nalaformer_tiny_official_in1k.pth')),
    decode_head=dict(in_channels=[64, 128, 256, 512], num_classes=150),
    auxiliary_head=dict(in_channels=256, num_classes=150))
train_dataloader = dict(batch_size=2)  # 8 GPUs x 2
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False),
]
train_cfg = dict(max_iters=160000, val_interval=16000)
default_hooks = dict(checkpoint=dict(interval=16000))
