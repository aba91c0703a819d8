"""InfSA attention maps of an image as a PNG overlay, optionally with the eigenvector
alignment of §4.5 (cosine / Spearman of Linear-InfSA's weights with the Perron vector,
next to the uniform and α baselines).

    python tools/analysis_tools/infsa_attention_map.py IMAGE --out attn.png
    python tools/analysis_tools/infsa_attention_map.py --demo --backbone InfViTPlain \\
        --arch l4 --alignment
    python tools/analysis_tools/infsa_attention_map.py IMAGE \\
        --checkpoint work_dirs/x/iter_160000.pth --prefix backbone. --size 512

Without ``--checkpoint`` the backbone is randomly initialised (maps then show structure of
the input statistics only).
"""
import argparse
import numpy as np
import torch

import mmlinattn.models  # noqa: F401  (registers the backbones)
from mmlinattn.analysis import (attention_maps, model_eigenvector_alignment,
                                save_attention_overlay)
from mmlinattn.registry import MODELS
from mmlinattn.utils.checkpoint_schemes import install_safe_checkpoint_loading

MEAN = np.array([123.675, 116.28, 103.53])
STD = np.array([58.395, 57.12, 57.375])


def demo_image(size: int) -> np.ndarray:
    """A gradient background with a disk and a square, (size, size, 3) uint8."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.stack([0.3 + 0.2 * xx, 0.4 + 0.1 * yy, 0.35 + 0.0 * xx], -1)
    disk = (xx - 0.35) ** 2 + (yy - 0.4) ** 2 < 0.15 ** 2
    img[disk] = (0.9, 0.2, 0.15)
    square = (abs(xx - 0.72) < 0.1) & (abs(yy - 0.7) < 0.1)
    img[square] = (0.1, 0.2, 0.85)
    return (img * 255).astype(np.uint8)


def load_image(path: str, size: int) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(path).convert('RGB').resize((size, size), Image.BILINEAR))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('image', nargs='?', help='image file (omit with --demo)')
    p.add_argument('--demo', action='store_true', help='use a generated demo image')
    p.add_argument('--backbone', default='InfViT', choices=['InfViT', 'InfViTPlain'])
    p.add_argument('--arch', default=None, help="arch name (default: 'tiny' / 'l4')")
    p.add_argument('--mixer', default='linear', choices=['linear', 'pure'],
                   help='InfViTPlain: mixer of every block; InfViT: mixer of stage 4')
    p.add_argument('--checkpoint', help='weights to load (mmengine / plain state dict)')
    p.add_argument('--prefix', help="key prefix to take from the checkpoint, e.g. 'backbone.'")
    p.add_argument('--size', type=int, default=224, help='square input size')
    p.add_argument('--max-tokens', type=int, default=4096,
                   help='skip dense (N x N) analysis of blocks with more tokens')
    p.add_argument('--alignment', action='store_true',
                   help='also print the eigenvector alignment of every Linear-InfSA block')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out', default='infsa_attention.png', help='output PNG')
    args = p.parse_args(argv)
    if bool(args.image) == args.demo:
        p.error('give an image path or --demo (not both)')
    return args


def build_backbone(args) -> torch.nn.Module:
    if args.backbone == 'InfViT':
        cfg = dict(type='InfViT', arch=args.arch or 'tiny',
                   stage_mixers=('linear', 'linear', 'linear', args.mixer))
    else:
        cfg = dict(type='InfViTPlain', arch=args.arch or 'l4', mixer=args.mixer)
    if args.checkpoint:
        cfg['init_cfg'] = dict(type='Pretrained', checkpoint=args.checkpoint,
                               prefix=args.prefix)
    model = MODELS.build(cfg)
    model.init_weights()
    return model.eval()


def main(argv=None) -> None:
    args = parse_args(argv)
    install_safe_checkpoint_loading()
    torch.manual_seed(args.seed)
    image = demo_image(args.size) if args.demo else load_image(args.image, args.size)
    x = torch.from_numpy((image - MEAN) / STD).permute(2, 0, 1)[None].float()
    model = build_backbone(args)
    maps = attention_maps(model, x, max_tokens=args.max_tokens)
    save_attention_overlay(image, {k: v[0] for k, v in maps.items()}, args.out)
    print(f'wrote {args.out} ({len(maps)} attention maps)')
    if args.alignment:
        res = model_eigenvector_alignment(model, x, max_tokens=args.max_tokens)
        print(f'{"block":28s} {"cos(a,v)":>16s} {"cos(1,v)":>16s} {"cos(alpha,v)":>16s} '
              f'{"spearman(a,v)":>16s}')
        for name, r in res.items():
            cols = [f'{r[k][0]:.3f} ± {r[k][1]:.3f}'
                    for k in ('cos_a', 'cos_uniform', 'cos_alpha', 'spearman_a')]
            print(f'{name:28s} ' + ' '.join(f'{c:>16s}' for c in cols) +
                  f'  (n={r["samples"]})')


if __name__ == '__main__':
    main()
