"""Reference autograd for tests of the training paths that save memory."""
import contextlib
from unittest import mock

from torch.utils._python_dispatch import TorchDispatchMode

import mmlinattn.kernels.chunked as la


@contextlib.contextmanager
def plain_autograd_core():
    """Within: the chunked linear-attention core records every op for autograd (features,
    key summary, normalisation) instead of running its closed-form backward with recomputed
    features, and eager feature maps store their intermediates: the plain form to compare
    gradients and kept activations with."""
    def plain(q, k, v, valid, feature_q, feature_k, grad_q, grad_k, eps, chunk, segment):
        summary = la._key_summary(k, v, grad_k, valid, chunk, segment)[0]
        return la._query_side(q, summary, grad_q, eps, chunk)
    with mock.patch.object(la, '_features', lambda feature, x: feature(x)), \
            mock.patch.object(la._RecomputedCore, 'apply', plain):
        yield


def kept_bytes(fn) -> int:
    """Bytes of the distinct storages autograd saves for the backward while ``fn()`` runs."""
    from torch.autograd.graph import saved_tensors_hooks
    sizes = {}

    def pack(t):
        sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(sizes.values())


#: the matrix-product ops, for :class:`CountOps`
MATMULS = ('mm', 'addmm', 'bmm', 'baddbmm')


class CountOps(TorchDispatchMode):
    """Within: counts the calls of the named aten ops (``CountOps(*MATMULS)``), in place or
    not, per name in ``counts`` and all together in ``total``."""

    def __init__(self, *names: str):
        super().__init__()
        self.counts = dict.fromkeys(names, 0)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split('.')[0].rstrip('_')
        if name in self.counts:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))
