_base_ = [
    '../_base_/models/retinanet_infvit_pico.py',
    '../_base_/datasets/coco_demo.py',
    '../_base_/schedules/coco_demo_25e.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# The SOFT++ demo's recipe (configs/demo/retinanet_soft_pico_demo.py) with an InfViT backbone
# (Linear-InfSA blocks) at the same reduced width/depth, a 128-channel FPN + RetinaNet head
# and the same from-scratch learning rate:
#   bash tools/demo.sh configs/demo/retinanet_infvit_pico_demo.py
model = dict(bbox_head=dict(num_classes=7))
# From scratch on 64 images: a higher learning rate than the ImageNet-initialised recipe
# of ../retinanet_infvit_tiny_1x.py (its optimiser otherwise).
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05))
# A checkpoint at the end of the 400 iterations, a log line every 10.
default_hooks = dict(checkpoint=dict(interval=25), logger=dict(interval=10))
