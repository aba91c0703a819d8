"""timm classifiers of the mmlinattn backbones, for ImageNet pretraining.

``import mmlinattn.timm`` registers with timm's model registry: ``soft_{tiny,small,medium,
large}``, ``nalaformer_{tiny,small,base,large}``, ``infvit_{tiny,small,base}``, the paper's
plain InfViTs ``infvit_plain_{linear,pure}_{l4,l24}[_wide]`` and ``ldn_{tiny,small,base}``.
Each is the dense backbone (``model.backbone``, the same class and parameter names an mmdet /
mmseg config builds) plus a classification head (``model.head``); see ``docs/user_guides/weights.md``.

Needs timm; imports neither mmdet nor mmseg.
"""
from .classifier import LinAttnClassifier
from .convert import classifier_to_backbone
from .linattn_models import MODEL_SPECS

__all__ = ['LinAttnClassifier', 'MODEL_SPECS', 'classifier_to_backbone']
