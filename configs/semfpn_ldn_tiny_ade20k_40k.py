_base_ = [
    'mmseg::_base_/models/fpn_r50.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/default_runtime.py',
    'mmseg::_base_/schedules/schedule_40k.py',
]
custom_imports = dict(imports=['mmlinattn.models'], allow_failed_imports=False)

# Recipe: the paper has none; the PVT Semantic FPN recipe (AdamW, lr 1e-4, weight decay 1e-4,
# poly 0.9, batch 16, 40k iters, 512x512 crops).
crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='mmlinattn.LDN',
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        init_cfg=None),
    neck=dict(in_channels=[64, 128, 320, 512], out_channels=256, num_outs=4),
    decode_head=dict(num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=1e-4))
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000, by_epoch=False),
]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=40000, val_interval=4000)
train_dataloader = dict(batch_size=4)  # 4 GPUs x 4
val_dataloader = dict(batch_size=1)
test_dataloader = val_dataloader
