"""The fast-path wing: every faster form of an op or a residual step, and the one policy that
decides which runs.

:mod:`mmlinattn.ops` writes each paper's mathematics plainly; this package holds the forms
that compute the same values faster or in less memory (compiled loops, oneDNN epilogues,
custom autograd Functions, in-place, chunked and sliced variants, Triton kernels for CUDA).  :mod:`.policy` decides per
call which form runs (plain / traced / eager training / eager inference, and the device) and
declares the environment switches in one table (:data:`.policy.SWITCHES`); every entry falls
back to its :mod:`mmlinattn.ops` form.

Entries the layers call: :func:`soft_attention`, :func:`nala_attention`,
:func:`linear_attention`, :func:`grid_diffusion`, :func:`pure_infsa`; the residual steps of
:mod:`.residual`; the linears of :mod:`.onednn`; the depthwise convs of :mod:`.depthwise`.
"""
from . import policy
from .chunked import linear_attention
from .diffusion import grid_diffusion
from .infsa import pure_infsa
from .nala import nala_attention
from .soft import soft_attention

__all__ = ['policy', 'soft_attention', 'nala_attention', 'linear_attention', 'grid_diffusion',
           'pure_infsa']
