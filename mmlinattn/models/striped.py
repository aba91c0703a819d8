"""What the striped heads of the segmentors and of the detector share: the ``stripe_rows``
setting, the halo of a stack of convolutions, and the check that a head's norms let it run in
row stripes at all (:func:`head_runs_whole`)."""
import logging
from typing import Iterable, Optional

import torch.nn as nn

from ..kernels import per_pixel

#: a head whose striped part has a norm that reads more than a row of the map (a group norm,
#: batch statistics: :func:`~mmlinattn.kernels.per_pixel`) runs whole, exactly as mmseg /
#: mmdet run it, while its widest map whole takes at most this many bytes (1 GiB); above,
#: the predict raises rather than run in stripes that would change its result
WHOLE_HEAD_BYTES = 1 << 30


def stripe_rows_of(test_cfg) -> Optional[int]:
    """``test_cfg.stripe_rows`` (default 64), checked: a positive int, or None for no stripes."""
    stripe_rows = (test_cfg or {}).get('stripe_rows', 64)
    if stripe_rows is not None and (not isinstance(stripe_rows, int) or stripe_rows < 1):
        raise ValueError(f'test_cfg.stripe_rows must be a positive int or None, got '
                         f'{stripe_rows!r}')
    return stripe_rows


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


def widest_channels(modules: Iterable[nn.Module]) -> int:
    """The most channels a convolution of ``modules`` reads or writes."""
    return max((max(m.in_channels, m.out_channels) for module in modules
                for m in module.modules() if isinstance(m, nn.modules.conv._ConvNd)), default=1)


def whole_map_norm(model: nn.Module, modules: Iterable[nn.Module]) -> Optional[str]:
    """The first module in ``modules`` (or inside one) that is not
    :func:`~mmlinattn.kernels.per_pixel`, named as in ``model``, with its type and mode; None
    if there is none."""
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
    log_once(f'{what}; it runs whole, as mmseg / mmdet run it ({_size(widest_bytes)} of its '
             "widest map). norm_cfg=dict(type='BN') in the head keeps it in stripes")
    return True


def log_once(message: str) -> None:
    """A warning in mmengine's current logger, the first time ``message`` comes."""
    if message not in _LOGGED:
        _LOGGED.add(message)
        from mmengine.logging import print_log
        print_log(message, logger='current', level=logging.WARNING)


def _size(nbytes: int) -> str:
    return f'{nbytes / 2**30:.2f} GiB' if nbytes >= 2**30 else f'{nbytes / 2**20:.2f} MiB'
