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

The model layers take what they run from here, this module only: the attention entries
(:func:`fast_soft_attention`, :func:`fast_nala_attention`, :func:`fast_linear_attention`,
:func:`fast_grid_diffusion`, :func:`fast_pure_infsa`, each named apart from its plain form in
:mod:`mmlinattn.ops`) and the pieces of their passes over row stripes; the residual seam
(:func:`residual_step`, :func:`parallel_residual`), which runs a branch through the interface
of :class:`mmlinattn.models.layers.branch.Branch` (fused into the residual sum, or in row
stripes: :mod:`.row_stripes`); the linears of :mod:`.onednn`; the depthwise convs of
:mod:`.depthwise` (:func:`conv_same`); a stem in row stripes (:func:`run_stem`); the row
stripes (:class:`Stripe`, :class:`Stripes`, :func:`per_pixel`).
"""
from . import dispatch, policy
from .policy import decide_once
from .chunked import (fast_linear_attention, key_sums, linear_attention_features,
                      query_side_given_sums)
from .depthwise import conv_same
from .diffusion import fast_grid_diffusion
from .infsa import (fast_pure_infsa, infsa_context, infsa_mean_query, infsa_pool_sums,
                    infsa_query_sums)
from .nala import fast_nala_attention, nala_inference_maps
from .onednn import apply_linear, fused_gelu, linear_act, linear_blocks
from .recompute import (checkpoint, recompute_in_backward, recompute_in_eager_backward,
                        recomputes)
from .residual import (Step, branch_output, hidden_chain, normed_linears, parallel_residual,
                       residual_step)
from .row_stripes import (add_position, per_pixel, per_pixel_rows, reuse_stage_input,
                          run_stem)
from .soft import fast_soft_attention, soft_middle, soft_output, soft_value_sums
from .stripe import Stripe, Stripes

__all__ = [
    'dispatch', 'policy', 'decide_once', 'fast_soft_attention', 'fast_nala_attention',
    'fast_linear_attention', 'fast_grid_diffusion', 'fast_pure_infsa', 'key_sums',
    'linear_attention_features', 'query_side_given_sums', 'conv_same', 'infsa_context',
    'infsa_mean_query', 'infsa_pool_sums', 'infsa_query_sums', 'nala_inference_maps',
    'apply_linear', 'fused_gelu', 'linear_act', 'linear_blocks', 'checkpoint',
    'recompute_in_backward', 'recompute_in_eager_backward', 'recomputes', 'Step',
    'branch_output', 'hidden_chain', 'normed_linears', 'parallel_residual', 'residual_step',
    'add_position', 'per_pixel', 'per_pixel_rows', 'reuse_stage_input', 'run_stem',
    'soft_middle', 'soft_output', 'soft_value_sums', 'Stripe', 'Stripes'
]
