"""Attention of one query over the image, for every block of a backbone, as a PNG grid.

    python tools/analysis_tools/attention_map.py SOFT --out soft_attention.png
    python tools/analysis_tools/attention_map.py LDN --query 100 120 --size 160
    python tools/analysis_tools/attention_map.py configs/upernet_nalaformer_tiny_ade20k_160k.py \\
        --checkpoint work_dirs/x/iter_160000.pth --image my.jpg

CONFIG_OR_FAMILY is a family (SOFT, NaLaFormer, InfViT, LDN; built with --arch) or a config
whose ``model.backbone`` is used (checkpoint keys under ``backbone.`` are taken).  Without
--checkpoint the weights are random (the default init).  Without --image the photo is
scikit-image's astronaut.
"""
import argparse

import numpy as np
import torch

from benchlib.health import normalise_photo
from mmlinattn.analysis.query_maps import (CAPTIONS, attention_figure, family_of,
                                           query_attention_maps)
from mmlinattn.registry import MODELS
from mmlinattn.utils.checkpoint import safe_load_checkpoint
from mmlinattn.utils.checkpoint_schemes import install_safe_checkpoint_loading

FAMILIES = ('SOFT', 'NaLaFormer', 'InfViT', 'LDN')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('config_or_family', metavar='CONFIG_OR_FAMILY')
    p.add_argument('--arch', default='tiny', help='arch when a family is given')
    p.add_argument('--checkpoint', help='weights (mmengine checkpoint or plain state dict)')
    p.add_argument('--image', help='image file (default: scikit-image astronaut)')
    p.add_argument('--size', type=int, default=224, help='the image is resized to size x size')
    p.add_argument('--query', type=float, nargs=2, metavar=('Y', 'X'),
                   help='query pixel in the resized image (default: its centre)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--dpi', type=int, default=150)
    p.add_argument('--out', default='attention_map.png', help='output PNG')
    return p.parse_args(argv)


def backbone_cfg(config_or_family: str, arch: str) -> dict:
    if config_or_family in FAMILIES:
        return dict(type=f'mmlinattn.{config_or_family}', arch=arch)
    from mmengine.config import Config
    cfg = Config.fromfile(config_or_family).model.backbone.to_dict()
    cfg.pop('_delete_', None)
    cfg.pop('init_cfg', None)
    return cfg


def load_weights(model: torch.nn.Module, path: str) -> None:
    """Strict load of a backbone's weights from a whole-detector/segmentor or plain file."""
    state = safe_load_checkpoint(path)
    state = state.get('state_dict', state)
    if any(k.startswith('backbone.') for k in state):
        state = {k[len('backbone.'):]: v for k, v in state.items() if k.startswith('backbone.')}
    model.load_state_dict(state, strict=True)


def read_image(path, size: int) -> np.ndarray:
    from PIL import Image
    if path:
        img = Image.open(path).convert('RGB')
    else:
        from skimage import data
        img = Image.fromarray(data.astronaut())
    return np.asarray(img.resize((size, size), Image.BILINEAR))


def main(argv=None) -> str:
    args = parse_args(argv)
    install_safe_checkpoint_loading()  # a config's init_cfg may load weights too
    torch.manual_seed(args.seed)
    model = MODELS.build(backbone_cfg(args.config_or_family, args.arch))
    model.init_weights()
    if args.checkpoint:
        load_weights(model, args.checkpoint)
    model.eval()
    image = read_image(args.image, args.size)
    query = args.query or (args.size / 2, args.size / 2)
    family = family_of(model)
    maps = query_attention_maps(model, normalise_photo(image, image.shape[:2]), query, family)
    name = args.config_or_family.split('/')[-1]
    fig = attention_figure(image, maps, query, CAPTIONS[family],
                           title=f'{name}: attention of the query at (y, x) = '
                                 f'({query[0]:g}, {query[1]:g})')
    fig.savefig(args.out, dpi=args.dpi)
    print(f'wrote {args.out} ({len(maps)} blocks)')
    return args.out


if __name__ == '__main__':
    main()
