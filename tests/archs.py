"""The one set of tiny test archs (every structural feature of each family: several heads,
a stage with two blocks) and the README's shape contract every backbone test checks."""
import math

import torch

import mmlinattn.models  # noqa: F401  (registers the backbones)
from mmlinattn.registry import MODELS

# Small enough that the whole catalog runs in seconds on 2 CPU cores.
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


def one_block_per_stage(family: str) -> dict:
    """``build`` overrides that leave one block per stage of a pyramid (every block type
    still runs): for the tests whose cost grows with the block count, such as tracing for
    ``torch.compile`` and ONNX export, where a stage's next block repeats the same ops."""
    arch = TINY[family]['arch']
    if 'depths' not in arch:
        return {}
    return dict(arch=dict(arch, depths=(1, ) * len(arch['depths'])))


def expected_shapes(model, batch: int, h: int, w: int):
    """The README's contract: (B, C_i, ceil(H / s_i), ceil(W / s_i)) per returned stage."""
    return [(batch, model.embed_dims[i], math.ceil(h / model.strides[i]),
             math.ceil(w / model.strides[i])) for i in model.out_indices]
