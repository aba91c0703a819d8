_base_ = [
    'mmseg::_base_/models/upernet_swin.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_160k.py',
]
custom_imports = dict(imports=['mmlinattn.models'], allow_failed_imports=False)

# Recipe: the paper has none; standard mmseg Swin UperNet recipe (AdamW, lr 6e-5, weight
# decay 0.01, linear warm-up 1500 iters then poly, batch 16, 160k iters, 512x512 crops).
crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        _delete_=True,
        type='mmlinattn.InfViT',
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        init_cfg=None),
    decode_head=dict(in_channels=[64, 128, 320, 512], num_classes=150),
    auxiliary_head=dict(in_channels=320, num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={'norm': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False),
]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=160000, val_interval=16000)
train_dataloader = dict(batch_size=2)  # 8 GPUs x 2
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
