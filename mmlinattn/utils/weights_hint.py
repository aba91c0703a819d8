"""Which ImageNet weights exist for a backbone, and how to make the file a config asks for.

This project releases no checkpoints.  Of the papers' authors, only SOFT's have released
ImageNet files (:data:`RELEASED`): their SOFT-Norm models (archs ``tiny-norm`` to
``large-norm`` with ``OFFICIAL_PRESETS['norm']``) and plain SOFT-Tiny (``tiny-norm`` with
``OFFICIAL_PRESETS['plain']``).  The NaLaFormer authors announce weights for their model
(``OFFICIAL_PRESET``) but have not released them.  Everything else is pretrained with timm
(``mmlinattn.timm``) and converted, or trained from scratch.
"""
from typing import Optional, Tuple

WEIGHTS_DOC = 'docs/user_guides/weights.md'
CONVERTER = 'python tools/model_converters/convert_checkpoint.py'
#: timm model-name prefix per backbone type
TIMM_PREFIX = {'SOFT': 'soft', 'NaLaFormer': 'nalaformer', 'InfViT': 'infvit',
               'InfViTPlain': 'infvit_plain_linear', 'LDN': 'ldn'}

#: The authors' release page of the SOFT files (their README's "Main results" table).
SOFT_RELEASE_PAGE = 'https://github.com/fudan-zvg/SOFT#main-results'
_DRIVE = 'https://drive.google.com/file/d/{}/view'
#: Every ImageNet file the papers' authors have released, by (backbone type, arch, preset):
#: (the file's name in their release, its download link).  The preset is the name in the
#: family's ``OFFICIAL_PRESETS``.  Nothing else has been released.
RELEASED = {
    ('SOFT', 'tiny-norm', 'norm'): ('SOFT_Tiny_norm', _DRIVE.format(
        '1Isy5b9v_4pyIXDqhKPNRq3WKH0etDlfl')),
    ('SOFT', 'small-norm', 'norm'): ('SOFT_Small_norm', _DRIVE.format(
        '1OBjn7FzVdNP1Urqxq7X0yDykyPhxAAW1')),
    ('SOFT', 'medium-norm', 'norm'): ('SOFT_Medium_norm', _DRIVE.format(
        '1K2C6daaJn3jwurWh38uvV7rexirWjuzh')),
    ('SOFT', 'large-norm', 'norm'): ('SOFT_Large_norm', _DRIVE.format(
        '1aRYuF_gbBGyiXUDKEcpHJmM04SdvTUdP')),
    ('SOFT', 'tiny-norm', 'plain'): ('SOFT_Tiny', _DRIVE.format(
        '1S04DCotIOkP0DaBb8WStQ513z82qT9de')),
}
#: What the NaLaFormer authors' repository says of its weights.
NALAFORMER_STATUS = ("the NaLaFormer authors have not released ImageNet weights (their "
                     "repository lists them as 'coming soon')")
#: The options that select the authors' models, per backbone type and preset name (the
#: families' OFFICIAL_PRESETS, repeated here so that this module imports no model code).
PRESETS = {
    'SOFT': {'norm': dict(newton_init='paper', landmark_grid='crop'),
             'plain': dict(sym_norm=False, newton_init='scaled', newton_ridge=0.01,
                           landmark_grid='crop')},
    'NaLaFormer': {'official': dict(attn_types='official', kernel='relu_split_rope',
                                    out_norm=False)},
}


def preset_of(backbone_type: str, options: Optional[dict]) -> Optional[str]:
    """The name of the authors' preset that a backbone config's ``options`` select, or None."""
    family = backbone_type.split('.')[-1]
    for name, preset in PRESETS.get(family, {}).items():
        if options and all(options.get(k) == v for k, v in preset.items()):
            return name
    return None


def released_file(backbone_type: str, arch, options: Optional[dict]) -> Optional[Tuple[str, str]]:
    """(name, download link) of the authors' released file that fits a backbone config, or
    None where no released file fits it."""
    family = backbone_type.split('.')[-1]
    if not isinstance(arch, str):
        return None
    return RELEASED.get((family, arch, preset_of(family, options)))


def _timm_name(family: str, arch: Optional[str], preset: Optional[str]) -> str:
    prefix = TIMM_PREFIX.get(family, family.lower())
    name = f'{prefix}_{arch}' if isinstance(arch, str) else f'{prefix}_<arch>'
    return name + '_official' if family == 'NaLaFormer' and preset == 'official' else name


def arch_name(model) -> Optional[str]:
    """The name in ``arch_settings`` of a built backbone's arch, or None for a custom one."""
    for name, setting in getattr(type(model), 'arch_settings', {}).items():
        if all(model.arch.get(k) == v for k, v in dict(setting).items()):
            return name
    return None


def weights_hint(backbone_type: str, arch: Optional[str], path: str,
                 options: Optional[dict] = None) -> str:
    """How to make ``path``, the ImageNet checkpoint a ``backbone_type`` / ``arch`` config asks
    for (``options``: the config's other backbone arguments, which select a preset), and how
    to run without it."""
    family = backbone_type.split('.')[-1]
    preset = preset_of(family, options)
    timm = _timm_name(family, arch, preset)
    pretrain = (f'pretrain timm\'s {timm} on ImageNet (import mmlinattn.timm) and convert it: '
                f'{CONVERTER} model_best.pth.tar {path}')
    released = released_file(family, arch, options)
    if released:
        name, link = released
        flag = ' --preset plain' if preset == 'plain' else ''
        source = (f"Download the SOFT authors' {name} ({link}; all their files: "
                  f'{SOFT_RELEASE_PAGE}) and convert it: {CONVERTER} {name}.pth {path} '
                  f'--official --arch-check SOFT:{arch}{flag}.')
    elif family == 'NaLaFormer':
        size = arch[:1].upper() if isinstance(arch, str) else '{T,S,B,L}'
        arch = arch if isinstance(arch, str) else '<arch>'
        convert = (f'{CONVERTER} NALAFORMER_{size}.pth {path} --official --arch-check '
                   f'NaLaFormer:{arch}')
        if preset == 'official':
            source = (f'Note: {NALAFORMER_STATUS}. This config runs their model; once their '
                      f'NALAFORMER_{size}.pth is out, convert it: {convert}. Until then, '
                      f'{pretrain}.')
        else:
            source = (f'Note: {NALAFORMER_STATUS}. Their announced NALAFORMER_{size}.pth fits '
                      f"their model (attn_types='official', kernel='relu_split_rope', "
                      f"out_norm=False: the '*-official' configs), not the paper's kernel this "
                      f'config runs. For this config, {pretrain}.')
    elif family == 'SOFT' and isinstance(arch, str) and arch.endswith('-norm'):
        source = (f'The SOFT authors released no file for arch {arch!r} with these options '
                  f'(released: {", ".join(n for n, _ in RELEASED.values())}; '
                  f'{SOFT_RELEASE_PAGE}): {pretrain}.')
    elif family == 'SOFT':
        source = (f'No weights are released for the SOFT++ arch {arch!r} (the authors release '
                  f'their *-norm archs): {pretrain}.')
    else:
        source = f'No {family} weights are released: {pretrain}.'
    stem = (" Give InfViT and LDN a convolutional stem when training from scratch "
            "(--cfg-options model.backbone.stem=conv, for LDN also model.backbone.overlap_downsample=True): "
            'their patchify stems barely learn without ImageNet weights.'
            if family in ('InfViT', 'LDN') else '')
    return (f'{source} To train from scratch instead, pass --cfg-options '
            f'model.backbone.init_cfg=None (and a from-scratch schedule).{stem} '
            f'See {WEIGHTS_DOC}.')
