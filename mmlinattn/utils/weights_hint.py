"""Where a backbone's ImageNet weights come from, said where a run finds the file missing.

Only the papers' authors have released ImageNet weights, and only for some models: the
NaLaFormer files fit the authors' model (``NaLaFormer`` with ``OFFICIAL_PRESET``), the SOFT
files the SOFT-Norm and plain SOFT archs (``*-norm``).  Everything else is pretrained with
timm (``mmlinattn.timm``) and converted.
"""
from typing import Optional

WEIGHTS_DOC = 'docs/user_guides/weights.md'
CONVERTER = 'python tools/model_converters/convert_checkpoint.py'
#: timm model-name prefix per backbone type
TIMM_PREFIX = {'SOFT': 'soft', 'NaLaFormer': 'nalaformer', 'InfViT': 'infvit',
               'InfViTPlain': 'infvit_plain_linear', 'LDN': 'ldn'}


def _timm_name(family: str, arch: Optional[str]) -> str:
    prefix = TIMM_PREFIX.get(family, family.lower())
    return f'{prefix}_{arch}' if isinstance(arch, str) else f'{prefix}_<arch>'


def arch_name(model) -> Optional[str]:
    """The name in ``arch_settings`` of a built backbone's arch, or None for a custom one."""
    for name, setting in getattr(type(model), 'arch_settings', {}).items():
        if all(model.arch.get(k) == v for k, v in dict(setting).items()):
            return name
    return None


def weights_hint(backbone_type: str, arch: Optional[str], path: str) -> str:
    """How to make ``path``, the ImageNet checkpoint a ``backbone_type`` / ``arch`` config asks
    for, and how to run without it."""
    family = backbone_type.split('.')[-1]
    timm = _timm_name(family, arch)
    pretrain = (f'pretrain timm\'s {timm} on ImageNet (import mmlinattn.timm) and convert it: '
                f'{CONVERTER} model_best.pth.tar {path}')
    if family == 'NaLaFormer':
        size = arch[:1].upper() if isinstance(arch, str) else '{T,S,B,L}'
        arch = arch if isinstance(arch, str) else '<arch>'
        source = (f'The authors\' NALAFORMER_{size}.pth fits their model, not the paper\'s '
                  f'kernel this config runs: to use it, convert it with {CONVERTER} '
                  f'NALAFORMER_{size}.pth {path} --official --arch-check NaLaFormer:{arch} and '
                  f"add attn_types='official', kernel='relu_split_rope', out_norm=False to the "
                  f'backbone. For the paper\'s model, {pretrain}.')
    elif family == 'SOFT' and isinstance(arch, str) and arch.endswith('-norm'):
        source = (f'Convert the authors\' soft_norm file for {arch}: {CONVERTER} SRC {path} '
                  f'--official --arch-check SOFT:{arch}.')
    elif family == 'SOFT':
        source = (f'No weights are released for the SOFT++ arch {arch!r} (the authors release '
                  f'their *-norm archs): {pretrain}.')
    else:
        source = f'No {family} weights are released: {pretrain}.'
    return (f'{source} To train from scratch instead, pass --cfg-options '
            f'model.backbone.init_cfg=None (and a from-scratch schedule). See {WEIGHTS_DOC}.')
