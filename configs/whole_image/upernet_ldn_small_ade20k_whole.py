# configs/upernet_ldn_small_ade20k_160k.py tested on whole images at their native size
# (docs/user_guides/whole_image.md). The model lines turn on the memory-bounded whole-image
# inference and choose the UperNet head that runs its stride-4 part in row stripes (its weights
# and training are mmseg's UPerHead's); the pipeline keeps each image at its native size
# (mmseg's ADE20K test pipeline resizes to 2048x512 first). Training is the parent config's.
_base_ = '../upernet_ldn_small_ade20k_160k.py'
model = dict(type='mmlinattn.WholeImageEncoderDecoder',
             decode_head=dict(type='mmlinattn.StripedUPerHead'))
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
