"""The float32 island every op runs its numerically delicate part in.

Why: the ops reduce over all N tokens (norms, key sums, kernel matrices, pseudo-inverses,
Frobenius norms).  In half precision such sums overflow or lose the small terms, and
autocast would run their matmuls in half precision even when the inputs are float32.
Inside an island autocast is off, half and bfloat16 inputs are upcast to float32 (float64
stays float64) and the result is cast back, so a caller under autocast gets its own dtype.
"""
import contextlib
from typing import Optional, Tuple, Union

import torch

__all__ = ['compute_dtype', 'autocast_enabled', 'Float32Island']


def compute_dtype(*tensors: Optional[torch.Tensor]) -> torch.dtype:
    """float32, or float64 when any of ``tensors`` is float64 (None entries are skipped)."""
    dtype = torch.float32
    for t in tensors:
        if t is not None:
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def autocast_enabled(device_type: str) -> bool:
    """``torch.is_autocast_enabled(device_type)``, False for a device type autocast does not
    know (``meta`` tensors used for shape inference, where the query itself raises)."""
    available = getattr(torch.amp, 'is_autocast_available', None)
    if available is None:  # torch < 2.4: no device argument, CPU and CUDA asked apart
        return {'cpu': torch.is_autocast_cpu_enabled,
                'cuda': torch.is_autocast_enabled}.get(device_type, lambda: False)()
    if not available(device_type):
        return False
    return torch.is_autocast_enabled(device_type)


def _autocast_off(device_type: str):
    """Autocast disabled for ``device_type``; a no-op where autocast does not exist."""
    # nothing to switch off: a null context, which torch.compile also traces (it cannot
    # trace entering an autocast object outside a ``with`` statement)
    if not autocast_enabled(device_type):
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


class Float32Island:
    """``with Float32Island(q, v) as island:`` -- autocast off on the tensors' device, the
    working dtype is :func:`compute_dtype` of the given tensors, and :meth:`back` casts a
    result to the output dtype (``out_dtype``, default: the first tensor's dtype).  Optional
    tensors may be passed as None::

        with Float32Island(q) as island:
            q, k, v = island.cast(q, k, v)
            out = ...
        return island.back(out)
    """

    def __init__(self, *tensors: Optional[torch.Tensor],
                 out_dtype: Optional[torch.dtype] = None):
        if not tensors or tensors[0] is None:
            raise ValueError('Float32Island needs a tensor as its first argument')
        self.dtype = compute_dtype(*tensors)
        self.out_dtype = tensors[0].dtype if out_dtype is None else out_dtype
        self._autocast_off = _autocast_off(tensors[0].device.type)

    def __enter__(self) -> 'Float32Island':
        self._autocast_off.__enter__()
        return self

    def __exit__(self, *exc):
        return self._autocast_off.__exit__(*exc)

    def cast(self, *tensors: torch.Tensor) -> Union[torch.Tensor, Tuple[torch.Tensor, ...]]:
        """``tensors`` in the working dtype (one tensor for one argument, else a tuple)."""
        cast = tuple(t.to(self.dtype) for t in tensors)
        return cast[0] if len(cast) == 1 else cast

    def back(self, result: torch.Tensor) -> torch.Tensor:
        """``result`` in the output dtype."""
        return result.to(self.out_dtype)
