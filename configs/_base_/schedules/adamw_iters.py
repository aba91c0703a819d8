# mmseg's iteration-based schedule with AdamW in place of SGD and no weight decay on norm layers.
# Each config states its learning rate, weight decay, no-decay parameters, LR schedule and length
# (train_cfg and the checkpoint interval; mmseg's 160k values stand until a config sets them).
_base_ = 'mmseg::_base_/schedules/schedule_160k.py'
optim_wrapper = dict(
    _delete_=True,  # none of SGD's settings, and no clip_grad entry
    type='OptimWrapper',
    optimizer=dict(type='AdamW', betas=(0.9, 0.999)),
    paramwise_cfg=dict(norm_decay_mult=0.0))
