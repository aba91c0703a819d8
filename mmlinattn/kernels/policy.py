"""The one place that decides which form of an op runs, and the switches that steer it.

Every fast form in :mod:`mmlinattn.kernels` runs only where its rule allows, and falls back
to the plain form of :mod:`mmlinattn.ops` (or of the torch op it stands in for) otherwise.
This module holds what the rules share: the mode of a call, the switches, the toolchain
checks and the sizes.  A rule that only one family of forms asks lives beside it under its
own name (:func:`.onednn.onednn_allowed`; :func:`.depthwise.custom_depthwise_backward`,
:func:`.depthwise.depthwise_slices`; :func:`.residual.gemm_accumulates`,
:func:`.residual.layer_scale_folded`, :func:`.residual.norm_recomputed`);
:func:`triton_allowed` stays here, since :mod:`.triton_linear` imports Triton.
A call is in one of four modes (:func:`mode`):

* ``PLAIN``: ``MMLINATTN_KERNELS=plain`` -- every entry runs its :mod:`mmlinattn.ops` form
  and every layer its plain torch ops (no fast form at all; for debugging and the tests);
* ``TRACED``: inside ``torch.compile`` / ``torch.export``: no ``out=`` writes into views, no
  Python loop or branch over a (symbolic) size; the graph's compiler fuses for itself;
* ``EAGER_TRAINING``: autograd records the call: custom backwards and recomputation that
  keep fewer tensors for the backward;
* ``EAGER_INFERENCE``: autograd records nothing: in-place ops, ``out=`` views, buffer reuse.

Orthogonal to the mode: the device (chunk and segment sizes, depthwise slices: the constants
below) and the toolchain (:func:`compiled_allowed`, :func:`.onednn.onednn_allowed`).

The environment switches are declared in :data:`SWITCHES`, the sizes that tune the fast
forms just below it.  A backbone's forward reads the switches once, where it starts
(:func:`decide_once`), and every question asked during it answers from that reading; a call
outside such a forward (an op called directly) reads them at call time.  The sizes are
module attributes read at call time (a test or a user may change them).
"""
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
           'Switches', 'read_switches', 'decide_once', 'mode', 'switched_off', 'plain', 'traced',
           'needs_grad', 'eager_inference', 'eager_training', 'may_branch_on_sizes',
           'special_mode', 'compiled_allowed', 'triton_allowed', 'plain_precision', 'hooked']

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


class Switches(NamedTuple):
    """The environment switches as read at one moment: ``plain`` (``MMLINATTN_KERNELS=plain``)
    and the other switches of :data:`SWITCHES` that say off."""
    plain: bool
    off: FrozenSet[str]


def read_switches() -> Switches:
    """The switches as the environment sets them now."""
    return Switches(os.environ.get(KERNELS_ENV, '').strip().lower() == 'plain',
                    frozenset(v for v in SWITCHES if v != KERNELS_ENV and _says_off(v)))


#: the switches of the backbone forward that runs (:func:`decide_once`); None outside one
_DECIDED: Optional[Switches] = None


def decide_once(forward: Callable, *args, **kwargs):
    """``forward(*args, **kwargs)`` with the switches read once, at its start, for every
    question asked during it (a nested call keeps the outer reading).  Traced, nothing is
    stored: the graph is built from what the questions answered while tracing."""
    global _DECIDED
    if _DECIDED is not None or traced():
        return forward(*args, **kwargs)
    _DECIDED = read_switches()
    try:
        return forward(*args, **kwargs)
    finally:
        _DECIDED = None


def _says_off(var: str) -> bool:
    return os.environ.get(var, '1').strip().lower() in _OFF


def switched_off(var: str) -> bool:
    """Whether the switch ``var`` says off (``0``, ``false``, ``no``, ``off``)."""
    if _DECIDED is not None and var in SWITCHES and var != KERNELS_ENV:
        return var in _DECIDED.off
    return _says_off(var)


def plain() -> bool:
    """``MMLINATTN_KERNELS=plain``: no fast form runs."""
    if _DECIDED is not None:
        return _DECIDED.plain
    return os.environ.get(KERNELS_ENV, '').strip().lower() == 'plain'


def needs_grad(*tensors: torch.Tensor) -> bool:
    """Autograd will record an op on ``tensors`` (grad mode on and any requires grad)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def mode(*tensors: torch.Tensor) -> Mode:
    """The mode of a call on ``tensors``."""
    if plain():
        return Mode.PLAIN
    if traced():
        return Mode.TRACED
    return Mode.EAGER_TRAINING if needs_grad(*tensors) else Mode.EAGER_INFERENCE


def eager_inference(*tensors: torch.Tensor) -> bool:
    """A form may write into ``out=`` views and reuse buffers: :attr:`Mode.EAGER_INFERENCE`."""
    return mode(*tensors) is Mode.EAGER_INFERENCE


def eager_training(*tensors: torch.Tensor) -> bool:
    """A custom backward or a recomputation may save memory: :attr:`Mode.EAGER_TRAINING`
    (a graph's partitioner decides for itself)."""
    return mode(*tensors) is Mode.EAGER_TRAINING


def may_branch_on_sizes(*tensors: torch.Tensor) -> bool:
    """Eager inference (no graph, no ``torch.jit.trace``): a Python branch on a size (chunk
    or not, one product or a loop) would be fixed at the traced size in a graph."""
    return eager_inference(*tensors)


def custom_autograd() -> bool:
    """A custom ``torch.autograd.Function`` may stand in for its plain ops: not under
    ``torch.jit.trace``, whose ONNX export (mmdeploy's) cannot take one apart ("Dangling node
    reference")."""
    return not torch.jit.is_tracing()


def special_mode() -> bool:
    """Tracing, scripting, compiling or a Python dispatch mode (FLOP counter, fake
    tensors): where an op the tracer or the mode cannot see must not run."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    return (torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting()
            or _get_current_dispatch_mode() is not None)


@functools.lru_cache(maxsize=None)
def _toolchain_available(device_type: str) -> bool:
    """Inductor's code generator for ``device_type`` can run on this machine."""
    if device_type == 'cpu':
        return any(shutil.which(c) for c in (os.environ.get('CXX', 'g++'), 'g++', 'c++'))
    if device_type == 'cuda':
        return importlib.util.find_spec('triton') is not None
    return False


def compiled_allowed(*tensors: torch.Tensor, allow_grad: bool = False) -> bool:
    """A compiled loop (:class:`~.compiled.LazyCompiled`) may run on ``tensors`` now: no
    gradient needed (or ``allow_grad``: compiled with its backward), plain ``torch.Tensor``
    inputs on a device with a toolchain, no special mode, and neither ``MMLINATTN_COMPILE``
    nor ``MMLINATTN_KERNELS`` saying no."""
    if special_mode():  # first: inside a traced graph nothing else may be asked
        return False
    if plain() or switched_off(COMPILE_ENV):
        return False
    if any(type(t) is not torch.Tensor for t in tensors):
        return False
    if not allow_grad and needs_grad(*tensors):
        return False
    return _toolchain_available(tensors[0].device.type)


def hooked(*modules: torch.nn.Module) -> bool:
    """Forward hooks, on ``modules`` or global, that a fused op would bypass."""
    return bool(module_hooks._global_forward_hooks or module_hooks._global_forward_pre_hooks
                or any(m._forward_hooks or m._forward_pre_hooks for m in modules))


#: dtypes the Triton kernels take (float32 accumulation inside)
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: devices the Triton kernels run on (the tests add the CPU, where Triton's interpreter
#: runs them)
TRITON_DEVICES = ('cuda', )


def triton_allowed(*tensors: torch.Tensor) -> bool:
    """A Triton kernel (:mod:`.triton_linear`) may stand in for the torch ops on ``tensors``:
    eager inference (no graph, no autograd, no special mode) on a device of
    :data:`TRITON_DEVICES`, all plain ``torch.Tensor`` of one dtype of :data:`TRITON_DTYPES`,
    Triton importable, and neither ``MMLINATTN_TRITON`` nor ``MMLINATTN_KERNELS`` saying no."""
    if special_mode() or plain() or switched_off(TRITON_ENV):
        return False
    if any(type(t) is not torch.Tensor for t in tensors) or not eager_inference(*tensors):
        return False
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1 or next(iter(dtypes)) not in TRITON_DTYPES:
        return False
    return tensors[0].device.type in TRITON_DEVICES and _toolchain_available('cuda')


def plain_precision(x: torch.Tensor, *params: torch.Tensor) -> bool:
    """No autocast and one dtype: a fused form then rounds like the plain one (an ``out=``
    GEMM is not autocast, and a LayerScale folded into a half-precision weight underflows).
    False under ``MMLINATTN_KERNELS=plain``."""
    return (not plain() and not autocast_enabled(x.device.type)
            and all(p.dtype == x.dtype for p in params))
