"""mmdet-style batch padding and the alone-vs-batched feature comparison."""
import math

import torch
import torch.nn.functional as F


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
