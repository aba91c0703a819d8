"""The fast-path wing: every faster form of an op or a residual step, and the dispatch that
decides which runs.

:mod:`mmlinattn.ops` writes each paper's mathematics plainly; this package holds the forms
that compute the same values faster or in less memory (compiled loops, oneDNN epilogues,
custom autograd Functions, in-place, chunked and sliced variants, Triton kernels for CUDA).  A
backbone's forward builds one call context where it starts (:func:`.policy.decide_once`: the
switches, tracing, special modes, the device); each fast form's rule is a
:class:`.dispatch.FastForm` beside the form, whose availability is asked once per context and
whose verifier checks each call's tensors; every entry falls back to its :mod:`mmlinattn.ops`
form.  The switches are declared in one table (:data:`.policy.SWITCHES`).

Entries the layers call: :func:`fast_soft_attention`, :func:`fast_nala_attention`,
:func:`fast_linear_attention`, :func:`fast_grid_diffusion`, :func:`fast_pure_infsa` (each
named apart from its plain form in :mod:`mmlinattn.ops`); the residual steps of
:mod:`.residual` (a local branch in row stripes on large maps: :mod:`.row_stripes`); the
linears of :mod:`.onednn`; the depthwise convs of :mod:`.depthwise`.
The base class :class:`.residual.ResidualBranch` holds the seam's protocol;
:func:`.residual.hidden_chain` composes a branch's plain forward with the fast forms.
"""
from . import dispatch, policy
from .policy import decide_once
from .chunked import fast_linear_attention
from .diffusion import fast_grid_diffusion
from .infsa import fast_pure_infsa
from .nala import fast_nala_attention
from .soft import fast_soft_attention
from .row_stripes import per_pixel
from .stripe import Stripe, Stripes

__all__ = ['dispatch', 'policy', 'decide_once', 'fast_soft_attention', 'fast_nala_attention',
           'fast_linear_attention', 'fast_grid_diffusion', 'fast_pure_infsa', 'per_pixel',
           'Stripe', 'Stripes']
