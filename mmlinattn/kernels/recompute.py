"""Activation checkpointing of a call in eager training: a memory form, not a faster one."""
from typing import Callable

import torch.utils.checkpoint as cp

from . import policy


def recompute_in_backward(fn: Callable, *args):
    """``fn(*args)``; when autograd records it, under activation checkpointing (its
    intermediates are recomputed in the backward pass instead of stored; a traced graph keeps
    the checkpoint), so a loop of such calls keeps only its outputs alive.  ``args`` are
    tensors or None.  Under ``MMLINATTN_KERNELS=plain`` autograd keeps everything."""
    if not policy.plain() and policy.needs_grad(*(a for a in args if a is not None)):
        return cp.checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


def recomputes(*tensors) -> bool:
    """The rule of the memory forms that hand a stretch of ops over to be recomputed in the
    backward (a stem's activations, an FFN's hidden stretch): eager training on ``tensors``
    (:func:`.policy.eager_training`; a traced graph's partitioner chooses for itself)."""
    return policy.eager_training(*tensors)


def recompute_in_eager_backward(fn: Callable, *args):
    """:func:`recompute_in_backward` outside a traced graph, whose partitioner chooses for
    itself what to keep: there ``fn(*args)``."""
    if policy.traced():
        return fn(*args)
    return recompute_in_backward(fn, *args)
