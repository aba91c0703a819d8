"""The call context every path decision reads, and the switches that steer it.

Every fast form in :mod:`mmlinattn.kernels` runs only where its rule allows (a
:class:`.dispatch.FastForm` beside the form: an availability check on the context, asked once
per forward, and a verifier of the call), and its plain form of :mod:`mmlinattn.ops` (or the
torch op it stands in for) elsewhere.  A backbone's forward builds one :class:`CallContext`
where it starts (:func:`decide_once`): the switches read once, whether a graph is traced, a
special mode, the device; a call outside such a forward reads one at call time.  This module
holds what the rules share.  A call is in one of four modes (:func:`mode`):

* ``PLAIN``: ``MMLINATTN_KERNELS=plain`` -- every entry runs its :mod:`mmlinattn.ops` form
  and every layer its plain torch ops (no fast form at all; for debugging and the tests);
* ``TRACED``: inside ``torch.compile`` / ``torch.export``: no ``out=`` writes into views, no
  Python loop or branch over a (symbolic) size; the graph's compiler fuses for itself;
* ``EAGER_TRAINING``: autograd records the call: custom backwards and recomputation that
  keep fewer tensors for the backward;
* ``EAGER_INFERENCE``: autograd records nothing: in-place ops, ``out=`` views, buffer reuse.

Orthogonal to the mode: the device (chunk and segment sizes, depthwise slices) and the
toolchain (:func:`toolchain_available`).  The switches are declared in :data:`SWITCHES`; the
sizes below it are read at call time (a test or a user may change them).
"""
import contextvars
import enum
import functools
import importlib.util
import os
import shutil
from typing import Callable, FrozenSet, NamedTuple, Optional

import torch
from torch.nn.modules import module as module_hooks

from ..ops.precision import autocast_enabled
from ..ops.tracing import traced

__all__ = ['SWITCHES', 'COMPILE_ENV', 'FUSE_GELU_ENV', 'KERNELS_ENV', 'TRITON_ENV', 'Mode',
           'CallContext', 'read_context', 'decide_once', 'run_in', 'context', 'mode', 'switched_off',
           'plain', 'traced', 'needs_grad', 'eager_inference',
           'plain_unavailable', 'jit_unavailable', 'eager_unavailable',
           'special_mode', 'toolchain_available', 'plain_precision',
           'hooked']

#: environment switch: ``MMLINATTN_COMPILE=0`` keeps every op eager (no ``torch.compile``)
COMPILE_ENV = 'MMLINATTN_COMPILE'
#: environment switch: ``MMLINATTN_FUSE_GELU=0`` keeps the plain ops instead of oneDNN's
FUSE_GELU_ENV = 'MMLINATTN_FUSE_GELU'
#: environment switch: ``MMLINATTN_KERNELS=plain`` runs the plain forms only
KERNELS_ENV = 'MMLINATTN_KERNELS'
#: environment switch: ``MMLINATTN_TRITON=0`` keeps the torch ops where a Triton kernel would run
TRITON_ENV = 'MMLINATTN_TRITON'

#: every environment switch of the package: name -> (default, what it does)
SWITCHES = {
    COMPILE_ENV: ('1', 'compiled loops (torch.compile, inductor) for elementwise chains: '
                  "NaLa's feature maps, SOFT's kernel, the 5x5+ depthwise weight gradient; "
                  '0 keeps them eager'),
    FUSE_GELU_ENV: ('1', "oneDNN epilogues on the CPU: a GELU in its linear's or depthwise "
                    "conv's epilogue, a linear's bias per output tile; 0 keeps the plain ops"),
    KERNELS_ENV: ('fast', "'plain': no fast form at all, every op as mmlinattn.ops writes it "
                  '(and every layer with plain torch ops)'),
    TRITON_ENV: ('1', "Triton kernels on CUDA (eager inference): LDN's normalised linear-attention "
                 'core; 0 keeps the torch ops'),
}

# -- the sizes that tune the fast forms (module attributes: read at call time) -----------
#: elements of one (heads x tokens x features) chunk of the chunked linear-attention core on
#: the CPU: 2^18 float32 = 1 MiB, small enough to stay in cache between the feature-map ops
CHUNK_ELEMENTS = 1 << 18
#: the same on other devices: a GPU gains nothing from cache-sized chunks and pays a launch
#: per op and chunk; chunks remain so that one chunk's features, not all, are live
DEVICE_CHUNK_ELEMENTS = 1 << 26
#: tokens per segment of the sums over tokens off the CPU (a batched matmul of segments:
#: one F x D product ~10^5 tokens deep leaves a GPU nearly idle); 0 on the CPU
DEVICE_SEGMENT_TOKENS = 4096
#: SOFT inference holds P = exp(Q - K~) whole up to this many elements (1 GiB float32) ...
SOFT_CHUNK_ELEMENTS = 1 << 28
#: ... and above, computes it in token chunks of about this many elements
SOFT_CHUNK_TARGET = 1 << 25
#: an inference FFN whose hidden tensor (tokens x hidden channels) would exceed this many
#: bytes (256 MiB) runs in row stripes (:mod:`.row_stripes`) ...
STRIPE_HIDDEN_BYTES = 1 << 28
#: ... of about this many bytes of hidden tensor each on the CPU (32 MiB, cache-friendly) ...
STRIPE_TARGET_BYTES = 1 << 25
#: ... and on other devices (1 GiB: fewer launches; a smaller map runs whole)
DEVICE_STRIPE_TARGET_BYTES = 1 << 30
#: a global mixer with a two-pass form runs in row stripes on a token map above this many
#: bytes (512 MiB: a 64-channel stage 1 of an image above ~5800²), where its q / k / v and
#: output would be several such maps
STRIPE_MAP_BYTES = 1 << 29
#: below this many flops per matrix a batched matmul runs as one call, above as a loop
MM_LOOP_FLOPS = 1 << 27
#: above this many landmarks SOFT's Newton solver logs its cost once per process
NEWTON_LOG_LANDMARKS = 256
#: the most elements a conv's input may have for cuDNN's 32-bit indexing; above it,
#: depthwise convs off the CPU run on channel slices
INDEX32_ELEMENTS = 2**31 - 1
#: the fewest slices such a conv runs in (each slice at most an eighth of the map)
MIN_SLICES = 8
#: smallest depthwise kernel side that takes the custom CPU backward (3x3: PyTorch's own)
MIN_KERNEL = 5

_OFF = ('0', 'false', 'no', 'off')


class Mode(enum.Enum):
    """The mode of a call (see the module docstring)."""
    PLAIN = 'plain'
    TRACED = 'traced'
    EAGER_TRAINING = 'eager training'
    EAGER_INFERENCE = 'eager inference'


class CallContext(NamedTuple):
    """What decides the path of every call in one backbone forward, read once where it
    starts (:func:`decide_once`): the switches (``plain``: ``MMLINATTN_KERNELS=plain``;
    ``off``: the other switches of :data:`SWITCHES` that say off), whether a graph is being
    traced (``traced``; ``jit_tracing``: ``torch.jit.trace``, whose ONNX export takes no
    custom autograd Function nor ``out=`` view), a special mode (``special``:
    :func:`special_mode`), oneDNN's flag and the input's device.  ``forms`` holds what each
    fast form's availability check (:class:`.dispatch.FastForm`) answered in this context:
    asked once per forward."""
    plain: bool
    off: FrozenSet[str]
    traced: bool
    jit_tracing: bool
    special: bool
    mkldnn: bool
    device: Optional[str]
    forms: dict

    @property
    def mode(self) -> Optional['Mode']:
        """:attr:`Mode.PLAIN` or :attr:`Mode.TRACED` for the whole context; None in eager
        code, where training or inference is each call's own (:func:`mode`)."""
        return Mode.PLAIN if self.plain else Mode.TRACED if self.traced else None


def read_context(device: Optional[str] = None) -> CallContext:
    """The call context as the environment and torch's state set it now (in a graph being
    traced only what a tracer can read: there every special-mode form is off anyway)."""
    graph = traced()
    return CallContext(_env_plain(),
                       frozenset(v for v in SWITCHES if v != KERNELS_ENV and _says_off(v)),
                       graph, torch.jit.is_tracing(), graph or special_mode(),
                       not graph and torch.backends.mkldnn.enabled, device, {})


#: the context of the backbone forward that runs (:func:`decide_once`); None outside one.  A
#: context variable, not a module global: each thread (a backward's, a data loader's) and
#: each asyncio task sees its own
_CONTEXT: contextvars.ContextVar = contextvars.ContextVar('mmlinattn_call_context',
                                                          default=None)


def _running() -> Optional[CallContext]:
    """The running forward's context (None outside one, and inside a traced graph, whose
    tracer reads no context variable)."""
    return None if traced() else _CONTEXT.get()


def decide_once(forward: Callable, *args, **kwargs):
    """``forward(*args, **kwargs)`` in one :class:`CallContext`, built at its start, for every
    question asked during it (a nested call keeps the outer context).  Traced, nothing is
    stored: the graph is built from what the questions answered while tracing."""
    if traced() or _CONTEXT.get() is not None:
        return forward(*args, **kwargs)
    device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), None)
    return run_in(read_context(device), forward, *args, **kwargs)


def run_in(ctx: CallContext, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` in ``ctx``: inside a forward, the forward's own context; in
    the backward, the context of the forward whose ops it recomputes (activation
    checkpointing, :mod:`.recompute`), so the recomputation takes the forward's paths.
    Nothing is stored where a context is running already, or for a traced one."""
    if ctx.traced or _CONTEXT.get() is not None:
        return fn(*args, **kwargs)
    token = _CONTEXT.set(ctx)
    try:
        return fn(*args, **kwargs)
    finally:
        _CONTEXT.reset(token)


def context() -> CallContext:
    """The running forward's :class:`CallContext`; outside one, or inside a graph traced
    within it (a compiled sub-module), one read now."""
    ctx = _running()
    return read_context() if ctx is None else ctx


def plain_unavailable(ctx: CallContext) -> Optional[str]:
    """Why no fast form may run in ``ctx``: ``MMLINATTN_KERNELS=plain`` (None: not set)."""
    return f'off ({KERNELS_ENV}=plain)' if ctx.plain else None


def jit_unavailable(ctx: CallContext) -> Optional[str]:
    """Why no form may run under ``torch.jit.trace``, whose ONNX export (mmdeploy's) cannot take
    a custom autograd Function apart and drops a write into an ``out=`` view."""
    return 'off under torch.jit.trace' if ctx.jit_tracing else plain_unavailable(ctx)


def eager_unavailable(ctx: CallContext) -> Optional[str]:
    """Why no eager-only fast form (an in-place or ``out=`` write, a Python loop or branch
    over sizes, a recomputation the graph's partitioner would choose for itself) may run in
    ``ctx``: ``MMLINATTN_KERNELS=plain``, or a traced graph.  Shared by the forms'
    availability checks (:class:`.dispatch.FastForm`)."""
    if ctx.traced:
        return 'off in a traced graph'
    return plain_unavailable(ctx)


def _env_plain() -> bool:
    return os.environ.get(KERNELS_ENV, '').strip().lower() == 'plain'


def _says_off(var: str) -> bool:
    return os.environ.get(var, '1').strip().lower() in _OFF


def switched_off(var: str) -> bool:
    """Whether the switch ``var`` says off (``0``, ``false``, ``no``, ``off``)."""
    ctx = _running()
    if ctx is not None and var in SWITCHES and var != KERNELS_ENV:
        return var in ctx.off
    return _says_off(var)


def plain() -> bool:
    """``MMLINATTN_KERNELS=plain``: no fast form runs."""
    ctx = _running()
    if ctx is not None:
        return ctx.plain
    return _env_plain()


def needs_grad(*tensors: torch.Tensor) -> bool:
    """Autograd will record an op on ``tensors`` (grad mode on and any requires grad)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def mode(*tensors: torch.Tensor) -> Mode:
    """The mode of a call on ``tensors``: the context's (:attr:`CallContext.mode`), in eager
    code training or inference by whether autograd records ``tensors``."""
    fixed = context().mode
    if fixed is not None:
        return fixed
    return Mode.EAGER_TRAINING if needs_grad(*tensors) else Mode.EAGER_INFERENCE


def eager_inference(*tensors: torch.Tensor) -> bool:
    """A form may write into ``out=`` views and reuse buffers: :attr:`Mode.EAGER_INFERENCE`."""
    return mode(*tensors) is Mode.EAGER_INFERENCE


def special_mode() -> bool:
    """Tracing, scripting, compiling or a Python dispatch mode (FLOP counter, fake
    tensors): where an op the tracer or the mode cannot see must not run."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    return traced() or torch.jit.is_scripting() or _get_current_dispatch_mode() is not None


@functools.lru_cache(maxsize=None)
def toolchain_available(device_type: str) -> bool:
    """Inductor's code generator for ``device_type`` can run on this machine."""
    if device_type == 'cpu':
        return any(shutil.which(c) for c in (os.environ.get('CXX', 'g++'), 'g++', 'c++'))
    if device_type == 'cuda':
        return importlib.util.find_spec('triton') is not None
    return False


def hooked(*modules: torch.nn.Module) -> bool:
    """Forward hooks, on ``modules`` or global, that a fused op would bypass."""
    return bool(module_hooks._global_forward_hooks or module_hooks._global_forward_pre_hooks
                or any(m._forward_hooks or m._forward_pre_hooks for m in modules))


#: dtypes the Triton kernels take (float32 accumulation inside)
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: devices the Triton kernels run on (the tests add the CPU, where Triton's interpreter
#: runs them)
TRITON_DEVICES = ('cuda', )


def plain_precision(x: torch.Tensor, *params: torch.Tensor) -> bool:
    """No autocast and one dtype: a fused form then rounds like the plain one (an ``out=``
    GEMM is not autocast, and a LayerScale folded into a half-precision weight underflows).
    False under ``MMLINATTN_KERNELS=plain``."""
    return (not plain() and not autocast_enabled(x.device.type)
            and all(p.dtype == x.dtype for p in params))
