"""oneDNN epilogues: a GELU applied in the epilogue of the linear or depthwise conv that
feeds it, and a linear's bias in its own epilogue.

Why: on CPU an activation on its own is one more pass over a hidden-size tensor, and at
detection sizes that tensor lives in memory, not cache; the FFNs' hidden layers are the
largest activations of every family (4x-8x the channels).  oneDNN, which PyTorch's CPU
build carries, can apply the GELU to each output tile while it is still in cache ("post-op",
``torch.ops.mkldnn._linear_pointwise`` / ``_convolution_pointwise``, what inductor emits for
the same pattern).  Likewise a plain linear with a bias: PyTorch's ``addmm`` first writes the
bias into every output row (one more pass over the output), then accumulates the product;
oneDNN adds it per tile.  Measurements: ``docs/benchmarks.md``.

Only where :func:`onednn_allowed` says so (eager float32 CPU code that autograd does not
record): the fused ops have no autograd formula, no ONNX symbol and no FLOP formula.  (The
forward of an autograd function with its own backward records nothing: there the projections
of :func:`~.residual.normed_linears` run fused in training too.)  The first use checks the
fused ops against the plain ones on a small input and keeps the plain ops for good if they
differ or are missing; ``MMLINATTN_FUSE_GELU=0`` keeps the plain ops everywhere.
"""
import functools
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops.precision import autocast_enabled
from .dispatch import fast_form, module_unrolled
from .policy import FUSE_GELU_ENV, CallContext, hooked, needs_grad, plain_unavailable

#: how far the fused GELU may differ from ``F.gelu`` in the first-use check (oneDNN's erf
#: is a different float32 approximation: measured differences up to 1.5e-6)
_CHECK_ATOL = 1e-5


def onednn_unavailable(ctx: CallContext) -> Optional[str]:
    """Why oneDNN's fused ops cannot run in ``ctx`` (None: they can): oneDNN off, a traced
    graph or a special mode (the fused ops have no ONNX symbol and no FLOP formula), or a
    switch (``MMLINATTN_FUSE_GELU=0``, ``MMLINATTN_KERNELS=plain``) saying no."""
    if FUSE_GELU_ENV in ctx.off:
        return f'off ({FUSE_GELU_ENV}=0)'
    if not ctx.mkldnn:
        return 'off (torch.backends.mkldnn.enabled is False)'
    if ctx.special:
        return 'off in a traced graph or a special mode'
    return plain_unavailable(ctx)


@fast_form('oneDNN epilogues', onednn_unavailable)
def onednn_allowed(x: torch.Tensor, modules=(), tensors=()) -> bool:
    """oneDNN's fused ops may stand in for the plain ones on ``x`` and ``modules``'
    parameters (or ``tensors``): where the context allows (:func:`onednn_unavailable`), in
    float32 CPU code that autograd does not record (the fused ops have no autograd formula),
    without autocast and without a forward hook on ``modules``."""
    params = [p for m in modules for p in m.parameters()] + list(tensors)
    return not (type(x) is not torch.Tensor or x.device.type != 'cpu'
                or x.dtype != torch.float32 or any(p.dtype != x.dtype for p in params)
                or autocast_enabled('cpu') or needs_grad(x, *params)
                or hooked(*modules))


def _linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                 algorithm: str) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, 'gelu', [], algorithm)


def _linear_bias(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]
                 ) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, 'none', [], '')


def _conv_gelu(m: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
               padding, groups: int, algorithm: str) -> torch.Tensor:
    return torch.ops.mkldnn._convolution_pointwise(
        m, weight, bias, list(padding), [1, 1], [1, 1], groups, 'gelu', [], algorithm)


@functools.lru_cache(maxsize=None)
def _fused_ops_work() -> bool:
    """The fused ops exist here and give ``F.gelu`` of the plain op, for both GELUs, and
    ``F.linear`` with and without a bias."""
    if not torch.backends.mkldnn.is_available():
        return False
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 24, 16, generator=gen)
    w, b = torch.randn(40, 16, generator=gen), torch.randn(40, generator=gen)
    m = torch.randn(1, 8, 6, 5, generator=gen).contiguous(memory_format=torch.channels_last)
    k, kb = torch.randn(8, 1, 3, 3, generator=gen), torch.randn(8, generator=gen)
    try:
        with torch.no_grad():
            for algorithm in ('none', 'tanh'):
                pairs = ((_linear_gelu(x, w, b, algorithm), F.linear(x, w, b)),
                         (_conv_gelu(m, k, kb, (1, 1), 8, algorithm),
                          F.conv2d(m, k, kb, 1, 1, 1, 8)))
                for fused, plain in pairs:
                    if not torch.allclose(fused, F.gelu(plain, approximate=algorithm),
                                          rtol=0, atol=_CHECK_ATOL):
                        return False
            for bias in (b, None):
                if not torch.allclose(_linear_bias(x, w, bias), F.linear(x, w, bias),
                                      rtol=0, atol=_CHECK_ATOL):
                    return False
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return True


def _gelu_epilogue(act: nn.Module, x: torch.Tensor, *modules: nn.Module) -> bool:
    return (type(act) is nn.GELU and onednn_allowed.verify(x, (act, ) + modules)
            and _fused_ops_work())


@onednn_allowed.dispatch(lambda act, x, *modules: None, verify=_gelu_epilogue)
def fused_gelu(act: nn.Module, x: torch.Tensor, *modules: nn.Module) -> Optional[str]:
    """oneDNN's GELU algorithm (``'none'``, exact erf; ``'tanh'``) when ``act`` may run in
    the epilogue of ``modules`` (the linear or conv that computes its input from ``x``);
    None where the plain ops must run (see the module docstring; also where a forward hook
    on ``act`` or ``modules`` expects them to be called)."""
    return act.approximate


def _bias_in_tiles(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
                   ) -> bool:
    return (x.dim() >= 2 and x.is_contiguous() and weight.is_contiguous()
            and onednn_allowed.verify(x, tensors=(weight, ) if bias is None else (weight, bias))
            and _fused_ops_work())


@onednn_allowed.dispatch(F.linear, verify=_bias_in_tiles)
def fused_linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None
                 ) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; where autograd records nothing, in eager float32 CPU
    code, one oneDNN primitive that adds the bias per output tile (contiguous ``x`` and
    ``weight``)."""
    return _linear_bias(x, weight, bias)


def linear_blocks(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                  parts: int, which: Optional[Sequence[int]] = None) -> Tuple[torch.Tensor, ...]:
    """``F.linear(x, weight, bias)`` cut into ``parts`` equal blocks of output channels (the
    blocks ``which``, default all), each from its own rows of the weight by
    :func:`fused_linear`: contiguous outputs instead of strided column blocks of one product,
    and only the blocks asked for computed."""
    weights = weight.chunk(parts)
    biases = (None, ) * parts if bias is None else bias.chunk(parts)
    return tuple(fused_linear(x, weights[i], biases[i])
                 for i in (range(parts) if which is None else which))


@module_unrolled.dispatch(lambda x, linear: linear(x), verify=lambda x, linear:
                          type(linear) is nn.Linear and module_unrolled.verify(linear))
def apply_linear(x: torch.Tensor, linear: nn.Module) -> torch.Tensor:
    """``linear(x)``, through :func:`fused_linear` for an ``nn.Linear`` without forward hooks
    (a hook expects the module to be called)."""
    return fused_linear(x, linear.weight, linear.bias)


@onednn_allowed.dispatch(lambda x, linear, act: act(linear(x)),
                         verify=lambda x, linear, act: type(linear) is nn.Linear
                         and x.is_contiguous() and _gelu_epilogue(act, x, linear))
def linear_act(x: torch.Tensor, linear: nn.Module, act: nn.Module) -> torch.Tensor:
    """``act(linear(x))``, in one oneDNN primitive where :func:`fused_gelu` allows it."""
    return _linear_gelu(x, linear.weight, linear.bias, act.approximate)


def depthwise_act(m: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                  act: Optional[nn.Module] = None, algorithm: Optional[str] = None
                  ) -> torch.Tensor:
    """``act`` (or nothing) of the stride-1 'same' depthwise conv of the channels-last
    (B, C, H, W) map ``m``, channels-last out; in the conv's epilogue with the
    ``algorithm`` that :func:`fused_gelu` gave for it (None: the plain ops)."""
    kh, kw = weight.shape[-2:]
    if algorithm is not None:
        return _conv_gelu(m, weight, bias, (kh // 2, kw // 2), m.shape[1], algorithm)
    y = F.conv2d(m, weight, bias, 1, (kh // 2, kw // 2), 1, m.shape[1])
    return y if act is None else act(y)
