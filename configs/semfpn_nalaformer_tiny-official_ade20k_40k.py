_base_ = [
    './_base_/models/semfpn_nalaformer_official.py',
    'mmseg::_base_/datasets/ade20k.py',
    './_base_/schedules/adamw_iters.py',
    'mmseg::_base_/default_runtime.py',
    './_base_/runtime.py',
]

# Recipe: NaLaFormer paper App. A.2 (Semantic FPN, AdamW, lr 1e-4, weight decay 1e-3, 40k
# iterations); 512x512 crops, batch 16, poly 0.9 decay: the PVT Semantic FPN recipe (the paper
# gives none).
data_preprocessor = dict(size=_base_.crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(arch='tiny', drop_path_rate=0.2,
                  init_cfg=dict(checkpoint='checkpoints/nalaformer_tiny_official_in1k.pth')),
    neck=dict(in_channels=[64, 128, 256, 512]),
    decode_head=dict(num_classes=150))
train_dataloader = dict(batch_size=4)  # 4 GPUs x 4
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-3))
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000, by_epoch=False),
]
train_cfg = dict(max_iters=40000, val_interval=4000)
default_hooks = dict(checkpoint=dict(interval=4000))
