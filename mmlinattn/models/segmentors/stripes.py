"""Row stripes of a dense-prediction graph, computed on demand with the halos each step needs.

A :class:`RowMap` is a feature map of shape ``(N, C, H, W)`` that is never held whole: its
``rows(a, b)`` computes rows ``[a, b)`` from the rows of its sources that those rows read.
Convolutions read ``halo`` rows above and below; a bilinear or nearest resize by a power-of-two
factor reads a known, small range of source rows (:func:`resize_window`); sums and concats
read the same rows.  Evaluating the last map stripe by stripe keeps the peak memory at a few
stripes of the widest map instead of the whole of every map.  Rows, halo and stripes are the
:class:`~mmlinattn.kernels.Stripe` and :class:`~mmlinattn.kernels.Stripes` of the backbones'
row stripes.

What is exact and what is not (float64 and float32 alike):

* a stripe of a resize is computed by PyTorch's own kernel on the source rows it reads, with the
  global scale passed explicitly, so every output row gets the same source indices and weights
  as in the whole-map call: bit-equal whenever the factor is a power of two (all coordinates are
  dyadic, so no rounding depends on where a stripe starts) and the kernel PyTorch picks for the
  stripe is the one it picks for the whole map (it switches to its channels-last kernel when
  ``out_h + out_w <= 128``; stripes are widened to keep the choice);
* other factors are computed on the whole source once and sliced (exact, not memory-bounded);
* a module whose norm reads more than a row of the map (a group norm, batch statistics) gives
  other results on a stripe: a head with one in its striped part runs whole, or raises where
  that would take more than :data:`~mmlinattn.models.striped.WHOLE_HEAD_BYTES`
  (:func:`~mmlinattn.models.striped.head_runs_whole`);
* a convolution on a stripe is the same module on the stripe's rows plus halo.  Its result equals
  the whole-map convolution up to the last bits only: the GEMM / oneDNN kernels PyTorch calls
  choose their blocking, and hence the summation order over ``C_in x k x k``, from the spatial
  size of the call, so a few outputs differ by an ulp or two.  A map whose stripe covers all its
  rows is computed whole, which is bit-equal.
"""
from typing import Callable, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ...kernels import Stripe, Stripes


class RowMap:
    """A lazily evaluated ``(N, C, H, W)`` map; subclasses define :meth:`rows`."""

    height: int
    width: int

    def rows(self, a: int, b: int) -> Tensor:
        raise NotImplementedError

    def whole(self) -> Tensor:
        return self.rows(0, self.height)

    def sources(self) -> Sequence['RowMap']:
        """The maps whose rows :meth:`rows` reads."""
        return ()


class Full(RowMap):
    """A map that is held whole (the backbone's outputs, the coarse pyramid levels)."""

    def __init__(self, tensor: Tensor):
        self.tensor = tensor
        self.height, self.width = tensor.shape[2:]

    def rows(self, a, b):
        return self.tensor[:, :, a:b]

    def whole(self):
        return self.tensor


class Conv(RowMap):
    """``fn(src)`` for a height-preserving ``fn`` that reads ``halo`` rows either side.

    At the image border the stripe is cut where the map is, so ``fn``'s own zero padding is the
    whole map's; inside, the rows that ``fn``'s padding spoils are the halo, dropped.
    ``modules``: what ``fn`` runs (``fn`` itself by default), for :func:`head_runs_whole`."""

    def __init__(self, fn: Callable[[Tensor], Tensor], src: RowMap, halo: int,
                 modules: Sequence[nn.Module] = ()):
        self.fn, self.src, self.halo = fn, src, halo
        self.height, self.width = src.height, src.width
        self.modules = list(modules) or ([fn] if isinstance(fn, nn.Module) else [])

    def sources(self):
        return (self.src, )

    def rows(self, a, b):
        stripe = Stripe.of(a, b, self.halo, self.height)
        return self.fn(self.src.rows(stripe.read_start, stripe.read_stop))[:, :, stripe.keep]


class Sum(RowMap):
    """``maps[0] + maps[1] + ...`` in that order (the order the plain forward adds in)."""

    def __init__(self, *maps: RowMap):
        self.maps = maps
        self.height, self.width = maps[0].height, maps[0].width

    def sources(self):
        return self.maps

    def rows(self, a, b):
        out = self.maps[0].rows(a, b)
        for m in self.maps[1:]:
            out = out + m.rows(a, b)
        return out


class Cat(RowMap):
    """The maps concatenated along channels."""

    def __init__(self, maps: Sequence[RowMap]):
        self.maps = list(maps)
        self.height, self.width = self.maps[0].height, self.maps[0].width

    def sources(self):
        return self.maps

    def rows(self, a, b):
        return torch.cat([m.rows(a, b) for m in self.maps], dim=1)


def power_of_two_factor(in_size: int, out_size: int) -> Optional[int]:
    """``out_size // in_size`` if it is an exact power of two (1 included), else None."""
    if out_size % in_size:
        return None
    f = out_size // in_size
    return f if f & (f - 1) == 0 else None


def resize_window(a: int, b: int, in_h: int, f: int, min_rows: int = 0) -> Stripe:
    """Output rows ``[a, b)`` of the whole-map resize of ``in_h`` rows by the power-of-two
    factor ``f``, read from the output rows ``[f * i0, f * i1)`` that source rows
    ``[i0, i1)`` resize to, so that the kept rows come out as in the whole map.

    Bilinear with ``align_corners=False`` maps output row ``y`` to source coordinate
    ``(y + 0.5) / f - 0.5`` (clamped at 0) and reads rows ``floor`` of it and the one below
    (clamped at ``in_h - 1``); nearest reads ``floor(y / f)``.  Output row ``y`` therefore reads
    source rows within ``[y // f - 1, y // f + 1]``.  The window starts at an output row
    ``f * i0`` (so the local coordinate plus ``i0`` is the global one, with no rounding), one
    source row above the first row needed, so no kept row meets the window's top clamp; it ends
    one source row below the last needed, so none meets the bottom clamp, unless the window
    reaches the map's edge, where the clamps are the whole map's.  ``min_rows`` widens the window
    to at least that many output rows (to keep PyTorch's kernel choice)."""
    i0 = max(0, a // f - 1)
    i1 = min(in_h, (b - 1) // f + 2)
    while f * (i1 - i0) < min_rows and (i0 > 0 or i1 < in_h):
        i0, i1 = max(0, i0 - 1), min(in_h, i1 + 1)
    return Stripe(a, b, f * i0, f * i1)


class Resize(RowMap):
    """``F.interpolate(src, size, mode, align_corners)``, as mmseg's ``resize`` calls it.

    A power-of-two height factor (1 included) is computed per stripe from the source rows it
    reads; any other resizes the whole source once and keeps it (exact, but the whole map is
    held: this happens only when the height is not a multiple of the pyramid's stride)."""

    def __init__(self, src: RowMap, size: Sequence[int], mode: str = 'bilinear',
                 align_corners: Optional[bool] = False):
        self.src, self.mode = src, mode
        self.align_corners = align_corners if mode in ('bilinear', 'bicubic') else None
        self.size = (int(size[0]), int(size[1]))
        self.height, self.width = self.size
        self._whole = None
        # Only the height is cut, so only its factor must keep coordinates exact; the width
        # is resized as in the whole map (align_corners=True scales by (in - 1) / (out - 1),
        # which is not dyadic).
        fh = power_of_two_factor(src.height, self.height)
        self.factor = None if fh is None or (self.align_corners and fh > 1) else fh

    def sources(self):
        return (self.src, )

    def rows(self, a, b):
        if self._whole is not None:
            return self._whole[:, :, a:b]
        if self.factor is None:
            self._whole = F.interpolate(self.src.whole(), self.size, mode=self.mode,
                                        align_corners=self.align_corners)
            return self._whole[:, :, a:b]
        fh = self.factor
        out_h, out_w = self.size
        # PyTorch uses its channels-last kernel when out_h + out_w <= 128 (and for channels-last
        # inputs); keep the stripe on the side of that threshold the whole map is on.
        min_rows = 129 - out_w if out_h + out_w > 128 else 0
        window = resize_window(a, b, self.src.height, fh, min_rows)
        src = self.src.rows(window.read_start // fh, window.read_stop // fh)
        size = [window.read_stop - window.read_start, out_w]
        # the height's scale passed explicitly: 1 / fh, the whole map's in_h / out_h exactly;
        # the width's left to PyTorch, which computes it as for the whole map
        if self.mode == 'bilinear':
            out = torch.ops.aten.upsample_bilinear2d(src, size, bool(self.align_corners),
                                                     float(fh), None)
        elif self.mode == 'nearest':
            out = torch.ops.aten.upsample_nearest2d(src, size, float(fh), None)
        else:
            raise ValueError(f"resize mode {self.mode!r}: stripes support 'bilinear' and "
                             "'nearest'; run it whole (stripe_rows=None)")
        return out[:, :, window.keep]


def materialize(rowmap: RowMap, stripe_rows: Optional[int]) -> Tensor:
    """The whole map, computed ``stripe_rows`` rows at a time (``None``: in one piece)."""
    if stripe_rows is None or stripe_rows >= rowmap.height:
        return rowmap.whole()
    out = None
    for stripe in Stripes(stripe_rows).over(rowmap.height):
        part = rowmap.rows(stripe.start, stripe.stop)
        if out is None:
            out = torch.empty(part.shape[:2] + (rowmap.height, part.shape[3]), dtype=part.dtype,
                              device=part.device, memory_format=_memory_format(part))
        out[:, :, stripe.start:stripe.stop] = part
        del part
    return out


def _memory_format(t: Tensor):
    return torch.channels_last if t.dim() == 4 and t.shape[1] > 1 and \
        t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous() \
        else torch.contiguous_format


def running_argmax(chunks, shape) -> Tensor:
    """``torch.cat(list(chunks), 1).argmax(1, keepdim=True)`` without the concatenation.

    ``chunks`` yields ``(c0, logits[:, c0:c1])``; ties keep the first index and a NaN counts as
    the maximum, as in ``torch.argmax``."""
    best = index = None
    for c0, chunk in chunks:
        value, idx = chunk.max(dim=1, keepdim=True) if chunk.shape[1] > 1 else \
            (chunk, torch.zeros_like(chunk, dtype=torch.long))
        # torch.max returns the first maximal index within the chunk, NaN included
        idx += c0
        if best is None:
            best, index = value, idx
            continue
        better = (value > best) | (value.isnan() & ~best.isnan())
        best = torch.where(better, value, best)
        index = torch.where(better, idx, index)
        del value, idx, better
    return index


def striped_modules(rowmap: RowMap) -> List[nn.Module]:
    """The modules that computing ``rowmap`` in stripes runs on stripes (its :class:`Conv`
    steps'), each once."""
    found, seen, todo = [], set(), [rowmap]
    while todo:
        node = todo.pop()
        for m in node.modules if isinstance(node, Conv) else ():
            if id(m) not in seen:
                seen.add(id(m))
                found.append(m)
        todo.extend(node.sources())
    return found
