_base_ = [
    '../_base_/models/retinanet_soft_pico.py',
    '../_base_/datasets/coco_demo.py',
    '../_base_/schedules/coco_demo_25e.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# The README demo (tools/demo.sh): a real SOFT++ backbone (paper's attention, stem and
# pyramid) at a reduced width/depth, and a 128-channel FPN + RetinaNet head, so that training
# from scratch on the demo data fits in a few minutes on 2 CPU cores.  It runs as it is on the
# demo data (after `python tools/dataset_converters/make_demo_data.py`).  Head dim stays 32 as
# in the paper.
model = dict(bbox_head=dict(num_classes=7))
# From scratch on 64 images: a higher learning rate than the ImageNet-initialised recipe
# of ../retinanet_soft_tiny_1x.py (its optimiser otherwise).
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={'pos_embed': dict(decay_mult=0.0)}))
# A checkpoint at the end of the 400 iterations, a log line every 10.
default_hooks = dict(checkpoint=dict(interval=25), logger=dict(interval=10))
