"""Turn a classification checkpoint into an mmlinattn backbone checkpoint.

Two kinds of SRC:

* ``--official``: a checkpoint in the authors' own layout (NaLaFormer's ``NALA.py`` models,
  SOFT's ``soft_norm_*`` and plain ``soft_*``).  It is converted with the family's
  ``convert_checkpoint`` (what ``convert_weights=True`` does at load time) for the model
  given by ``--arch-check``; the check model also gets the family's official preset, the
  settings under which the authors' outputs are reproduced: NaLaFormer's
  ``OFFICIAL_PRESET`` (softmax stages 3-4, the ``relu_split_rope`` kernel, raw stage maps),
  SOFT's ``OFFICIAL_PRESETS[--preset]`` (``norm`` for SOFT-Norm, the default; ``plain`` for
  the plain SOFT models such as ``SOFT_Tiny``: both files have the same keys)::

      python tools/model_converters/convert_checkpoint.py NaLaFormer_T.pth \\
          work_dirs/nalaformer_t_official.pth --official --arch-check NaLaFormer:tiny
      python tools/model_converters/convert_checkpoint.py SOFT_Tiny.pth.tar \\
          work_dirs/soft_tiny_official.pth --official --arch-check SOFT:tiny-norm --preset plain

* otherwise, a timm checkpoint of an ``mmlinattn.timm`` classifier:

    python tools/model_converters/convert_checkpoint.py output/train/<run>/model_best.pth.tar \\
        work_dirs/nalaformer_tiny_in1k.pth

SRC is what timm's ``train.py`` writes (``{'state_dict', 'state_dict_ema', 'args', ...}``) or
a plain state dict of a ``mmlinattn.timm`` classifier.  The EMA weights are taken where SRC
has them (``--no-ema``: the raw ones), the rule of every loader of this package and of timm.
DST gets ``{'state_dict': backbone
weights, 'meta': {...}}``: the ``backbone.`` prefix stripped, the classification head
dropped, every other tensor unchanged, so the file loads into ``type='mmlinattn.<Family>'``
through ``init_cfg=dict(type='Pretrained', checkpoint=DST)``.  ``meta['backbone_cfg']``
records the model the weights were converted for (the check model's config below, options
included); loading DST into a backbone of another family, arch or option stops and says
which (:mod:`mmlinattn.utils.checkpoint_identity`), since key names cannot tell, e.g., the
NaLaFormer authors' model from the paper's.

The match report checks the converted weights against a freshly built dense backbone:
``--model NAME`` (the timm model; the default is the ``arch`` timm stored in SRC, with the
``--model-kwargs`` it was trained with), or ``--arch-check TYPE:ARCH`` (e.g.
``NaLaFormer:tiny``; the family's other arguments at their defaults).  The exit status is 1
(and DST is not written, unless ``--force``) when a backbone parameter is missing,
unexpected or of another shape.
"""
import argparse
import ast
import os
import os.path as osp
import sys
from typing import Optional

import torch


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='timm classifier checkpoint -> mmlinattn backbone checkpoint')
    parser.add_argument('src', help='timm checkpoint (train.py output or a state dict)')
    parser.add_argument('dst', help='output backbone checkpoint')
    parser.add_argument('--ema', action=argparse.BooleanOptionalAction, default=None,
                        help="the EMA weights ('state_dict_ema' of timm train.py, 'model_ema' "
                        "of the authors' scripts) are taken where SRC has them, as every "
                        'loader of mmlinattn and timm does; --ema requires them, --no-ema '
                        'takes the raw weights')
    parser.add_argument('--model', default=None,
                        help='timm model name to check against (default: the arch stored in '
                        'SRC)')
    parser.add_argument('--arch-check', default=None, metavar='TYPE:ARCH',
                        help="check against MODELS.build(dict(type=TYPE, arch=ARCH)), e.g. "
                        "'NaLaFormer:tiny'; ARCH may be a Python dict literal")
    parser.add_argument('--official', action='store_true',
                        help="SRC is in the authors' layout: convert it with the family's "
                        'convert_checkpoint (needs --arch-check)')
    parser.add_argument('--preset', default=None, choices=('norm', 'plain'),
                        help="with --official for SOFT: which of the authors' models SRC is "
                        "(SOFT-Norm 'norm', the default, or plain SOFT 'plain')")
    parser.add_argument('--force', action='store_true',
                        help='write DST even when the check finds missing / unexpected / '
                        'mis-shaped backbone tensors')
    return parser.parse_args(argv)


def _official_kwargs(type_: str, preset: Optional[str] = None) -> dict:
    """The arguments under which a family reproduces the authors' outputs."""
    if preset is not None and type_ != 'SOFT':
        raise ValueError(f'--preset is for SOFT checkpoints, not {type_}')
    if type_ == 'NaLaFormer':
        from mmlinattn.models.backbones.nalaformer import OFFICIAL_PRESET
        return dict(OFFICIAL_PRESET)
    if type_ == 'SOFT':
        from mmlinattn.models.backbones.soft import OFFICIAL_PRESETS
        return dict(OFFICIAL_PRESETS[preset or 'norm'])
    return {}


def _check_model_from_arch(spec: str, official: bool = False,
                           preset: Optional[str] = None) -> tuple:
    import mmlinattn.models  # noqa: F401
    from mmlinattn.registry import MODELS
    if ':' not in spec:
        raise ValueError(f"--arch-check must be TYPE:ARCH (e.g. 'NaLaFormer:tiny'), got "
                         f'{spec!r}')
    type_, arch = spec.split(':', 1)
    type_ = type_[len('mmlinattn.'):] if type_.startswith('mmlinattn.') else type_
    if arch.strip().startswith('{'):
        arch = ast.literal_eval(arch)
    cfg = dict(type=type_, arch=arch, **(_official_kwargs(type_, preset) if official else {}))
    return MODELS.build(cfg), dict(cfg, type=f'mmlinattn.{type_}')


def _check_model_from_timm(name: str, model_kwargs: dict) -> tuple:
    import timm

    import mmlinattn.timm  # noqa: F401  (registers the models)
    if name not in timm.list_models(module='linattn_models'):
        raise ValueError(f'--model {name!r} is not an mmlinattn.timm model; choose from '
                         f'{timm.list_models(module="linattn_models")}')
    model = timm.create_model(name, num_classes=0, **model_kwargs)
    return model.backbone, model.backbone_cfg


def _stored_model(ckpt) -> tuple:
    """(timm model name, model kwargs) that timm train.py stored in the checkpoint."""
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get('arch'), str):
        return None, {}
    args = ckpt.get('args')
    kwargs = getattr(args, 'model_kwargs', None) or {}
    return ckpt['arch'], dict(kwargs)


def convert(args: argparse.Namespace) -> int:
    from mmlinattn.timm.convert import classifier_to_backbone, load_timm_checkpoint
    from mmlinattn.utils.checkpoint import EMA_KEYS, extract_weights, match_report

    ckpt = load_timm_checkpoint(args.src)
    try:
        source, key = extract_weights(ckpt, ema=args.ema)
    except ValueError as err:
        print(f'ERROR: {err}')
        return 1
    took = (f'the EMA weights ({key!r})' if key in EMA_KEYS else
            f'the raw weights ({key!r})' if key else 'a plain state dict')
    print(f'{args.src}: {took}')
    model = cfg = None
    stored, stored_kwargs = _stored_model(ckpt)
    if args.preset and not args.official:
        print('ERROR: --preset selects the attention of an authors\' SOFT checkpoint and needs '
              '--official')
        return 1
    if args.official:
        if not args.arch_check:
            print('ERROR: --official needs --arch-check TYPE:ARCH (the model the authors\' '
                  'checkpoint belongs to, e.g. NaLaFormer:tiny or SOFT:tiny-norm)')
            return 1
        try:
            model, cfg = _check_model_from_arch(args.arch_check, official=True,
                                                preset=args.preset)
            state_dict = model.convert_checkpoint(source)
        except ValueError as err:  # a wrong --preset / arch for this checkpoint: say so
            print(f'ERROR: {err}')
            return 1
        print(f"{args.src}: authors' layout, {len(source)} tensors -> {len(state_dict)} "
              f'backbone tensors ({type(model).__name__}.convert_checkpoint)')
    else:
        state_dict, dropped = classifier_to_backbone(source)
        print(f'{args.src}: {len(state_dict)} '
              f'backbone tensors kept, {len(dropped)} dropped ({", ".join(dropped[:6])}'
              f'{", ..." if len(dropped) > 6 else ""})')
    if model is None and args.arch_check:
        model, cfg = _check_model_from_arch(args.arch_check)
    elif model is None and (args.model or stored):
        name = args.model or stored
        model, cfg = _check_model_from_timm(name, stored_kwargs if name == stored else {})
    ok = True
    if model is None:
        print('no check model (pass --model or --arch-check): match report skipped')
    else:
        report = match_report(model, state_dict)
        own = dict(model.named_parameters())
        missing_params = [k for k in report['missing'] if k in own]
        print(f'match report against {cfg}: {len(report["matched"])} tensors matched, '
              f'{report["fraction"]:.2%} of the backbone parameters; missing '
              f'{len(report["missing"])} (parameters: {len(missing_params)}), unexpected '
              f'{len(report["unexpected"])}, shape mismatch {len(report["shape_mismatch"])}')
        for kind in ('missing', 'unexpected', 'shape_mismatch'):
            if report[kind]:
                print(f'  {kind} (first 10): {report[kind][:10]}')
        ok = not (missing_params or report['unexpected'] or report['shape_mismatch'])

    if not ok and not args.force:
        print(f'ERROR: the converted weights do not fill the backbone exactly (see above); '
              f'{args.dst} not written (check --model / --arch-check, or pass --force)')
        return 1
    meta = dict(source=osp.abspath(args.src), ema=key in EMA_KEYS, weights_key=key,
                official=bool(args.official),
                converter='mmlinattn tools/model_converters/convert_checkpoint.py')
    if cfg is not None:
        meta['backbone_cfg'] = repr(cfg)
    if stored:
        meta['timm_model'] = stored
    os.makedirs(osp.dirname(osp.abspath(args.dst)), exist_ok=True)
    torch.save(dict(state_dict=state_dict, meta=meta), args.dst)
    print(f'saved {args.dst}')
    if cfg is not None and ok:
        shown = {k: v for k, v in cfg.items() if (k, v) != ('in_channels', 3)}
        print(f"use it as: backbone=dict({', '.join(f'{k}={v!r}' for k, v in shown.items())}, "
              f"init_cfg=dict(type='Pretrained', checkpoint={args.dst!r}))")
    return 0 if ok else 1


def main(argv=None) -> int:
    from mmlinattn.utils.checkpoint import CorruptCheckpointError, UnsafeCheckpointError
    args = parse_args(argv)
    try:
        return convert(args)
    except FileNotFoundError as err:   # the source file: a download not made yet, a typo
        print(f'ERROR: {err}. Give the path of the authors\' ImageNet file or of your timm '
              f'checkpoint (docs/user_guides/weights.md says where each comes from).')
    except (CorruptCheckpointError, UnsafeCheckpointError) as err:
        print(f'ERROR: {err}')
    return 1


if __name__ == '__main__':
    sys.exit(main())
