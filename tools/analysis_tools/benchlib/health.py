"""Whole-network health checks of a backbone: what equal equations do not guarantee.

* :func:`block_activation_max` -- the largest activation of the residual stream after every
  block.  A stream that grows by a constant factor per block overflows float16 and leaves the
  output norms to hide it.
* :func:`centred_similarity` -- cosine similarity of two feature maps after removing each
  map's per-channel mean; the same photo at two resolutions should score well above two
  different photos.
* :func:`train_eval_gap` -- relative difference between train-mode and eval-mode outputs
  (BatchNorm batch statistics against running statistics; dropout and drop path excluded by
  the caller).
* :func:`half_precision_finite` -- whether ``model.half()`` and float16 autocast give finite
  maps.

``tools/analysis_tools/backbone_health.py`` prints these per family and arch.
"""
import copy
from typing import Dict, List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def residual_blocks(backbone: nn.Module) -> List[Tuple[str, nn.Module]]:
    """``('stage i, block j', block)`` for every residual block of a backbone, in order.

    Pyramid stages hold their blocks in ``stages[i].blocks``; an isotropic backbone's
    ``stages[i]`` is itself a block."""
    out = []
    for i, stage in enumerate(backbone.stages):
        blocks = getattr(stage, 'blocks', None)
        if blocks is None:
            out.append((f'block {i}', stage))
        else:
            out += [(f'stage {i}, block {j}', blk) for j, blk in enumerate(blocks)]
    return out


def _first_tensor(output) -> torch.Tensor:
    return output[0] if isinstance(output, (tuple, list)) else output


@torch.no_grad()
def block_activation_max(backbone: nn.Module, x: torch.Tensor) -> Dict[str, float]:
    """Max |activation| of the residual stream after every block (one forward pass)."""
    record: Dict[str, float] = {}
    hooks = [
        blk.register_forward_hook(
            lambda m, i, o, name=name: record.__setitem__(
                name, _first_tensor(o).detach().abs().max().item()))
        for name, blk in residual_blocks(backbone)
    ]
    try:
        backbone(x)
    finally:
        for h in hooks:
            h.remove()
    return record


def centred_similarity(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two (1, C, H, W) maps after removing each map's per-channel
    spatial mean; the larger map is average-pooled to the smaller one's size first."""
    if a.shape[-2] * a.shape[-1] > b.shape[-2] * b.shape[-1]:
        a, b = b, a
    b = F.adaptive_avg_pool2d(b.float(), a.shape[-2:])
    a = a.float() - a.float().mean((-2, -1), keepdim=True)
    b = b - b.mean((-2, -1), keepdim=True)
    return F.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()


@torch.no_grad()
def train_eval_gap(backbone: nn.Module, x: torch.Tensor,
                   batch_stats: bool = True) -> List[float]:
    """Per returned map, ``|train-mode output - eval-mode output| / |eval-mode output|``
    (Frobenius norms) on the same input.

    ``batch_stats=True``: the train-mode pass normalises BatchNorm with the batch's own
    statistics, so the gap measures how well the running statistics describe ``x``.
    ``batch_stats=False``: BatchNorm uses its running statistics in both passes, so the
    gap is the difference between the training code path and the inference fast paths
    alone.  Running statistics are left untouched (the train-mode pass runs on a copy)."""
    train_model = copy.deepcopy(backbone).train()
    if not batch_stats:
        for m in train_model.modules():
            if isinstance(m, _BatchNorm):
                m.eval()
    outs_train = train_model(x)
    was_training = backbone.training
    outs_eval = backbone.eval()(x)
    backbone.train(was_training)
    return [((t - e).norm() / e.norm().clamp_min(1e-12)).item()
            for t, e in zip(outs_train, outs_eval)]


@torch.no_grad()
def half_precision_finite(backbone: nn.Module, x: torch.Tensor) -> Dict[str, bool]:
    """Whether every output map is finite under float16 autocast and after
    ``model.half()`` (on copies; ``backbone`` is not changed)."""
    device_type = x.device.type
    with torch.autocast(device_type, dtype=torch.float16):
        autocast_ok = all(torch.isfinite(o).all().item() for o in backbone(x))
    half = copy.deepcopy(backbone).half()
    half_ok = all(torch.isfinite(o).all().item() for o in half(x.half()))
    return {'autocast': autocast_ok, 'half': half_ok}


def normalise_photo(image, size: Sequence[int]) -> torch.Tensor:
    """An (H, W, 3) uint8 RGB array -> a (1, 3, *size) float tensor with mmdet / mmseg's
    ImageNet mean and std, resized with antialiasing."""
    x = torch.as_tensor(image).permute(2, 0, 1)[None].float()
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    x = (x - mean) / std
    return F.interpolate(x, size=tuple(size), mode='bilinear', align_corners=False,
                         antialias=True)


def photo_crops(images: Sequence, size: int, count: int,
                generator: torch.Generator) -> torch.Tensor:
    """``count`` random ``size`` x ``size`` crops (normalised, (count, 3, size, size)) of
    (H, W, 3) uint8 photos, each photo first resized so that its short side is
    ``2 * size``."""
    crops = []
    for k in range(count):
        image = images[k % len(images)]
        h, w = image.shape[:2]
        scale = 2 * size / min(h, w)
        x = normalise_photo(image, (round(h * scale), round(w * scale)))
        top = int(torch.randint(0, x.shape[-2] - size + 1, (1, ), generator=generator))
        left = int(torch.randint(0, x.shape[-1] - size + 1, (1, ), generator=generator))
        crops.append(x[..., top:top + size, left:left + size])
    return torch.cat(crops)


def brief_training(backbone: nn.Module, batches: Sequence[torch.Tensor], steps: int,
                   lr: float = 1e-3, seed: int = 0) -> List[float]:
    """``steps`` AdamW steps (cycling through ``batches``, train mode) on a dense regression
    loss: every returned map against a fixed random target of its shape.  Returns the
    losses.  Enough to move BatchNorm running statistics and to check that training does
    not make the stream grow."""
    gen = torch.Generator().manual_seed(seed)
    backbone.train()
    with torch.no_grad():
        targets = [torch.randn(o.shape[1:], generator=gen) for o in backbone(batches[0][:1])]
    optim = torch.optim.AdamW([p for p in backbone.parameters() if p.requires_grad], lr=lr)
    losses = []
    for step in range(steps):
        outs = backbone(batches[step % len(batches)])
        loss = sum(F.mse_loss(o, t.expand_as(o)) for o, t in zip(outs, targets))
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    return losses
