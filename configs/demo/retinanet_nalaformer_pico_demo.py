_base_ = [
    '../_base_/models/retinanet_nalaformer_pico.py',
    '../_base_/datasets/coco_demo.py',
    '../_base_/schedules/coco_demo_25e.py',
    'mmdet::_base_/default_runtime.py',
    '../_base_/runtime.py',
]

# The SOFT++ demo's recipe (configs/demo/retinanet_soft_pico_demo.py) with a NaLaFormer
# backbone: the paper's attention (Eqs. 8-17), the authors' stem, CPE, LePE and gate, at the
# same reduced width/depth (head dim 32), a 128-channel FPN + RetinaNet head, and the same
# from-scratch learning rate.  Run it on the demo data as the SOFT++ demo is run:
#   bash tools/demo.sh configs/demo/retinanet_nalaformer_pico_demo.py
model = dict(bbox_head=dict(num_classes=7))
# From scratch on 64 images: a higher learning rate than the ImageNet-initialised recipe
# of ../retinanet_nalaformer_tiny_1x.py (its optimiser otherwise).
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=1e-4))
# A checkpoint at the end of the 400 iterations, a log line every 10.
default_hooks = dict(checkpoint=dict(interval=25), logger=dict(interval=10))
