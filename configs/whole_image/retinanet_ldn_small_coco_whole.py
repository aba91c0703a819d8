# configs/retinanet_ldn_small_1x.py tested on whole images at their native size
# (docs/user_guides/whole_image.md). The model line chooses the RetinaNet head whose inference
# runs in row stripes (its weights and training are mmdet's RetinaHead's); the pipeline keeps
# each image at its native size (mmdet's COCO test pipeline resizes to 1333x800 first; a resize
# by 1.0 keeps the scale factor the boxes are mapped back with). Training is the parent
# config's.
_base_ = '../retinanet_ldn_small_1x.py'
model = dict(bbox_head=dict(type='mmlinattn.StripedRetinaHead'))
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(type='Resize', scale_factor=1.0, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
