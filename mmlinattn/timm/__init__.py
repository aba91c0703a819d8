"""timm classifiers of the mmlinattn backbones, for ImageNet pretraining.

``import mmlinattn.timm`` registers with timm's model registry: ``soft_{tiny,small,medium,
large}``, ``nalaformer_{tiny,small,base,large}``, ``infvit_{tiny,small,base}``, the paper's
plain InfViTs ``infvit_plain_{linear,pure}_{l4,l24}[_wide]`` and ``ldn_{tiny,small,base}``.
Each is the dense backbone (``model.backbone``, the same class and parameter names an mmdet /
mmseg config builds) plus a classification head (``model.head``); see ``docs/user_guides/weights.md``.

Needs timm 1.0 (its ``features_only`` interface); imports neither mmdet nor mmseg.
"""
from timm.version import __version__ as _timm_version

if int(_timm_version.split('.')[0]) < 1:
    raise ImportError(
        f'mmlinattn.timm needs timm 1.0 or later (timm\'s features_only interface: '
        f'FeatureGetterNet, feature_take_indices); this environment has timm {_timm_version}. '
        f'The mmdet / mmseg backbones (mmlinattn.models) run on timm 0.9.16 too. Fix: '
        f'pip install "timm>=1.0" (the lanes test 1.0.31)')
from .classifier import LinAttnClassifier
from .convert import classifier_to_backbone
from .linattn_models import MODEL_SPECS

__all__ = ['LinAttnClassifier', 'MODEL_SPECS', 'classifier_to_backbone']
