"""``torch.compile`` of small elementwise chains, with an eager fallback.

Why: a feature map such as NaLa's (norm, power, sigmoid, sin, sqrt, products) is a dozen
elementwise ops.  Eagerly each op is a separate pass with its own output buffer and its own
call overhead; compiled (inductor), the chain is one vectorised loop (``docs/benchmarks.md``).
Under autograd (``allow_grad``) the chain is compiled with its backward (AOTAutograd): the
backward is one loop too, and the compiled forward saves only what that loop needs (about the
input) instead of every intermediate.  As with any ``torch.compile`` training graph, a
backward with ``retain_graph=True`` through it needs
``torch._functorch.config.donated_buffer = False`` (or ``MMLINATTN_COMPILE=0``).

Whether the compiled form may run is :func:`compiled_allowed`'s question.  The first
call compiles (inductor caches the result on disk for later processes); if compilation fails
the function falls back to eager for the rest of the process, with one warning.
"""
import contextlib
import functools
import logging
import warnings
from typing import Callable, Tuple

import torch

from . import policy
from .dispatch import fast_form
from .policy import COMPILE_ENV

__all__ = ['LazyCompiled', 'compile_each', 'compiled_allowed', 'compiler_unavailable']


def compiler_unavailable(ctx: policy.CallContext):
    """Why no compiled loop may run in ``ctx`` (None: one may): inside a traced graph or a
    special mode (nothing may be asked there: a FLOP counter, fake tensors), or a switch
    (``MMLINATTN_COMPILE=0``, ``MMLINATTN_KERNELS=plain``) says no."""
    if ctx.special:
        return 'off in a traced graph or a special mode'
    if COMPILE_ENV in ctx.off:
        return f'off ({COMPILE_ENV}=0)'
    return policy.plain_unavailable(ctx)


@fast_form('compiled loops', compiler_unavailable)
def compiled_allowed(*tensors: torch.Tensor, allow_grad: bool = False) -> bool:
    """A compiled loop (:class:`LazyCompiled`) may run on ``tensors`` now: where the context
    allows (:func:`compiler_unavailable`), no gradient needed (or ``allow_grad``: compiled
    with its backward), plain ``torch.Tensor`` inputs on a device with a toolchain."""
    if any(type(t) is not torch.Tensor for t in tensors):
        return False
    if not allow_grad and policy.needs_grad(*tensors):
        return False
    return policy.toolchain_available(tensors[0].device.type)


@contextlib.contextmanager
def _no_cuda_home_notice():
    """Compiling imports ``torch.utils.cpp_extension``, which logs "No CUDA runtime is found,
    using CUDA_HOME=..." on a CPU-only machine with a CUDA wheel: noise for a CPU compile."""
    logger = logging.getLogger('torch.utils.cpp_extension')
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class LazyCompiled:
    """``fn`` compiled with ``torch.compile(dynamic=True)`` on its first call.

    Sizes are symbolic, so one compilation serves every token count and head layout (a size
    of 1 and a new dtype or device compile once more).  Any exception from compiling or
    running the compiled form makes this object call ``fn`` eagerly from then on, after one
    warning: a machine without a working compiler still runs, only slower.  Callers check
    :func:`compiled_allowed` first.
    """

    def __init__(self, fn: Callable, name: str):
        self.fn = fn
        self.name = name
        self.failed = False
        self._compiled = None

    def __call__(self, *args):
        if self.failed:
            return self.fn(*args)
        try:
            if self._compiled is None:
                self._compiled = torch.compile(self.fn, dynamic=True)
                with _no_cuda_home_notice():
                    return self._compiled(*args)
            return self._compiled(*args)
        except Exception as e:  # noqa: BLE001 - any compiler failure must not stop inference
            self.failed = True
            cause = str(e).strip().splitlines()[0] if str(e).strip() else ''
            warnings.warn(f'mmlinattn: torch.compile of {self.name} failed '
                          f'({type(e).__name__}: {cause[:200]}); using the eager version for '
                          f'the rest of this process (slower, same result). Set '
                          f'{COMPILE_ENV}=0 to skip compiling.', RuntimeWarning)
            return self.fn(*args)


@functools.lru_cache(maxsize=None)
def compile_each(build: Callable, args: tuple, names: Tuple[str, ...]) -> tuple:
    """The functions ``build(*args)`` returns, each as a :class:`LazyCompiled` named
    by ``names``; built once per ``(build, args)`` and process, so every later call with the
    same settings reuses the compiled code."""
    fns = build(*args)
    if len(fns) != len(names):
        raise ValueError(f'{len(fns)} functions but {len(names)} names')
    return tuple(LazyCompiled(fn, name) for fn, name in zip(fns, names))
