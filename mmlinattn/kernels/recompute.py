"""Activation checkpointing of a call in eager training: a memory form, not a faster one.

The recomputation in the backward runs in the context of the forward it recomputes
(:func:`.policy.run_in`): the same paths, without reading the switches again."""
import functools
from typing import Callable

import torch.nn as nn
import torch.utils.checkpoint as cp

from . import policy
from .dispatch import fast_form


@fast_form('activation checkpointing', policy.plain_unavailable)
def checkpointed(*tensors) -> bool:
    """A call on ``tensors`` runs under activation checkpointing: autograd records it (a
    traced graph keeps the checkpoint)."""
    return policy.needs_grad(*tensors)


def _call(fn: Callable, *args):
    return fn(*args)


def _tensors(args) -> list:
    return [a for a in args if a is not None]


@checkpointed.dispatch(_call, verify=lambda fn, *args: checkpointed.verify(*_tensors(args)))
def recompute_in_backward(fn: Callable, *args):
    """``fn(*args)``; when autograd records it, under activation checkpointing (its
    intermediates are recomputed in the backward pass instead of stored; a traced graph keeps
    the checkpoint), so a loop of such calls keeps only its outputs alive.  ``args`` are
    tensors or None.  Under ``MMLINATTN_KERNELS=plain`` autograd keeps everything."""
    return checkpoint(fn, *args)


def checkpoint(fn: Callable, *args):
    """``fn(*args)`` under activation checkpointing (non-reentrant), recomputed in the
    backward in the running forward's context."""
    return cp.checkpoint(functools.partial(policy.run_in, policy.context(), fn), *args,
                         use_reentrant=False)


@fast_form('recomputed stretches', policy.eager_unavailable)
def recomputes(*tensors) -> bool:
    """The rule of the memory forms that hand a stretch of ops over to be recomputed in the
    backward (a stem's activations, an FFN's hidden stretch): eager training on ``tensors``
    (a traced graph's partitioner chooses for itself)."""
    return policy.needs_grad(*tensors)


@recomputes.dispatch(_call, verify=lambda fn, *args: recomputes.verify(*_tensors(args)))
def recompute_in_eager_backward(fn: Callable, *args):
    """:func:`recompute_in_backward` outside a traced graph, whose partitioner chooses for
    itself what to keep: there ``fn(*args)``."""
    return checkpoint(fn, *args)


@recomputes.dispatch(lambda module, plain, fast, x, *args: plain(x, *args),
                     verify=lambda module, plain, fast, x, *_: recomputes.verify(
                         x, *module.parameters()))
def recompute_stretch(module: nn.Module, plain: Callable, fast: Callable, x, *args):
    """``plain(x, *args)``, the forward of ``module``; in eager training of ``x`` or the
    module's parameters ``fast(x, *args)``, the same forward with a stretch of it handed over
    to be recomputed in the backward (:func:`recompute_in_backward`)."""
    return fast(x, *args)
