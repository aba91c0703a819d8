"""When an op must keep autograd-friendly (out-of-place) code, and how it saves memory then."""
from typing import Callable

import torch
import torch.utils.checkpoint as cp


def needs_grad(*tensors: torch.Tensor) -> bool:
    """True when autograd will record an op on ``tensors`` (grad mode on and any input
    requires grad); fast paths that work in place or skip autograd check this first."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def eager_inference(*tensors: torch.Tensor) -> bool:
    """True when a fast path may write into ``out=`` views and reuse buffers: no autograd
    records the op and no graph is being traced (``torch.compile`` / ``torch.export`` cannot
    trace an ``out=`` into a strided view; their compilers fuse the plain form anyway)."""
    return not needs_grad(*tensors) and not torch.compiler.is_compiling()


def eager_training(*tensors: torch.Tensor) -> bool:
    """True when autograd records an op on ``tensors`` outside a traced graph: where a custom
    backward or a recomputation may save memory (a graph's partitioner decides for itself)."""
    return needs_grad(*tensors) and not torch.compiler.is_compiling()


def recompute_in_backward(fn: Callable, *args):
    """``fn(*args)``; when autograd records it, under activation checkpointing (its
    intermediates are recomputed in the backward pass instead of stored), so a loop of
    such calls keeps only its outputs alive.  ``args`` are tensors or None."""
    if needs_grad(*(a for a in args if a is not None)):
        return cp.checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)
