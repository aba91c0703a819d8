"""``torch.compile`` of small elementwise chains, with an eager fallback.

Why: a feature map such as NaLa's (norm, power, sigmoid, sin, sqrt, products) is a dozen
elementwise ops.  Eagerly each op is a separate pass with its own output buffer and its own
call overhead; compiled (inductor), the chain is one vectorised loop (``docs/benchmarks.md``).
Under autograd (``allow_grad``) the chain is compiled with its backward (AOTAutograd): the
backward is one loop too, and the compiled forward saves only what that loop needs (about the
input) instead of every intermediate.  As with any ``torch.compile`` training graph, a
backward with ``retain_graph=True`` through it needs
``torch._functorch.config.donated_buffer = False`` (or ``MMLINATTN_COMPILE=0``).

Whether the compiled form may run is :func:`.policy.compiled_allowed`'s question.  The first
call compiles (inductor caches the result on disk for later processes); if compilation fails
the function falls back to eager for the rest of the process, with one warning.
"""
import contextlib
import functools
import logging
import warnings
from typing import Callable, Tuple

import torch

from .policy import COMPILE_ENV

__all__ = ['LazyCompiled', 'compile_each']


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
    :func:`.policy.compiled_allowed` first.
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
