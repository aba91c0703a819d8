"""Valid (un-padded) regions of a padded batch: batch-independent predictions.

mmdet and mmseg pad every image of a batch at the bottom / right up to the largest image (and a
size divisor).  A convolution next to that padding, and every token mixer with a global
reduction (Linear-InfSA's pools, the NaLa / LDN means over N, SOFT's landmarks, a softmax
over all keys), would then read the padding, and one image's features would depend on what it
was batched with.  A :class:`ValidRegion` holds each image's valid size ``(h, w)`` in input
pixels; the backbone makes it current for the duration of its forward pass
(:func:`use_valid_region`) and the layers ask it for masks:

* :func:`zero_padding` (NCHW maps) before every convolution, so a convolution sees zeros
  outside the image, exactly as its own zero padding at the border of an un-padded image;
* :func:`token_mask` ((B, N) bool) for the global mixers, which leave padded tokens out of
  every sum, mean, pool and normaliser.

A map of stride ``s`` (size ``ceil(H / s)``) has ``ceil(h / s)`` valid rows, the same ceil
rule as the pyramid's output sizes.  Nothing changes when no region is current or when every
image fills the batch tensor (a fixed-size crop batch, a single un-padded image).

The region reaches the backbone either explicitly (``backbone(x, valid_hw=[(h, w), ...])``)
or attached to the batch tensor by the data preprocessor hook of :func:`enable_valid_region`
(``custom_hooks=[dict(type='mmlinattn.ValidRegionHook')]`` in a config does that), which
reads ``img_shape`` from the data samples.  See ``docs/batch_independence.md``.
"""
import contextlib
import math
import threading
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

__all__ = [
    'ValidRegion', 'use_valid_region', 'current_valid_region', 'zero_padding', 'map_mask',
    'token_mask', 'sizes_mask', 'valid_region_context_fn',
    'attach_valid_hw', 'attached_valid_hw', 'enable_valid_region', 'VALID_HW_ATTR'
]

#: Name of the attribute that carries per-image valid sizes on a batch tensor.
VALID_HW_ATTR = 'mmlinattn_valid_hw'

_STATE = threading.local()
_CANDIDATE_STRIDES = (1, 2, 4, 8, 16, 32, 64)

Size = Tuple[int, int]


def sizes_mask(sizes: Sequence[Size], hw: Size, device=None) -> torch.Tensor:
    """(B, H, W) bool mask, True on the top-left ``sizes[b]`` block of an ``hw`` grid."""
    h, w = hw
    rows = torch.arange(h, device=device)
    cols = torch.arange(w, device=device)
    sz = torch.tensor(list(sizes), device=device, dtype=torch.long).view(-1, 2)
    return (rows[None, :, None] < sz[:, 0, None, None]) & (cols[None, None, :] <
                                                           sz[:, 1, None, None])


class ValidRegion:
    """Per-image valid sizes of a bottom/right-padded batch and the masks they imply.

    Args:
        sizes: ``(h, w)`` of every image, in input pixels, each within ``input_hw``.
        input_hw: ``(H, W)`` of the padded batch tensor.
        strides: strides (besides 1, 2, 4, ..., 64) whose maps will ask for masks, e.g. a
            plain ViT's patch size.  A map of ``ceil(H / s) x ceil(W / s)`` tokens gets
            ``ceil(h / s) x ceil(w / s)`` valid ones; where two strides give the same grid
            the smaller stride is used.
    """

    def __init__(self, sizes: Sequence[Size], input_hw: Size, strides: Sequence[int] = ()):
        self.input_hw = (int(input_hw[0]), int(input_hw[1]))
        self.sizes = tuple((int(h), int(w)) for h, w in sizes)
        big_h, big_w = self.input_hw
        self._grids: Dict[Size, Tuple[Size, ...]] = {}
        for s in sorted(set(_CANDIDATE_STRIDES) | {int(s) for s in strides}):
            grid = (math.ceil(big_h / s), math.ceil(big_w / s))
            self._grids.setdefault(
                grid, tuple((math.ceil(h / s), math.ceil(w / s)) for h, w in self.sizes))
        self._masks: Dict[tuple, Optional[torch.Tensor]] = {}
        self._warned: set = set()

    @property
    def batch_size(self) -> int:
        return len(self.sizes)

    def sizes_at(self, hw: Size) -> Optional[Tuple[Size, ...]]:
        """Valid ``(h, w)`` per image on a map of size ``hw`` (None: unknown grid)."""
        hw = (int(hw[0]), int(hw[1]))
        sizes = self._grids.get(hw)
        if sizes is None and hw not in self._warned:
            self._warned.add(hw)
            warnings.warn(f'ValidRegion: no stride maps the {self.input_hw} input to a '
                          f'{hw} grid; that map is processed without a padding mask')
        return sizes

    def full(self, hw: Size) -> bool:
        """True when every image fills the ``hw`` grid (no mask needed)."""
        sizes = self.sizes_at(hw)
        return sizes is None or all(s == tuple(hw) for s in sizes)

    def map_mask(self, hw: Size, device, dtype) -> Optional[torch.Tensor]:
        """(B, 1, H, W) mask (1 inside, 0 in the padding) in ``dtype``, or None."""
        key = ('map', tuple(hw), str(device), dtype)
        if key not in self._masks:
            mask = None
            if not self.full(hw):
                mask = sizes_mask(self.sizes_at(hw), hw, device)[:, None].to(dtype)
            self._masks[key] = mask
        return self._masks[key]

    def token_mask(self, hw: Size, device) -> Optional[torch.Tensor]:
        """(B, H*W) bool mask of the valid tokens (row-major), or None."""
        key = ('tokens', tuple(hw), str(device))
        if key not in self._masks:
            mask = None
            if not self.full(hw):
                mask = sizes_mask(self.sizes_at(hw), hw, device).flatten(1)
            self._masks[key] = mask
        return self._masks[key]

    def __repr__(self) -> str:
        return f'ValidRegion(sizes={list(self.sizes)}, input_hw={self.input_hw})'


def current_valid_region() -> Optional[ValidRegion]:
    """The region made current by the innermost :func:`use_valid_region` (or None)."""
    return getattr(_STATE, 'region', None)


@contextlib.contextmanager
def use_valid_region(region: Optional[ValidRegion]):
    """Make ``region`` current in this thread (``None`` switches masking off inside)."""
    previous = current_valid_region()
    _STATE.region = region
    try:
        yield region
    finally:
        _STATE.region = previous


def valid_region_context_fn() -> Callable:
    """``context_fn`` for ``torch.utils.checkpoint``: the recomputation in the backward pass
    runs under the region that was current in the forward pass."""
    region = current_valid_region()
    return lambda: (contextlib.nullcontext(), use_valid_region(region))


def token_mask(hw: Size, batch: int, device, num_prefix: int = 0) -> Optional[torch.Tensor]:
    """(batch, num_prefix + H*W) bool mask of the valid tokens of an ``hw`` map, or None (no
    region, nothing padded, or ``batch`` is not the region's batch size).  ``num_prefix``
    tokens before the map (e.g. a class token) are always valid."""
    region = current_valid_region()
    if region is None or batch != region.batch_size:
        return None
    mask = region.token_mask(hw, device)
    if mask is None or not num_prefix:
        return mask
    return torch.cat([mask.new_ones(batch, num_prefix), mask], dim=1)


def map_mask(hw: Size, batch: int, device, dtype) -> Optional[torch.Tensor]:
    """(batch, 1, H, W) mask (1 inside, 0 in the padding) of an ``hw`` map, or None."""
    region = current_valid_region()
    if region is None or batch != region.batch_size:
        return None
    return region.map_mask(hw, device, dtype)


def zero_padding(x: torch.Tensor) -> torch.Tensor:
    """Zero an NCHW map (any memory format) outside the current valid region.

    A leading dimension that is a multiple ``k`` of the batch (e.g. ``(B * heads, d, H, W)``)
    is treated as batch-major, ``(B, k, ...)``.
    """
    region = current_valid_region()
    if region is None:
        return x
    mask = region.map_mask(x.shape[-2:], x.device, x.dtype)
    if mask is None:
        return x
    b = region.batch_size
    if x.shape[0] == b:
        return x * mask
    if x.shape[0] % b:
        raise ValueError(f'zero_padding: leading size {x.shape[0]} is not a multiple of the '
                         f'batch size {b} of the valid region')
    shape = x.shape
    return (x.reshape(b, -1, *shape[-2:]) * mask).reshape(shape)


# ----------------------------------------------------------------- plumbing from the data
def attach_valid_hw(inputs: torch.Tensor, sizes: Sequence[Size]) -> torch.Tensor:
    """Record per-image valid sizes on a batch tensor (read by the backbone's forward)."""
    setattr(inputs, VALID_HW_ATTR, tuple((int(h), int(w)) for h, w in sizes))
    return inputs


def attached_valid_hw(x: torch.Tensor) -> Optional[Tuple[Size, ...]]:
    """The sizes :func:`attach_valid_hw` recorded on exactly this tensor object, or None."""
    return getattr(x, VALID_HW_ATTR, None)


def _img_shape(sample) -> Optional[Size]:
    meta = getattr(sample, 'metainfo', sample)
    shape = meta.get('img_shape') if hasattr(meta, 'get') else None
    if shape is None or len(shape) < 2:
        return None
    return int(shape[0]), int(shape[1])


def _attach_from_samples(module, args, output):
    """Forward hook of a data preprocessor: ``img_shape`` of each data sample -> inputs."""
    if not isinstance(output, dict):
        return output
    inputs, samples = output.get('inputs'), output.get('data_samples')
    if not torch.is_tensor(inputs) or inputs.dim() != 4 or not samples:
        return output
    shapes = [_img_shape(s) for s in samples]
    if len(shapes) != inputs.shape[0] or any(s is None for s in shapes):
        return output
    big_h, big_w = inputs.shape[-2:]
    attach_valid_hw(inputs, [(min(h, big_h), min(w, big_w)) for h, w in shapes])
    return output


def enable_valid_region(model: torch.nn.Module) -> bool:
    """Make ``model``'s data preprocessor attach each image's ``img_shape`` to the batch
    tensor, so an mmlinattn backbone inside masks the padding.  Idempotent.

    Works for any OpenMMLab model whose ``data_preprocessor`` returns ``dict(inputs=...,
    data_samples=...)`` with ``img_shape`` in the samples' metainfo (mmdet's
    ``DetDataPreprocessor``, mmseg's ``SegDataPreProcessor``).  A wrapped model (DDP) is
    unwrapped through ``.module``.  Returns False when there is no data preprocessor.
    """
    model = getattr(model, 'module', model)
    pre = getattr(model, 'data_preprocessor', None)
    if not isinstance(pre, torch.nn.Module):
        return False
    if not getattr(pre, '_mmlinattn_valid_region', False):
        pre.register_forward_hook(_attach_from_samples)
        pre._mmlinattn_valid_region = True
    return True


def resolve_valid_hw(x: torch.Tensor, valid_hw, owner: str,
                     strides: Sequence[int] = ()) -> Optional[ValidRegion]:
    """The :class:`ValidRegion` of a backbone input: from ``valid_hw`` (one ``(h, w)`` per
    image, or a (B, 2) tensor) or else from sizes attached to ``x``; None when no image is
    padded.  Raises ``ValueError`` for malformed sizes."""
    if valid_hw is None:
        valid_hw = attached_valid_hw(x)
        if valid_hw is None:
            return None
    if torch.is_tensor(valid_hw):
        valid_hw = valid_hw.tolist()
    big_h, big_w = x.shape[-2:]
    try:
        sizes: List[Size] = [(int(h), int(w)) for h, w in valid_hw]
    except (TypeError, ValueError) as err:
        raise ValueError(f'{owner}: valid_hw must be one (h, w) pair of ints per image, got '
                         f'{valid_hw!r}') from err
    if len(sizes) != x.shape[0] or any(not (1 <= h <= big_h and 1 <= w <= big_w)
                                       for h, w in sizes):
        raise ValueError(f'{owner}: valid_hw must hold {x.shape[0]} (h, w) pairs with '
                         f'1 <= h <= {big_h} and 1 <= w <= {big_w} (the input x is '
                         f'{tuple(x.shape)}), got {valid_hw!r}')
    if all(s == (big_h, big_w) for s in sizes):
        return None
    return ValidRegion(sizes, (big_h, big_w), strides)
