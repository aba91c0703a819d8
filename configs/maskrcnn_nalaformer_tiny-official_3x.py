_base_ = './maskrcnn_nalaformer_tiny-official_1x.py'

# Recipe: NaLaFormer paper App. A.2 (AdamW, lr 1e-4, weight decay 1e-4, step policy, 36 epochs);
# batch 16, multi-scale 480-800 short side and warm-up: mmdet standard (the paper gives none).
# 3x: mmdet's multi-scale schedule, the 1x pipeline with a random short side of 480-800
# (step 32) in place of its Resize, 36 epochs, LR steps at epochs 27 and 33.
train_pipeline = [
    dict(type='RandomChoiceResize', scales=[(1333, s) for s in range(480, 801, 32)],
         keep_ratio=True) if step.type == 'Resize' else step for step in _base_.train_pipeline
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(type='MultiStepLR', begin=0, end=36, by_epoch=True, milestones=[27, 33], gamma=0.1),
]
train_cfg = dict(max_epochs=36)
