# The demo COCO set written by `python tools/dataset_converters/make_demo_data.py` (64 training
# images, the seven shape classes of mmlinattn/datasets/demo.py), 320x320 images, batch 4, and a
# 400-iteration schedule (25 epochs, warm-up capped at 30 iterations, LR steps at 2/3 and 11/12).
# These are the settings `tools/misc/demo_overrides.py CONFIG --iters 400` gives any RetinaNet
# config.  A demo config inherits this file next to its model config and picks the entries of
# `demo`: mmengine does not let two bases define the same top-level key, and the model config
# already defines train_dataloader, train_cfg, param_scheduler and the rest.
demo = dict(
    classes=('triangle', 'square', 'pentagon', 'circle', 'ellipse', 'star', 'cross'),
    num_classes=7)
demo.update(
    train_dataloader=dict(
        batch_size=4,
        num_workers=0,
        persistent_workers=False,
        dataset=dict(
            data_root='data/demo/coco/',
            metainfo=dict(classes=demo['classes']),
            filter_cfg=dict(min_size=4),
            pipeline=[
                dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations', with_bbox=True),
                dict(type='Resize', scale=(320, 320), keep_ratio=True),
                dict(type='RandomFlip', prob=0.5),
                dict(type='PackDetInputs'),
            ])),
    test_dataloader=dict(
        num_workers=0,
        persistent_workers=False,
        dataset=dict(
            data_root='data/demo/coco/',
            metainfo=dict(classes=demo['classes']),
            pipeline=[
                dict(type='LoadImageFromFile', backend_args=None),
                dict(type='Resize', scale=(320, 320), keep_ratio=True),
                dict(type='LoadAnnotations', with_bbox=True),
                dict(type='PackDetInputs',
                     meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
            ])),
    evaluator=dict(ann_file='data/demo/coco/annotations/instances_val2017.json'),
    train_cfg=dict(max_epochs=25, val_interval=25),
    param_scheduler=[
        dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=30),
        dict(type='MultiStepLR', begin=0, end=25, by_epoch=True, milestones=[17, 23], gamma=0.1),
    ],
    default_hooks=dict(checkpoint=dict(interval=25), logger=dict(interval=10)))
