"""Official (authors') checkpoint layouts -> mmlinattn key names, as plain state-dict maps.

Like mmdet's ``ckpt_convert.py``: no model is built here; each backbone's
``convert_checkpoint`` (``convert_weights=True``) and ``tools/model_converters/convert_checkpoint.py`` call
these functions.
"""
from .common import check_checkpoint_depths, fold_conv_bias_into_bn, rename_prefix
from .nalaformer import convert_nalaformer_checkpoint, nalaformer_classifier_state_dict
from .soft import convert_soft_checkpoint, soft_classifier_state_dict

__all__ = [
    'check_checkpoint_depths', 'fold_conv_bias_into_bn', 'rename_prefix', 'convert_nalaformer_checkpoint',
    'nalaformer_classifier_state_dict', 'convert_soft_checkpoint', 'soft_classifier_state_dict'
]
