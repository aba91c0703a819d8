"""timm entry points for the mmlinattn classifiers (``timm.create_model('nalaformer_tiny')``).

Each entry point builds a :class:`~mmlinattn.timm.classifier.LinAttnClassifier` around the
registered dense backbone with the paper's arch and default arguments.  ``pretrained_cfg``
carries the evaluation preprocessing of each paper (no weights are published, so
``pretrained=True`` has nothing to download).  ``timm.list_models(module='linattn_models')``
lists them all.
"""
from typing import Any, Dict

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model

from .. import models  # noqa: F401  (registers the backbones)
from ..models.backbones.nalaformer import OFFICIAL_PRESET
from ..models.backbones.soft import OFFICIAL_PRESETS as SOFT_PRESETS
from ..models.converters import nalaformer_classifier_state_dict, soft_classifier_state_dict
from .classifier import LinAttnClassifier
from .features import PYRAMID_FEATURE_CFG

__all__ = ['LinAttnClassifier', 'MODEL_SPECS']

_FIRST_CONV = {
    'SOFT': 'backbone.patch_embeds.0.0.conv',
    'NaLaFormer': 'backbone.patch_embeds.0.0.conv',
    'InfViT': 'backbone.patch_embeds.0.conv',
    'InfViTPlain': 'backbone.patch_embeds.0.proj.conv',
    'LDN': 'backbone.patch_embeds.0.conv',
}
_PAPERS = {
    'SOFT': ('Softmax-free Linear Transformers (IJCV 2024)', None),
    'NaLaFormer': ('NaLaFormer: Norm-Aware Linear Attention for Transformer Models',
                   'arXiv:2506.21137'),
    'InfViT': ('Infinite Self-Attention', 'arXiv:2603.00175'),
    'InfViTPlain': ('Infinite Self-Attention', 'arXiv:2603.00175'),
    'LDN': ('Linear Diffusion Networks: Harnessing Diffusion Processes for Global '
            'Interactions', None),
}

# name -> (backbone config, head type, crop_pct, note)
# SOFT: 224 center crop of a 256 resize (Table 3); NaLaFormer and LDN: DeiT's 0.875;
# InfViT: 224 center crop of a 257 resize (its §4.3 validation transform).
_INF_CROP = 224 / 257
# The paper's plain ViT/16 models (Table 3): width 768 as the text states; the ``_wide`` ones
# use the width 1024 its parameter counts (Tables 2-3) imply.  Pure-4L has 16 heads (Sec. 4),
# Linear-4L 64.  Per size: (the linear model's arch, the pure model's arch).
_PLAIN_ARCHS = {
    'l4': ('l4', dict(embed_dims=768, num_layers=4, num_heads=16, mlp_ratio=4.0)),
    'l24': ('l24', 'l24'),
    'l4_wide': ('l4-wide', dict(embed_dims=1024, num_layers=4, num_heads=16, mlp_ratio=4.0)),
    'l24_wide': ('l24-wide', 'l24-wide'),
}


def _plain(arch, mixer: str) -> tuple:
    return dict(type='InfViTPlain', arch=arch, mixer=mixer), 'token', _INF_CROP


MODEL_SPECS: Dict[str, tuple] = {
    'soft_tiny': (dict(type='SOFT', arch='tiny'), 'norm_linear', 0.875),
    'soft_small': (dict(type='SOFT', arch='small'), 'norm_linear', 0.875),
    'soft_medium': (dict(type='SOFT', arch='medium'), 'norm_linear', 0.875),
    'soft_large': (dict(type='SOFT', arch='large'), 'norm_linear', 0.875),
    # The authors' released classifiers as their code computes them (their model names):
    # class-token head, SOFT-Norm or plain attention; their files load through
    # pretrained_cfg_overlay=dict(file=...) (converted by checkpoint_filter_fn).
    **{f'soft_norm_{size}': (dict(type='SOFT', arch=f'{size}-norm', **SOFT_PRESETS['norm']),
                             'cls_token', 0.875)
       for size in ('tiny', 'small', 'medium', 'large', 'huge')},
    'soft_plain_tiny': (dict(type='SOFT', arch='tiny-norm', **SOFT_PRESETS['plain']),
                        'cls_token', 0.875),
    # NaLaFormer's head reads the raw stage-4 map (authors' code): no output LayerNorm.
    'nalaformer_tiny': (dict(type='NaLaFormer', arch='tiny', out_norm=False), 'nala', 0.875),
    'nalaformer_small': (dict(type='NaLaFormer', arch='small', out_norm=False), 'nala', 0.875),
    'nalaformer_base': (dict(type='NaLaFormer', arch='base', out_norm=False), 'nala', 0.875),
    'nalaformer_large': (dict(type='NaLaFormer', arch='large', out_norm=False), 'nala', 0.875),
    # The authors' models as their code computes them: their checkpoints load through
    # pretrained_cfg_overlay=dict(file=...) (converted by checkpoint_filter_fn).
    'nalaformer_tiny_official': (dict(type='NaLaFormer', arch='tiny', **OFFICIAL_PRESET),
                                 'nala', 0.875),
    'nalaformer_small_official': (dict(type='NaLaFormer', arch='small', **OFFICIAL_PRESET),
                                  'nala', 0.875),
    'nalaformer_base_official': (dict(type='NaLaFormer', arch='base', **OFFICIAL_PRESET),
                                 'nala', 0.875),
    'nalaformer_large_official': (dict(type='NaLaFormer', arch='large', **OFFICIAL_PRESET),
                                  'nala', 0.875),
    'infvit_tiny': (dict(type='InfViT', arch='tiny'), 'norm_linear', _INF_CROP),
    'infvit_small': (dict(type='InfViT', arch='small'), 'norm_linear', _INF_CROP),
    'infvit_base': (dict(type='InfViT', arch='base'), 'norm_linear', _INF_CROP),
    # The paper's plain ViT/16 models (Table 3): width 768 as the text states; the
    # ``_wide`` ones use the width 1024 its parameter counts (Tables 2-3) imply.
    # Pure-4L has 16 heads (§4), Linear-4L 64.
    **{f'infvit_plain_{mixer}_{size}': _plain(arch, mixer)
       for size, archs in _PLAIN_ARCHS.items() for mixer, arch in zip(('linear', 'pure'), archs)},
    'ldn_tiny': (dict(type='LDN', arch='tiny'), 'norm_linear', 0.875),
    'ldn_small': (dict(type='LDN', arch='small'), 'norm_linear', 0.875),
    'ldn_base': (dict(type='LDN', arch='base'), 'norm_linear', 0.875),
}


def _cfg(family: str, head_type: str, crop_pct: float) -> Dict[str, Any]:
    plain = head_type == 'token'
    paper_name, paper_id = _PAPERS[family]
    return dict(
        url='', num_classes=1000, input_size=(3, 224, 224), min_input_size=(3, 32, 32),
        pool_size=(14, 14) if plain else (7, 7), crop_pct=round(crop_pct, 4),
        interpolation='bicubic', mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD,
        first_conv=_FIRST_CONV[family], classifier='head.fc', paper_name=paper_name,
        paper_ids=paper_id, license='apache-2.0',
        notes=('no released weights: train with timm train.py, then '
               'tools/model_converters/convert_checkpoint.py', ))


default_cfgs = generate_default_cfgs(
    {name: _cfg(spec[0]['type'], spec[1], spec[2]) for name, spec in MODEL_SPECS.items()})


def checkpoint_filter_fn(state_dict: Dict[str, Any], model: LinAttnClassifier) -> Dict[str, Any]:
    """timm's ``pretrained_filter_fn``: an authors' NaLaFormer or SOFT checkpoint (their key
    layouts) in our classifier's names; anything else unchanged."""
    state_dict = state_dict.get('model', state_dict)
    if 'patch_embed.proj.0.weight' in state_dict:
        return nalaformer_classifier_state_dict(state_dict)
    if 'patch_embed1.proj.0.weight' in state_dict:
        return soft_classifier_state_dict(state_dict)
    return state_dict


def _create(name: str, pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    backbone, head_type, _ = MODEL_SPECS[name]
    if kwargs.get('features_only') and head_type == 'token':
        raise ValueError(f'{name}: features_only needs a pyramid; the plain ViT returns one '
                         'stride-16 map (use mmlinattn.SimpleFeaturePyramid on it)')
    return build_model_with_cfg(LinAttnClassifier, name, pretrained, backbone=dict(backbone),
                                head_type=head_type, pretrained_filter_fn=checkpoint_filter_fn,
                                feature_cfg=dict(PYRAMID_FEATURE_CFG), **kwargs)


# One entry point per name: timm registers a function under its __name__.
@register_model
def soft_tiny(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """SOFT++-Tiny (Table 1 as printed: depths 2-2-5-2)."""
    return _create('soft_tiny', pretrained, **kwargs)


@register_model
def soft_small(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """SOFT++-Small (Table 1)."""
    return _create('soft_small', pretrained, **kwargs)


@register_model
def soft_medium(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """SOFT++-Medium (Table 1)."""
    return _create('soft_medium', pretrained, **kwargs)


@register_model
def soft_large(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """SOFT++-Large (Table 1)."""
    return _create('soft_large', pretrained, **kwargs)


@register_model
def soft_norm_tiny(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """The authors' SOFT-Norm Tiny (``soft_norm_tiny``) as their code computes it."""
    return _create('soft_norm_tiny', pretrained, **kwargs)


@register_model
def soft_norm_small(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """The authors' SOFT-Norm Small (depths 1-3-7-4, see ``SOFT``'s ``small-norm``)."""
    return _create('soft_norm_small', pretrained, **kwargs)


@register_model
def soft_norm_medium(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """The authors' SOFT-Norm Medium."""
    return _create('soft_norm_medium', pretrained, **kwargs)


@register_model
def soft_norm_large(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """The authors' SOFT-Norm Large."""
    return _create('soft_norm_large', pretrained, **kwargs)


@register_model
def soft_norm_huge(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """The authors' SOFT-Norm Huge."""
    return _create('soft_norm_huge', pretrained, **kwargs)


@register_model
def soft_plain_tiny(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """The authors' plain SOFT Tiny (their ``soft_tiny``, NeurIPS 2021 release)."""
    return _create('soft_plain_tiny', pretrained, **kwargs)


@register_model
def nalaformer_tiny(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """NaLaFormer-T (authors' config behind Table 1), NaLa attention in every stage."""
    return _create('nalaformer_tiny', pretrained, **kwargs)


@register_model
def nalaformer_small(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """NaLaFormer-S."""
    return _create('nalaformer_small', pretrained, **kwargs)


@register_model
def nalaformer_base(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """NaLaFormer-B."""
    return _create('nalaformer_base', pretrained, **kwargs)


@register_model
def nalaformer_large(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """NaLaFormer-L."""
    return _create('nalaformer_large', pretrained, **kwargs)


@register_model
def nalaformer_tiny_official(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """NaLaFormer-T as the authors' code computes it (loads their checkpoints)."""
    return _create('nalaformer_tiny_official', pretrained, **kwargs)


@register_model
def nalaformer_small_official(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """NaLaFormer-S as the authors' code computes it."""
    return _create('nalaformer_small_official', pretrained, **kwargs)


@register_model
def nalaformer_base_official(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """NaLaFormer-B as the authors' code computes it."""
    return _create('nalaformer_base_official', pretrained, **kwargs)


@register_model
def nalaformer_large_official(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """NaLaFormer-L as the authors' code computes it."""
    return _create('nalaformer_large_official', pretrained, **kwargs)


@register_model
def infvit_tiny(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT pyramid, tiny (depths 2-2-2-2; not in the paper)."""
    return _create('infvit_tiny', pretrained, **kwargs)


@register_model
def infvit_small(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT pyramid, small (depths 3-4-6-3; not in the paper)."""
    return _create('infvit_small', pretrained, **kwargs)


@register_model
def infvit_base(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT pyramid, base (depths 3-4-18-3; not in the paper)."""
    return _create('infvit_base', pretrained, **kwargs)


@register_model
def infvit_plain_linear_l4(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT-Linear 4L (paper Table 3), C = 768, 64 heads."""
    return _create('infvit_plain_linear_l4', pretrained, **kwargs)


@register_model
def infvit_plain_pure_l4(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT-Pure 4L (paper Table 3), C = 768, 16 heads."""
    return _create('infvit_plain_pure_l4', pretrained, **kwargs)


@register_model
def infvit_plain_linear_l24(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT-Linear 24L (paper Table 3), C = 768, 16 heads."""
    return _create('infvit_plain_linear_l24', pretrained, **kwargs)


@register_model
def infvit_plain_pure_l24(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT-Pure 24L (paper Table 3), C = 768, 16 heads."""
    return _create('infvit_plain_pure_l24', pretrained, **kwargs)


@register_model
def infvit_plain_linear_l4_wide(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT-Linear 4L at C = 1024 (the width Table 3's 53.5 M implies)."""
    return _create('infvit_plain_linear_l4_wide', pretrained, **kwargs)


@register_model
def infvit_plain_pure_l4_wide(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT-Pure 4L at C = 1024, 16 heads."""
    return _create('infvit_plain_pure_l4_wide', pretrained, **kwargs)


@register_model
def infvit_plain_linear_l24_wide(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT-Linear 24L at C = 1024 (ViT-L width)."""
    return _create('infvit_plain_linear_l24_wide', pretrained, **kwargs)


@register_model
def infvit_plain_pure_l24_wide(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """InfViT-Pure 24L at C = 1024 (ViT-L width)."""
    return _create('infvit_plain_pure_l24_wide', pretrained, **kwargs)


@register_model
def ldn_tiny(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """LDN pyramid, tiny (our 2-D adaptation of the 1-D paper model)."""
    return _create('ldn_tiny', pretrained, **kwargs)


@register_model
def ldn_small(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """LDN pyramid, small."""
    return _create('ldn_small', pretrained, **kwargs)


@register_model
def ldn_base(pretrained: bool = False, **kwargs) -> LinAttnClassifier:
    """LDN pyramid, base."""
    return _create('ldn_base', pretrained, **kwargs)
