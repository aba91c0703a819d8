"""The token grid of a feature map and the valid (un-padded) region of each image on it.

mmdet and mmseg pad every image of a batch at the bottom / right up to the largest image (and a
size divisor).  A convolution next to that padding, and every token mixer with a global
reduction (Linear-InfSA's pools, the NaLa / LDN means over N, SOFT's landmarks, a softmax
over all keys), would then read the padding, and one image's features would depend on what it
was batched with.

A :class:`TokenGrid` is the ``(H, W)`` of a map plus, for a padded batch, each image's valid
``(h, w)`` on that map.  The backbone builds the input's grid once, at its forward boundary,
and hands it down as an argument: each down-sampling derives the next grid
(:meth:`TokenGrid.downsample`; a map of stride ``s`` has ``ceil(h / s)`` valid rows, the ceil
rule of the pyramid's output sizes) and every stage, block and mixer receives the grid of its
map.  The layers ask it for masks, built lazily once per grid object:

* :meth:`TokenGrid.zero_padding` (NCHW maps) before every convolution, so a convolution sees
  zeros outside the image, exactly as its own zero padding at the border of an un-padded
  image;
* :meth:`TokenGrid.valid_tokens` ((B, N) bool) for the global mixers, which leave padded
  tokens out of every sum, mean, pool and normaliser.

An un-padded grid (no sizes, or every image filling the map) gives no masks, and nothing is
computed.  See ``docs/advanced/batch_independence.md``.
"""
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ...ops.sizes import image_size

__all__ = ['TokenGrid', 'IMAGE_SIZES_ATTR', 'sizes_mask', 'grid_of_map', 'valid_tokens_or_none']

#: Attribute on a batch tensor that carries the per-image sizes from the data preprocessor
#: (written by :mod:`mmlinattn.engine.valid_region_hook`, read only where a backbone's
#: forward starts).
IMAGE_SIZES_ATTR = 'mmlinattn_image_sizes'

Size = Tuple[int, int]


def sizes_mask(sizes: Sequence[Size], hw: Size, device=None) -> torch.Tensor:
    """(B, H, W) bool mask, True on the top-left ``sizes[b]`` block of an ``hw`` grid."""
    h, w = hw
    rows = torch.arange(h, device=device)
    cols = torch.arange(w, device=device)
    sz = torch.tensor(list(sizes), device=device, dtype=torch.long).view(-1, 2)
    return (rows[None, :, None] < sz[:, 0, None, None]) & (cols[None, None, :] <
                                                           sz[:, 1, None, None])


class TokenGrid:
    """``(H, W)`` of a token map and the valid ``(h, w)`` of each image of the batch on it.

    Args:
        hw: ``(H, W)`` of the map.
        valid_hw: ``(h, w)`` per image, each within ``hw`` (the image is the top-left
            ``h x w`` block); None (or every image filling the map) for an un-padded batch.

    Masks are cached on the object (per device and dtype), so one grid per map and forward
    pass computes each mask once however many layers ask for it.
    """

    def __init__(self, hw: Sequence[int], valid_hw: Optional[Sequence[Size]] = None):
        self.hw: Size = (image_size(hw[0]), image_size(hw[1]))
        sizes = None if valid_hw is None else tuple((int(h), int(w)) for h, w in valid_hw)
        # every image filling the map needs no mask: the same as no sizes at all
        self.valid_hw: Optional[Tuple[Size, ...]] = (
            None if sizes is None or all(s == self.hw for s in sizes) else sizes)
        self._masks: Dict[tuple, Optional[torch.Tensor]] = {}

    @classmethod
    def of_input(cls, x: torch.Tensor, valid_hw, owner: str) -> 'TokenGrid':
        """The grid of a (B, C, H, W) input with ``valid_hw`` (one ``(h, w)`` per image, a
        (B, 2) tensor, or None).  Raises ``ValueError`` for malformed sizes."""
        if valid_hw is None:
            return cls(x.shape[-2:])
        if torch.is_tensor(valid_hw):
            valid_hw = valid_hw.tolist()
        big_h, big_w = x.shape[-2:]
        try:
            sizes: List[Size] = [(int(h), int(w)) for h, w in valid_hw]
        except (TypeError, ValueError) as err:
            raise ValueError(f'{owner}: valid_hw must be one (h, w) pair of ints per image, '
                             f'got {valid_hw!r}') from err
        if len(sizes) != x.shape[0] or any(not (1 <= h <= big_h and 1 <= w <= big_w)
                                           for h, w in sizes):
            raise ValueError(f'{owner}: valid_hw must hold {x.shape[0]} (h, w) pairs with '
                             f'1 <= h <= {big_h} and 1 <= w <= {big_w} (the input x is '
                             f'{tuple(x.shape)}), got {valid_hw!r}')
        return cls((big_h, big_w), sizes)

    # ----------------------------------------------------------------- geometry
    @property
    def padded(self) -> bool:
        """True when some image does not fill the map (masks are needed)."""
        return self.valid_hw is not None

    @property
    def num_tokens(self) -> int:
        return self.hw[0] * self.hw[1]

    def downsample(self, stride: int, crop: bool = False,
                   hw: Optional[Sequence[int]] = None) -> 'TokenGrid':
        """The grid of a map of stride ``stride`` over this one: ``ceil(H / s) x ceil(W / s)``
        cells with ``ceil(h / s) x ceil(w / s)`` valid per image (a cell is valid when its
        window holds a valid cell).  ``crop=True``: a conv that drops the last ``H mod s``
        rows / columns, ``floor(H / s) x floor(W / s)`` cells, valid sizes clipped to it.
        ``hw``: the size of the map itself, when there is one (the same numbers; in a traced
        graph the map's own symbolic size, so that the grid and the map share one expression
        instead of two that a shape solver cannot prove equal)."""
        if stride == 1:
            return self
        if hw is None:
            rnd = (lambda n: n // stride) if crop else (lambda n: -(-n // stride))
            hw = (rnd(self.hw[0]), rnd(self.hw[1]))
        if self.valid_hw is None:
            return TokenGrid(hw)
        return TokenGrid(hw, [(min(-(-h // stride), hw[0]), min(-(-w // stride), hw[1]))
                              for h, w in self.valid_hw])

    def rows(self, a: int, b: int) -> 'TokenGrid':
        """The grid of rows ``[a, b)`` of this map (each image's valid rows among them)."""
        if self.valid_hw is None:
            return TokenGrid((b - a, self.hw[1]))
        return TokenGrid((b - a, self.hw[1]), [(min(max(h - a, 0), b - a), w)
                                               for h, w in self.valid_hw])

    # ----------------------------------------------------------------- masks
    def _check_batch(self, batch: int, what: str) -> None:
        if batch != len(self.valid_hw):
            raise ValueError(f'{self!r}: {what} has batch size {batch}, the grid holds '
                             f'{len(self.valid_hw)} images')

    def token_mask(self, device=None, num_prefix: int = 0) -> Optional[torch.Tensor]:
        """(B, num_prefix + H*W) bool mask of the valid tokens (row-major), or None when
        nothing is padded.  ``num_prefix`` tokens before the map (e.g. a class token) are
        always valid."""
        if self.valid_hw is None:
            return None
        key = ('tokens', device, num_prefix)
        if key not in self._masks:
            mask = sizes_mask(self.valid_hw, self.hw, device).flatten(1)
            if num_prefix:
                mask = torch.cat([mask.new_ones(mask.shape[0], num_prefix), mask], dim=1)
            self._masks[key] = mask
        return self._masks[key]

    def valid_tokens(self, x: torch.Tensor) -> Optional[torch.Tensor]:
        """(B, N) bool mask for (B, N, C) tokens whose last H*W lie on this grid (any before
        are prefix tokens such as a class token, always valid), or None when nothing is
        padded."""
        if self.valid_hw is None:
            return None
        self._check_batch(x.shape[0], 'the token tensor')
        num_prefix = x.shape[1] - self.num_tokens
        if num_prefix < 0:
            raise ValueError(f'{x.shape[1]} tokens do not fill a {self.hw[0]}x{self.hw[1]} '
                             f'grid')
        return self.token_mask(x.device, num_prefix)

    def map_mask(self, device=None, dtype=torch.float32) -> Optional[torch.Tensor]:
        """(B, 1, H, W) mask (1 inside, 0 in the padding) in ``dtype``, or None when nothing
        is padded."""
        if self.valid_hw is None:
            return None
        key = ('map', device, dtype)
        if key not in self._masks:
            self._masks[key] = sizes_mask(self.valid_hw, self.hw, device)[:, None].to(dtype)
        return self._masks[key]

    def zero_padding(self, x: torch.Tensor) -> torch.Tensor:
        """Zero an NCHW map of this grid (any memory format) outside each image; ``x`` itself
        when nothing is padded.

        A leading dimension that is a multiple ``k`` of the batch (e.g. ``(B * heads, d, H,
        W)``) is treated as batch-major, ``(B, k, ...)``.
        """
        if tuple(x.shape[-2:]) != self.hw:
            raise ValueError(f'{self!r}: a map of size {tuple(x.shape[-2:])} is not on the grid')
        if self.valid_hw is None:
            return x
        mask = self.map_mask(x.device, x.dtype)
        b = len(self.valid_hw)
        if x.shape[0] == b:
            return x * mask
        if x.shape[0] % b:
            raise ValueError(f'{self!r}: leading size {x.shape[0]} is not a multiple of the '
                             f'batch size {b}')
        shape = x.shape
        return (x.reshape(b, -1, *shape[-2:]) * mask).reshape(shape)

    def __repr__(self) -> str:
        sizes = '' if self.valid_hw is None else f', valid_hw={list(self.valid_hw)}'
        return f'TokenGrid(hw={self.hw}{sizes})'


def valid_tokens_or_none(grid: Optional[TokenGrid], x: torch.Tensor) -> Optional[torch.Tensor]:
    """:meth:`TokenGrid.valid_tokens` of ``x`` for a mixer whose grid is optional (a global
    mixer also runs on plain token sequences: ``grid=None``, nothing padded)."""
    return None if grid is None else grid.valid_tokens(x)


def grid_of_map(x: torch.Tensor, grid: Optional[TokenGrid] = None) -> TokenGrid:
    """``grid``, or for None the un-padded grid of the NCHW map ``x`` (a stage called on a
    map alone)."""
    return TokenGrid(x.shape[-2:]) if grid is None else grid
