"""Row stripes of a dense-prediction graph, computed on demand with the halos each step needs.

A :class:`RowMap` is a feature map of shape ``(N, C, H, W)`` that is never held whole: its
``rows(a, b)`` computes rows ``[a, b)`` from the rows of its sources that those rows read.
Convolutions read ``halo`` rows above and below; a bilinear or nearest resize by a power-of-two
factor reads a known, small range of source rows (:func:`resize_source_rows`); sums and concats
read the same rows.  Evaluating the last map stripe by stripe keeps the peak memory at a few
stripes of the widest map instead of the whole of every map.

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
  that would take more than :data:`WHOLE_HEAD_BYTES` (:func:`head_runs_whole`);
* a convolution on a stripe is the same module on the stripe's rows plus halo.  Its result equals
  the whole-map convolution up to the last bits only: the GEMM / oneDNN kernels PyTorch calls
  choose their blocking, and hence the summation order over ``C_in x k x k``, from the spatial
  size of the call, so a few outputs differ by an ulp or two.  A map whose stripe covers all its
  rows is computed whole, which is bit-equal.
"""
import logging
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ...kernels.row_stripes import per_pixel

#: a head whose striped part has a norm that reads more than a row of the map (a group norm,
#: batch statistics: :func:`~mmlinattn.kernels.row_stripes.per_pixel`) runs whole, exactly as
#: mmseg / mmdet run it, while its widest map whole takes at most this many bytes (1 GiB);
#: above, the predict raises rather than run in stripes that would change its result
WHOLE_HEAD_BYTES = 1 << 30


def stripe_rows_of(test_cfg) -> Optional[int]:
    """``test_cfg.stripe_rows`` (default 64), checked: a positive int, or None for no stripes."""
    stripe_rows = (test_cfg or {}).get('stripe_rows', 64)
    if stripe_rows is not None and (not isinstance(stripe_rows, int) or stripe_rows < 1):
        raise ValueError(f'test_cfg.stripe_rows must be a positive int or None, got '
                         f'{stripe_rows!r}')
    return stripe_rows


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


def conv_halo(module: nn.Module) -> int:
    """Rows above and below an output row that a stack of stride-1 'same' convolutions reads.

    Raises for a strided convolution or one whose padding does not keep the height, which a
    stripe cannot reproduce."""
    halo = 0
    for m in module.modules():
        if isinstance(m, nn.modules.conv._ConvNd):
            k, d = m.kernel_size[0], m.dilation[0]
            if m.stride[0] != 1 or m.padding_mode != 'zeros' or \
                    m.padding[0] != d * (k - 1) // 2 or k % 2 == 0:
                raise ValueError(f'{m} is not a stride-1 "same" convolution, so its rows cannot '
                                 'be computed in stripes; run it whole (stripe_rows=None)')
            halo += d * (k - 1) // 2
    return halo


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
        s, e = max(0, a - self.halo), min(self.height, b + self.halo)
        return self.fn(self.src.rows(s, e))[:, :, a - s:b - s]


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


def resize_source_rows(a: int, b: int, in_h: int, out_h: int, f: int,
                       min_rows: int = 0) -> Tuple[int, int, int, int]:
    """The window ``(r0, r1, i0, i1)`` to resize so that output rows ``[a, b)`` come out as in
    the whole-map resize by the power-of-two factor ``f = out_h / in_h``.

    Bilinear with ``align_corners=False`` maps output row ``y`` to source coordinate
    ``(y + 0.5) / f - 0.5`` (clamped at 0) and reads rows ``floor`` of it and the one below
    (clamped at ``in_h - 1``); nearest reads ``floor(y / f)``.  Output row ``y`` therefore reads
    source rows within ``[y // f - 1, y // f + 1]``.  The window starts at an output row
    ``r0 = f * i0`` (so the local coordinate plus ``i0`` is the global one, with no rounding), one
    source row above the first row needed, so no kept row meets the window's top clamp; it ends
    one source row below the last needed, so none meets the bottom clamp, unless the window
    reaches the map's edge, where the clamps are the whole map's.  ``min_rows`` widens the window
    to at least that many output rows (to keep PyTorch's kernel choice)."""
    i0 = max(0, a // f - 1)
    i1 = min(in_h, (b - 1) // f + 2)
    while (min(out_h, i1 * f) if i1 < in_h else out_h) - f * i0 < min_rows and \
            (i0 > 0 or i1 < in_h):
        i0, i1 = max(0, i0 - 1), min(in_h, i1 + 1)
    r0 = f * i0
    r1 = out_h if i1 == in_h else f * i1
    return r0, r1, i0, i1


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
        r0, r1, i0, i1 = resize_source_rows(a, b, self.src.height, out_h, fh, min_rows)
        src = self.src.rows(i0, i1)
        # the height's scale passed explicitly: 1 / fh, the whole map's in_h / out_h exactly;
        # the width's left to PyTorch, which computes it as for the whole map
        if self.mode == 'bilinear':
            out = torch._C._nn.upsample_bilinear2d(src, [r1 - r0, out_w], bool(self.align_corners),
                                                   float(fh), None)
        elif self.mode == 'nearest':
            out = torch._C._nn.upsample_nearest2d(src, [r1 - r0, out_w], float(fh), None)
        else:
            raise ValueError(f"resize mode {self.mode!r}: stripes support 'bilinear' and "
                             "'nearest'; run it whole (stripe_rows=None)")
        return out[:, :, a - r0:b - r0]


def materialize(rowmap: RowMap, stripe_rows: Optional[int]) -> Tensor:
    """The whole map, computed ``stripe_rows`` rows at a time (``None``: in one piece)."""
    if stripe_rows is None or stripe_rows >= rowmap.height:
        return rowmap.whole()
    first = rowmap.rows(0, min(stripe_rows, rowmap.height))
    out = torch.empty(first.shape[:2] + (rowmap.height, first.shape[3]), dtype=first.dtype,
                      device=first.device, memory_format=_memory_format(first))
    out[:, :, :first.shape[2]] = first
    del first
    for a in range(stripe_rows, rowmap.height, stripe_rows):
        b = min(a + stripe_rows, rowmap.height)
        out[:, :, a:b] = rowmap.rows(a, b)
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


def widest_channels(modules: Iterable[nn.Module]) -> int:
    """The most channels a convolution of ``modules`` reads or writes."""
    return max((max(m.in_channels, m.out_channels) for module in modules
                for m in module.modules() if isinstance(m, nn.modules.conv._ConvNd)), default=1)


def whole_map_norm(model: nn.Module, modules: Iterable[nn.Module]) -> Optional[str]:
    """The first module in ``modules`` (or inside one) that is not
    :func:`~mmlinattn.kernels.row_stripes.per_pixel`, named as in ``model``, with its type and
    mode; None if there is none."""
    names = {id(m): name for name, m in model.named_modules()}
    for module in modules:
        for m in module.modules():
            if not per_pixel(m):
                mode = ' in training mode' if m.training else ''
                return f'{names.get(id(m), "a module")} ({type(m).__name__}{mode})'
    return None


_LOGGED = set()


def head_runs_whole(model: nn.Module, modules: Iterable[nn.Module], widest_bytes: int,
                    striped: bool) -> bool:
    """Whether the head, whose ``modules`` would run on row stripes, must run whole to give
    mmseg's / mmdet's result: one of them has a norm that reads more than a row of the map
    (:func:`whole_map_norm`).  Where stripes would apply (``striped``), this is logged once, or
    raised when the head's widest map whole (``widest_bytes``) would pass
    :data:`WHOLE_HEAD_BYTES`."""
    norm = whole_map_norm(model, modules)
    if norm is None or not striped:
        return norm is not None
    what = f'{type(model).__name__}: {norm} reads more than a row of its map, so the head ' \
        'cannot run in row stripes'
    if widest_bytes > WHOLE_HEAD_BYTES:
        raise ValueError(
            f'{what}, and whole its widest map would take {_size(widest_bytes)} (above '
            f'WHOLE_HEAD_BYTES, {_size(WHOLE_HEAD_BYTES)}). Use a norm that '
            "reads each pixel alone in the head (norm_cfg=dict(type='BN'), in eval mode, or "
            'none), or set test_cfg.stripe_rows=None to run the head whole (the memory of '
            "mmseg's / mmdet's own inference)")
    message = f'{what}; it runs whole, as mmseg / mmdet run it ({_size(widest_bytes)} of its ' \
        "widest map). norm_cfg=dict(type='BN') in the head keeps it in stripes"
    if message not in _LOGGED:
        _LOGGED.add(message)
        from mmengine.logging import print_log
        print_log(message, logger='current', level=logging.WARNING)
    return True


def _size(nbytes: int) -> str:
    return f'{nbytes / 2**30:.2f} GiB' if nbytes >= 2**30 else f'{nbytes / 2**20:.2f} MiB'
