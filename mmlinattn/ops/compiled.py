"""``torch.compile`` of small elementwise chains, with an eager fallback.

Why: a feature map such as NaLa's (norm, power, sigmoid, sin, sqrt, products) is a dozen
elementwise ops.  Eagerly each op is a separate pass with its own output buffer and its own
call overhead; compiled (inductor), the chain is one vectorised loop.  On 2 CPU cores this
made NaLa's two feature maps 4.5x faster (``docs/benchmarks.md``).

Under autograd (``allow_grad``) the chain is compiled with its backward (AOTAutograd): the
backward is one loop too, and the compiled forward saves only what that loop needs (about the
input) instead of every intermediate: NaLa's query map went from 13 saved tensors the size of
its input to one, and forward + backward from 6.1 to 2.5 ms per 4096-token chunk.  As with
any ``torch.compile`` training graph, a backward with ``retain_graph=True`` through it needs
``torch._functorch.config.donated_buffer = False`` (or ``MMLINATTN_COMPILE=0``).

The compiled path is used only where it is safe and cheap to get right:

* no gradient is needed, or the caller compiled the function for autograd (``allow_grad``);
* a CPU or CUDA tensor of the plain ``torch.Tensor`` type (no fake / meta tensors, no FLOP
  counter or other dispatch mode, no tracing, not already inside ``torch.compile``);
* the toolchain is there: a C++ compiler for CPU, Triton for CUDA;
* ``MMLINATTN_COMPILE`` is not ``0`` (the switch for machines where compiling is unwanted).

The first call compiles (about 15-20 s on 2 CPU cores; inductor caches the result on disk,
so later processes load it in a few seconds).  If compilation fails the function falls back
to eager for the rest of the process, with one warning that names the cause.
"""
import contextlib
import functools
import importlib.util
import logging
import os
import shutil
import warnings
from typing import Callable, Tuple

import torch

from ._grad import needs_grad

__all__ = ['ENV_VAR', 'compiled_path_allowed', 'LazyCompiled', 'compile_each']

#: environment switch: ``MMLINATTN_COMPILE=0`` keeps every op eager
ENV_VAR = 'MMLINATTN_COMPILE'
_OFF = ('0', 'false', 'no', 'off')


def switched_off(var: str) -> bool:
    """Whether the environment variable ``var`` says off (``0``, ``false``, ``no``, ``off``)."""
    return os.environ.get(var, '1').strip().lower() in _OFF


@functools.lru_cache(maxsize=None)
def _toolchain_available(device_type: str) -> bool:
    """Inductor's code generator for ``device_type`` can run on this machine."""
    if device_type == 'cpu':
        return any(shutil.which(c) for c in (os.environ.get('CXX', 'g++'), 'g++', 'c++'))
    if device_type == 'cuda':
        return importlib.util.find_spec('triton') is not None
    return False


def in_special_mode() -> bool:
    """Tracing, scripting, compiling or a Python dispatch mode (FLOP counter, fake tensors)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    return (torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting()
            or _get_current_dispatch_mode() is not None)


def compiled_path_allowed(*tensors: torch.Tensor, allow_grad: bool = False) -> bool:
    """Whether a :class:`LazyCompiled` function may run its compiled form on ``tensors``
    now (see the module docstring for the conditions); ``allow_grad``: also when autograd
    records the call."""
    if in_special_mode():  # first: inside a traced graph nothing else may be asked
        return False
    if switched_off(ENV_VAR):
        return False
    if any(type(t) is not torch.Tensor for t in tensors):
        return False
    if not allow_grad and needs_grad(*tensors):
        return False
    device_type = tensors[0].device.type
    return _toolchain_available(device_type)


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
    :func:`compiled_path_allowed` first.
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
                          f'{ENV_VAR}=0 to skip compiling.', RuntimeWarning)
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
