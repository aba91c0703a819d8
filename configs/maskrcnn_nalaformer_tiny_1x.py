_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
custom_imports = dict(imports=['mmlinattn.models'], allow_failed_imports=False)

# Recipe: NaLaFormer paper App. A.2 (Mask R-CNN 1x: AdamW, lr 1e-4, weight decay 1e-4,
# batch 16, 12 epochs, 1333x800).
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmlinattn.NaLaFormer',
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        init_cfg=None),
    neck=dict(in_channels=[64, 128, 256, 512]))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(batch_size=2, dataset=dict(pipeline=train_pipeline))  # 8 GPUs x 2
optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=1e-4),
    paramwise_cfg=dict(norm_decay_mult=0.0))
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=12, val_interval=1)
auto_scale_lr = dict(enable=False, base_batch_size=16)
