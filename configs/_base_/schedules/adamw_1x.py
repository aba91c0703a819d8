# mmdet's 1x schedule (epoch-based, validation every epoch) with AdamW in place of SGD and no
# weight decay on norm layers.  Each config states its learning rate, weight decay, no-decay
# parameters, LR schedule and number of epochs.
_base_ = 'mmdet::_base_/schedules/schedule_1x.py'
optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', betas=(0.9, 0.999)),  # none of SGD's settings
    paramwise_cfg=dict(norm_decay_mult=0.0))
