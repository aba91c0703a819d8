# configs/semfpn_ldn_small_ade20k_40k.py tested on whole images at their native size
# (docs/user_guides/whole_image.md). The model lines turn on the memory-bounded whole-image
# inference and choose the FPN neck and head that run their stride-4 part in row stripes (their
# weights and training are mmseg's FPN's and FPNHead's); the pipeline keeps each image at its
# native size (mmseg's ADE20K test pipeline resizes to 2048x512 first). Training is the parent
# config's.
_base_ = '../semfpn_ldn_small_ade20k_40k.py'
model = dict(type='mmlinattn.WholeImageEncoderDecoder', neck=dict(type='mmlinattn.StripedFPN'),
             decode_head=dict(type='mmlinattn.StripedFPNHead'))
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
