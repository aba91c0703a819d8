"""Shared pieces of the reliability tests: one tiny build per backbone, mmdet-style
batch padding, and the alone-vs-batched feature comparison."""
import math

import torch
import torch.nn.functional as F

import mmlinattn.models  # noqa: F401  (registers the backbones)
from mmlinattn.registry import MODELS

# Tiny arch dicts with every structural feature of each family (several heads, a stage
# with two blocks), so the whole catalog runs in seconds on 2 CPU cores.
TINY = {
    'SOFT': dict(type='SOFT', arch=dict(embed_dims=(32, 64, 96, 128), num_heads=(1, 2, 3, 4),
                                        depths=(1, 1, 2, 1))),
    'NaLaFormer': dict(type='NaLaFormer', arch=dict(embed_dims=(16, 32, 48, 64),
                                                    depths=(1, 1, 2, 1),
                                                    num_heads=(1, 2, 3, 4), mlp_ratios=2.0)),
    'InfViT': dict(type='InfViT', arch=dict(embed_dims=(16, 32, 48, 64), depths=(1, 2, 1, 1),
                                            mlp_ratios=(2, 2, 2, 2))),
    'InfViTPlain': dict(type='InfViTPlain', arch=dict(embed_dims=32, num_layers=3, num_heads=4,
                                                      mlp_ratio=2.0), out_indices=(0, 1, 2)),
    'LDN': dict(type='LDN', arch=dict(embed_dims=[16, 32, 64, 64], depths=[2, 1, 2, 1],
                                      num_heads=[1, 2, 2, 2])),
}
FAMILIES = tuple(TINY)


def build(family: str, **kwargs):
    """The tiny backbone of ``family`` (eval mode, seeded), with ``kwargs`` overriding."""
    torch.manual_seed(0)
    return MODELS.build(dict(TINY[family], **kwargs)).eval()


def expected_shapes(model, batch: int, h: int, w: int):
    """The README's contract: (B, C_i, ceil(H / s_i), ceil(W / s_i)) per returned stage."""
    return [(batch, model.embed_dims[i], math.ceil(h / model.strides[i]),
             math.ceil(w / model.strides[i])) for i in model.out_indices]


def round_up(v: int, divisor: int = 32) -> int:
    return -(-v // divisor) * divisor


def pad_to(x: torch.Tensor, hw) -> torch.Tensor:
    """Zero-pad an NCHW batch at the bottom / right, as mmdet's and mmseg's preprocessors do."""
    return F.pad(x, (0, hw[1] - x.shape[-1], 0, hw[0] - x.shape[-2]))


def alone_and_batched(img: torch.Tensor, other: torch.Tensor, divisor: int = 32):
    """``img`` padded alone to the size divisor, and ``[img, other]`` padded together to the
    larger of the two (then the divisor): the two inputs a detector sees."""
    h, w = img.shape[-2:]
    alone = pad_to(img, (round_up(h, divisor), round_up(w, divisor)))
    big = (round_up(max(h, other.shape[-2]), divisor), round_up(max(w, other.shape[-1]),
                                                                  divisor))
    return alone, torch.cat([pad_to(img, big), pad_to(other, big)])


def max_valid_diff(model, feats_a, feats_b, hw):
    """Largest |difference| between the first items of two feature tuples, inside the
    ``ceil(h / s) x ceil(w / s)`` valid region of every returned stage."""
    worst = 0.0
    for a, b, i in zip(feats_a, feats_b, model.out_indices):
        s = model.strides[i]
        vh, vw = math.ceil(hw[0] / s), math.ceil(hw[1] / s)
        d = (a[0, :, :vh, :vw].double() - b[0, :, :vh, :vw].double()).abs().max().item()
        worst = max(worst, d)
    return worst
